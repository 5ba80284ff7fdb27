import CFAccessSSH
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The terminal modes of a PTY request (RFC 4254 §8), from a termios (issue 16 point 15).
@Suite("terminal modes: termios to RFC 4254 opcodes, and their encoding")
struct TerminalModesTests {
    @Test("special characters, flags and speeds of a termios become their opcodes; no character is 255")
    func fromTermios() {
        var settings = termios()
        withUnsafeMutableBytes(of: &settings.c_cc) { bytes in
            bytes[Int(VINTR)] = 0x18        // ^X instead of ^C
            bytes[Int(VERASE)] = 0x08       // ^H
            bytes[Int(VEOF)] = 0x04
            bytes[Int(VSTOP)] = 0           // disabled
        }
        settings.c_iflag = tcflag_t(ICRNL | IXON | IUTF8)
        settings.c_lflag = tcflag_t(ISIG | ICANON | ECHO | ECHOE)
        settings.c_oflag = tcflag_t(OPOST | ONLCR)
        settings.c_cflag = tcflag_t(CS8)
        // Linux keeps one speed for both directions.
        cfsetispeed(&settings, speed_t(B115200))
        cfsetospeed(&settings, speed_t(B115200))
        let modes = SSHTerminalModes(termios: settings)
        #expect(modes[1] == 0x18)          // VINTR
        #expect(modes[3] == 0x08)          // VERASE
        #expect(modes[5] == 0x04)          // VEOF
        #expect(modes[9] == 255)           // VSTOP disabled
        #expect(modes[36] == 1)            // ICRNL
        #expect(modes[34] == 0)            // INLCR
        #expect(modes[38] == 1)            // IXON
        #expect(modes[42] == 1)            // IUTF8
        #expect(modes[50] == 1 && modes[51] == 1 && modes[53] == 1)   // ISIG ICANON ECHO
        #expect(modes[56] == 0)            // ECHONL
        #expect(modes[70] == 1 && modes[72] == 1)   // OPOST ONLCR
        #expect(modes[91] == 1 && modes[90] == 0)   // CS8, not CS7
        #expect(modes[92] == 0)            // PARENB
        #expect(modes[128] == 115_200)
        #expect(modes[129] == 115_200)
        // Each opcode once.
        #expect(Set(modes.modes.map(\.opcode)).count == modes.modes.count)
    }

    @Test("the encoding: opcode byte, big-endian uint32, ended by TTY_OP_END")
    func encoding() {
        let modes = SSHTerminalModes([.init(opcode: 1, value: 3), .init(opcode: 128, value: 38400)])
        #expect(modes.encoded == [1, 0, 0, 0, 3, 128, 0, 0, 0x96, 0x00, 0])
        #expect(SSHTerminalModes.none.encoded == [0])
        // Cut to what fits (libssh2: type and modes ≤ 256 bytes), the first modes kept.
        #expect(modes.encoded(fitting: 10) == [1, 0, 0, 0, 3, 0])
        #expect(modes.encoded(fitting: 3) == [0])
        let all = SSHTerminalModes(termios: termios())
        #expect(all.encoded.count > 256 - "xterm-256color".utf8.count, "every mode no longer overflows: drop the cut?")
        let cut = all.encoded(fitting: 256 - "xterm-256color".utf8.count)
        #expect(cut.count <= 242 && cut.last == 0)
        #expect(cut.count / 5 >= 40)
        #expect(Array(cut.prefix(5)) == [1, 0, 0, 0, 255])   // VINTR first (no character in a zero termios)
        #expect(cut.contains(128) && cut.contains(129))          // the speeds are kept
    }
}
