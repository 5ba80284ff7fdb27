/// The client side of a SOCKS handshake on a dynamic forward (OpenSSH's `-D`), as OpenSSH's
/// ssh serves it: SOCKS5 (RFC 1928) without authentication and SOCKS4/4a, `CONNECT` only. A
/// pure value fed with the bytes as they arrive; the connection's channel is opened to
/// ``Outcome/connect(host:port:)``'s target, and ``reply(succeeded:)`` is sent before any data.
package struct SOCKSHandshake: Sendable {
    /// What the bytes so far amount to.
    package enum Outcome: Sendable, Equatable {
        /// More bytes are needed; `send` (if not empty) goes to the client first.
        case needMore(send: [UInt8])
        /// The client asks to connect to `host`:`port`.
        case connect(host: String, port: Int)
        /// Refused: `send` (possibly empty) goes to the client, then the connection is closed;
        /// `reason` says why, in a line.
        case refused(send: [UInt8], reason: String)
    }

    private var buffer: [UInt8] = []
    private var greeted = false
    private var version: UInt8 = 0
    /// The SOCKS5 method reply went out with a `needMore` (else it goes before the final reply).
    private var methodReplySent = false

    /// A handshake that has seen nothing.
    package init() {}

    /// Feeds the next bytes from the client.
    package mutating func feed(_ bytes: some Collection<UInt8>) -> Outcome {
        buffer.append(contentsOf: bytes)
        guard let first = buffer.first else { return .needMore(send: []) }
        switch first {
        case 5: return socks5()
        case 4: return socks4()
        default: return .refused(send: [], reason: "not a SOCKS client (first byte \(first))")
        }
    }

    /// The reply after the channel's open: success, or `connection refused` (SOCKS5) / rejected
    /// (SOCKS4); for SOCKS5, after the method reply if that did not go out yet.
    package func reply(succeeded: Bool) -> [UInt8] {
        if version == 4 { return [0, succeeded ? 0x5a : 0x5b, 0, 0, 0, 0, 0, 0] }
        return (methodReplySent ? [] : [5, 0]) + [5, succeeded ? 0 : 5, 0, 1, 0, 0, 0, 0, 0, 0]
    }

    /// Bytes the client sent after its request (data for the connection), taken once.
    package mutating func takeRest() -> [UInt8] {
        defer { buffer = [] }
        return buffer
    }

    private mutating func socks5() -> Outcome {
        version = 5
        if !greeted {
            guard buffer.count >= 2 else { return .needMore(send: []) }
            let count = Int(buffer[1])
            guard buffer.count >= 2 + count else { return .needMore(send: []) }
            let methods = buffer[2..<(2 + count)]
            let acceptable = methods.contains(0)
            buffer.removeFirst(2 + count)
            guard acceptable else {
                return .refused(send: [5, 0xff], reason: "the SOCKS5 client offers no method without authentication")
            }
            greeted = true
            let next = socks5Request()
            if case .needMore = next {
                methodReplySent = true
                return .needMore(send: [5, 0])
            }
            if case .refused(let send, let reason) = next { return .refused(send: [5, 0] + send, reason: reason) }
            return next   // the request came in the same read: the method reply goes before the final reply
        }
        return socks5Request()
    }

    private mutating func socks5Request() -> Outcome {
        guard buffer.count >= 4 else { return .needMore(send: []) }
        guard buffer[0] == 5 else { return .refused(send: [], reason: "a bad SOCKS5 request") }
        guard buffer[1] == 1 else {
            return .refused(send: [5, 7, 0, 1, 0, 0, 0, 0, 0, 0], reason: "SOCKS5 command \(buffer[1]) is not supported (only CONNECT)")
        }
        let host: String
        let offset: Int
        switch buffer[3] {
        case 1:
            guard buffer.count >= 10 else { return .needMore(send: []) }
            host = buffer[4..<8].map { String($0) }.joined(separator: ".")
            offset = 8
        case 3:
            guard buffer.count >= 5 else { return .needMore(send: []) }
            let length = Int(buffer[4])
            guard buffer.count >= 5 + length + 2 else { return .needMore(send: []) }
            host = String(decoding: buffer[5..<(5 + length)], as: UTF8.self)
            offset = 5 + length
        case 4:
            guard buffer.count >= 22 else { return .needMore(send: []) }
            host = stride(from: 4, to: 20, by: 2).map { String(UInt16(buffer[$0]) << 8 | UInt16(buffer[$0 + 1]), radix: 16) }
                .joined(separator: ":")
            offset = 20
        default:
            return .refused(send: [5, 8, 0, 1, 0, 0, 0, 0, 0, 0], reason: "SOCKS5 address type \(buffer[3]) is not supported")
        }
        let port = Int(buffer[offset]) << 8 | Int(buffer[offset + 1])
        buffer.removeFirst(offset + 2)
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "\0" }) else {
            return .refused(send: [5, 1, 0, 1, 0, 0, 0, 0, 0, 0], reason: "a bad SOCKS5 host name")
        }
        return .connect(host: host, port: port)
    }

    private mutating func socks4() -> Outcome {
        version = 4
        // VN CD DSTPORT(2) DSTIP(4) USERID NUL, then for SOCKS4a (DSTIP 0.0.0.x) HOST NUL.
        guard buffer.count >= 9 else { return .needMore(send: []) }
        guard buffer[1] == 1 else {
            return .refused(send: [0, 0x5b, 0, 0, 0, 0, 0, 0], reason: "SOCKS4 command \(buffer[1]) is not supported")
        }
        guard let userEnd = buffer[8...].firstIndex(of: 0) else {
            return buffer.count > 1024 ? .refused(send: [], reason: "a SOCKS4 user name without its end") : .needMore(send: [])
        }
        let port = Int(buffer[2]) << 8 | Int(buffer[3])
        let address = Array(buffer[4..<8])
        var host = address.map { String($0) }.joined(separator: ".")
        var consumed = userEnd + 1
        if address[0] == 0 && address[1] == 0 && address[2] == 0 && address[3] != 0 {
            guard let hostEnd = buffer[(userEnd + 1)...].firstIndex(of: 0) else {
                return buffer.count > 1024 ? .refused(send: [], reason: "a SOCKS4a host name without its end") : .needMore(send: [])
            }
            host = String(decoding: buffer[(userEnd + 1)..<hostEnd], as: UTF8.self)
            consumed = hostEnd + 1
        }
        buffer.removeFirst(consumed)
        return .connect(host: host, port: port)
    }
}
