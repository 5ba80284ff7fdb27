import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The terminal modes of a PTY request (RFC 4254 §8): the special characters, the input, local,
/// output and control flags, and the speeds, as opcode/value pairs. Taken from the local
/// terminal (``init(terminal:)``), they make the remote terminal behave like it: the same
/// interrupt and erase characters, the same CR/NL handling.
public struct SSHTerminalModes: Sendable, Equatable {
    /// One mode: the RFC 4254 opcode and its value.
    public struct Mode: Sendable, Equatable {
        /// The opcode (`VINTR` 1, `ICRNL` 36, `ECHO` 53, `TTY_OP_ISPEED` 128, …).
        public let opcode: UInt8
        /// The value: a character (255 for none), 0/1 for a flag, bits per second for a speed.
        public let value: UInt32

        /// A mode.
        public init(opcode: UInt8, value: UInt32) {
            self.opcode = opcode
            self.value = value
        }
    }

    /// The modes, in the order they are sent.
    public var modes: [Mode]

    /// The given modes.
    public init(_ modes: [Mode]) {
        self.modes = modes
    }

    /// No modes: the server uses its defaults.
    public static let none = SSHTerminalModes([])

    /// The modes of the terminal on `terminal` (as OpenSSH's ssh sends them); nil if it is not
    /// a terminal. The caller keeps owning the descriptor.
    public init?(terminal: FileDescriptor) {
        var settings = termios()
        guard tcgetattr(terminal.rawValue, &settings) == 0 else { return nil }
        self.init(termios: settings)
    }

    /// The value of `opcode`, if it is among the modes.
    public subscript(opcode: UInt8) -> UInt32? {
        modes.first { $0.opcode == opcode }?.value
    }

    /// The encoded modes string of the PTY request: each opcode byte and its value as a
    /// big-endian uint32, then `TTY_OP_END` (0).
    public var encoded: [UInt8] { encoded(fitting: Int.max) }

    /// The encoding of as many modes (in order) as fit in `limit` bytes with the end mark, for
    /// an engine that bounds the request. The modes of ``init(terminal:)`` come most useful
    /// first, so what is left out is what matters least.
    package func encoded(fitting limit: Int) -> [UInt8] {
        let count = min(modes.count, max(0, (limit - 1) / 5))
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count * 5 + 1)
        for mode in modes.prefix(count) {
            bytes.append(mode.opcode)
            bytes += [UInt8(mode.value >> 24), UInt8((mode.value >> 16) & 0xff), UInt8((mode.value >> 8) & 0xff),
                      UInt8(mode.value & 0xff)]
        }
        bytes.append(0)
        return bytes
    }

    /// The modes of `settings`, a terminal's termios (every mode RFC 4254 and RFC 8160 name that
    /// Linux has), most useful first: the special characters, the speeds, the line discipline's
    /// flags, then the serial-line and upper-case relics.
    package init(termios settings: termios) {
        var modes: [Mode] = []
        var characters = settings.c_cc
        let specials: [(UInt8, Int32)] = [
            (1, VINTR), (2, VQUIT), (3, VERASE), (4, VKILL), (5, VEOF), (6, VEOL), (7, VEOL2), (8, VSTART),
            (9, VSTOP), (10, VSUSP), (12, VREPRINT), (13, VWERASE), (14, VLNEXT), (18, VDISCARD),
        ]
        withUnsafeBytes(of: &characters) { bytes in
            for (opcode, index) in specials {
                let character = bytes[Int(index)]
                // _POSIX_VDISABLE (0 on Linux) is sent as 255, "no character".
                modes.append(Mode(opcode: opcode, value: character == 0 ? 255 : UInt32(character)))
            }
        }
        func flags(_ field: tcflag_t, _ table: [(UInt8, Int32)]) {
            for (opcode, bit) in table {
                modes.append(Mode(opcode: opcode, value: field & tcflag_t(bit) != 0 ? 1 : 0))
            }
        }
        var copy = settings
        modes.append(Mode(opcode: 128, value: Self.baud(cfgetispeed(&copy))))
        modes.append(Mode(opcode: 129, value: Self.baud(cfgetospeed(&copy))))
        flags(settings.c_iflag, [(36, ICRNL), (38, IXON), (39, IXANY), (40, IXOFF), (41, IMAXBEL), (42, IUTF8),
                                 (34, INLCR), (35, IGNCR)])
        flags(settings.c_lflag, [(50, ISIG), (51, ICANON), (53, ECHO), (54, ECHOE), (55, ECHOK), (56, ECHONL),
                                 (59, IEXTEN), (60, ECHOCTL), (61, ECHOKE), (57, NOFLSH), (58, TOSTOP)])
        flags(settings.c_oflag, [(70, OPOST), (72, ONLCR), (73, OCRNL), (74, ONOCR), (75, ONLRET)])
        modes.append(Mode(opcode: 90, value: settings.c_cflag & tcflag_t(CSIZE) == tcflag_t(CS7) ? 1 : 0))
        modes.append(Mode(opcode: 91, value: settings.c_cflag & tcflag_t(CSIZE) == tcflag_t(CS8) ? 1 : 0))
        flags(settings.c_cflag, [(92, PARENB), (93, PARODD)])
        flags(settings.c_iflag, [(30, IGNPAR), (31, PARMRK), (32, INPCK), (33, ISTRIP), (37, IUCLC)])
        flags(settings.c_lflag, [(52, XCASE), (62, PENDIN)])
        flags(settings.c_oflag, [(71, OLCUC)])
        self.modes = modes
    }

    /// Bits per second of a `B…` speed constant (9600 for one not in the table).
    static func baud(_ speed: speed_t) -> UInt32 {
        let table: [(speed_t, UInt32)] = [
            (speed_t(B0), 0), (speed_t(B50), 50), (speed_t(B75), 75), (speed_t(B110), 110), (speed_t(B134), 134),
            (speed_t(B150), 150), (speed_t(B200), 200), (speed_t(B300), 300), (speed_t(B600), 600),
            (speed_t(B1200), 1200), (speed_t(B1800), 1800), (speed_t(B2400), 2400), (speed_t(B4800), 4800),
            (speed_t(B9600), 9600), (speed_t(B19200), 19200), (speed_t(B38400), 38400), (speed_t(B57600), 57600),
            (speed_t(B115200), 115_200), (speed_t(B230400), 230_400), (speed_t(B460800), 460_800),
            (speed_t(B500000), 500_000), (speed_t(B576000), 576_000), (speed_t(B921600), 921_600),
            (speed_t(B1000000), 1_000_000), (speed_t(B1152000), 1_152_000), (speed_t(B1500000), 1_500_000),
            (speed_t(B2000000), 2_000_000), (speed_t(B2500000), 2_500_000), (speed_t(B3000000), 3_000_000),
            (speed_t(B3500000), 3_500_000), (speed_t(B4000000), 4_000_000),
        ]
        return table.first { $0.0 == speed }?.1 ?? 9600
    }
}
