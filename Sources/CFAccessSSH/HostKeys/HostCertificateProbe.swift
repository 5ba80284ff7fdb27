import AccessCore
import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Reads an SSH server's host certificate over a connection of its own (issue 25 part 2 point 2).
///
/// Neither linked library can take a host certificate in its key exchange: libssh 0.10's client
/// drops the `…-cert-v01@openssh.com` algorithms from the list it sends, and libssh2 1.10 names
/// some of them but cannot verify with them (their `init` is missing). So the session runs its
/// key exchange for the plain key, and this probe asks the server, on a second connection, for
/// the certificate of that key: it offers only certificate algorithms (and curve25519, whose
/// client share may be any 32 bytes) and reads the host key out of the server's
/// `SSH_MSG_KEX_ECDH_REPLY`, then hangs up. Nothing of the exchange is kept or trusted: the
/// certificate vouches only through its CA's signature, and only for the key the session's own
/// key exchange proved the server holds (``SSHSessionCore`` presents it to the host-key
/// delegate only when the two keys are the same).
///
/// A pure value: ``opening`` is what to send, ``feed(_:)`` takes what arrives.
package struct HostCertificateProbe: Sendable {
    /// What the bytes so far amount to.
    package enum Step: Sendable, Equatable {
        case needMore
        /// The server's certificate blob.
        case certificate([UInt8])
        /// No certificate: why, in words.
        case failed(String)
    }

    /// The largest packet accepted (OpenSSH's limit on a packet is 256 KiB).
    static let maxPacket = 256 * 1024

    private var scanner = IdentificationScanner()
    private var identified = false
    private var buffer: [UInt8] = []
    private(set) var step = Step.needMore

    /// A probe that has seen nothing.
    package init() {}

    /// The client's identification, its KEXINIT and its curve25519 share, sent at once (the
    /// share may follow the KEXINIT before the server's: curve25519 is the only method offered).
    package static func opening() -> [UInt8] {
        let random: (Int) -> [UInt8] = { count in
            var generator = SystemRandomNumberGenerator()
            return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        }
        var kexinit = SSHWireWriter()
        kexinit.byte(20)                                   // SSH_MSG_KEXINIT
        kexinit.raw(random(16))                            // cookie
        kexinit.string("curve25519-sha256,curve25519-sha256@libssh.org")
        kexinit.string(HostKeyAlgorithms.certificateOrder.joined(separator: ","))
        let ciphers = "aes128-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"
        let macs = "hmac-sha2-256-etm@openssh.com,hmac-sha2-512-etm@openssh.com,hmac-sha2-256,hmac-sha2-512"
        for list in [ciphers, ciphers, macs, macs, "none,zlib@openssh.com", "none,zlib@openssh.com", "", ""] { kexinit.string(list) }
        kexinit.byte(0)                                    // first_kex_packet_follows
        kexinit.uint32(0)
        var share = SSHWireWriter()
        share.byte(30)                                     // SSH_MSG_KEX_ECDH_INIT
        share.string(random(32))
        return Array("SSH-2.0-cf-access-tcp\r\n".utf8) + packet(kexinit.bytes, padding: random) + packet(share.bytes, padding: random)
    }

    /// `payload` as an unencrypted binary packet (RFC 4253 §6): at least 4 bytes of padding,
    /// the whole a multiple of 8 bytes.
    static func packet(_ payload: [UInt8], padding random: (Int) -> [UInt8]) -> [UInt8] {
        var padding = 8 - (5 + payload.count) % 8
        if padding < 4 { padding += 8 }
        var writer = SSHWireWriter()
        writer.uint32(UInt32(1 + payload.count + padding))
        writer.byte(UInt8(padding))
        writer.raw(payload)
        writer.raw(random(padding))
        return writer.bytes
    }

    /// Feeds the server's next bytes; returns the step so far.
    @discardableResult
    package mutating func feed(_ bytes: [UInt8]) -> Step {
        guard step == .needMore else { return step }
        if !identified {
            switch scanner.feed(bytes) {
            case .needMore: return step
            case .refused(let why):
                step = .failed("the peer is \(why)")
                return step
            case .identified:
                identified = true
                buffer = Array(scanner.passOn.dropFirst(scanner.identificationLineLength))
            }
        } else {
            buffer += bytes
        }
        while buffer.count >= 5 {
            let length = Int(buffer[0]) << 24 | Int(buffer[1]) << 16 | Int(buffer[2]) << 8 | Int(buffer[3])
            guard length >= 5, length <= Self.maxPacket, Int(buffer[4]) < length else {
                step = .failed("the server sent a malformed packet")
                return step
            }
            guard buffer.count >= 4 + length else { return step }
            let payload = Array(buffer[5..<(4 + length - Int(buffer[4]))])
            buffer.removeFirst(4 + length)
            if let done = examine(payload) {
                step = done
                return step
            }
        }
        return step
    }

    /// One packet's payload: the reply with the host key, a disconnect, or something to pass over.
    private func examine(_ payload: [UInt8]) -> Step? {
        guard let type = payload.first else { return nil }
        var reader = SSHWireReader(Array(payload.dropFirst()))
        switch type {
        case 31:   // SSH_MSG_KEX_ECDH_REPLY
            guard let key = try? reader.string() else { return .failed("the server's key-exchange reply is malformed") }
            guard SSHPublicKeyBlob.algorithm(key).hasSuffix(HostKeyAlgorithms.certificateSuffix) else {
                return .failed("the server presented no certificate")
            }
            return .certificate(key)
        case 1:    // SSH_MSG_DISCONNECT
            _ = try? reader.uint32()
            let reason = (try? reader.string()).map { ServerText.visible(String(decoding: $0, as: UTF8.self), limit: 200) } ?? ""
            return .failed("the server has no host certificate to offer (it disconnected: \(reason))")
        default:
            return nil   // its KEXINIT, SSH_MSG_IGNORE, SSH_MSG_DEBUG, …
        }
    }

    /// Runs the probe on the connected socket `fd` (blocking in `poll`, until `deadline`): the
    /// server's certificate blob, or why there is none.
    package static func run(fd: Int32, until deadline: Date) -> Result<[UInt8], SSHFailure> {
        let opening = opening()
        let failure: (String) -> Result<[UInt8], SSHFailure> = { .failure(SSHFailure(.protocolError, $0)) }
        var sent = 0
        var probe = HostCertificateProbe()
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return failure("the server did not answer in time") }
            var events = Int16(POLLIN)
            if sent < opening.count { events |= Int16(POLLOUT) }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, Int32(min(left * 1000, 60_000).rounded(.up)))
            if ready < 0 && errno != EINTR { return failure("poll: \(SystemError.current().text)") }
            guard ready > 0 else { continue }
            if sent < opening.count && entry.revents & Int16(POLLOUT) != 0 {
                let n = opening[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, SocketFlags.noSignal) }
                if n < 0 && errno != EAGAIN && errno != EINTR { return failure("the connection broke: \(SystemError.current().text)") }
                sent += max(0, n)
            }
            guard entry.revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 else { continue }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return failure("the server closed the connection before presenting a certificate") }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                return failure("the connection broke: \(SystemError.current().text)")
            }
            switch probe.feed(Array(scratch[..<n])) {
            case .needMore: continue
            case .certificate(let blob): return .success(blob)
            case .failed(let why): return failure(why)
            }
        }
    }
}
