/// The WebSocket Close handshake of one tunnel as a value: frames and requests in, what to send
/// out (RFC 6455 §5.5.1, §7.4). No I/O: the bridge sends what it is told and arms the 2 s timer.
struct CloseHandshake: Equatable {
    /// What to send.
    enum Action: Equatable {
        /// Nothing (our Close is already out).
        case none
        /// A Close frame with this payload (status code, big-endian, no reason).
        case sendClose([UInt8])
    }

    /// What a Close frame from the edge says.
    enum Verdict: Equatable {
        /// A well-formed Close, with its status code if it has one.
        case valid(code: UInt16?)
        /// A malformed Close (answered with 1002): why.
        case malformed(String)
    }

    /// Our Close frame is sent (or queued).
    private(set) var sent = false
    /// The edge's Close frame arrived.
    private(set) var received = false

    /// Both Close frames went their way: the TCP/TLS connection may end.
    var isComplete: Bool { sent && received }

    /// We close with `code` (local side ended, shutdown, keepalive, a violation by the edge).
    mutating func close(code: UInt16) -> Action {
        guard !sent else { return .none }
        sent = true
        return .sendClose(Self.payload(code))
    }

    /// The edge's Close frame: echo its code, or answer a malformed one with 1002.
    mutating func receive(_ payload: [UInt8]) -> (Verdict, Action) {
        received = true
        let verdict = Self.check(payload)
        guard !sent else { return (verdict, .none) }
        sent = true
        switch verdict {
        case .valid(let code): return (verdict, .sendClose(code.map(Self.payload) ?? []))
        case .malformed: return (verdict, .sendClose(Self.payload(1002)))
        }
    }

    /// RFC 6455 §5.5.1 and §7.4: a Close payload is empty, or a 2-byte status code a peer may
    /// send followed by a UTF-8 reason.
    static func check(_ payload: [UInt8]) -> Verdict {
        if payload.isEmpty { return .valid(code: nil) }
        if payload.count == 1 { return .malformed("a Close frame with a 1-byte payload") }
        let code = UInt16(payload[0]) << 8 | UInt16(payload[1])
        guard mayBeSent(code) else { return .malformed("a Close frame with status code \(code), which no endpoint may send") }
        guard String(validating: payload.dropFirst(2), as: UTF8.self) != nil else {
            return .malformed("a Close frame whose reason is not UTF-8")
        }
        return .valid(code: code)
    }

    /// Status codes an endpoint may put on the wire: 1000–1003, 1007–1011 (and 1012–1014 in use
    /// by servers), 3000–4999. 1004, 1005, 1006, 1015 and the rest are reserved.
    static func mayBeSent(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1014, 3000...4999: return true
        default: return false
        }
    }

    static func payload(_ code: UInt16) -> [UInt8] { [UInt8(code >> 8), UInt8(code & 0xFF)] }
}
