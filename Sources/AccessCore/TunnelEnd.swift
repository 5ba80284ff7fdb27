/// Why an established tunnel (one WebSocket and its local side) ended.
///
/// A clean end is a Close handshake started by either side, or our own shutdown; everything
/// else lost bytes or may have: the owner reports it (``message(host:)``, ``failure(host:)``).
public enum TunnelEnd: Sendable, Equatable, CustomStringConvertible {
    /// The local side ended (EOF) and the WebSocket closed with our Close frame (`code` sent).
    case closedByLocal(code: UInt16)
    /// The edge sent a Close frame with `code` (nil: no status code in it).
    case closedByEdge(code: UInt16?)
    /// We closed it on request (disconnect, listener stopped, signal).
    case shutdown
    /// A listener stopped by itself after this long without a connection (its idle exit).
    case listenerIdle(after: Duration)
    /// The edge's connection ended without a Close frame (TCP reset, TLS stream cut).
    case reset(detail: String)
    /// The edge broke the WebSocket protocol; we closed with Close 1002/1003.
    case protocolViolation(detail: String)
    /// Nothing came from the edge (no bytes, no pong) for this long.
    case keepaliveTimeout(after: Duration)
    /// Writing to the edge failed.
    case writeFailed(detail: String)
    /// Reading or writing the local side failed (e.g. stdout not writable).
    case localIOFailed(detail: String)
    /// The WebSocket never opened (a listener connection's dial failed).
    case failedToOpen(TunnelFailure)

    /// Close codes from the edge that end a tunnel normally: 1000 (normal), 1001 (going away).
    public static let normalCloseCodes: Set<UInt16> = [1000, 1001]

    /// Whether the tunnel ended as both sides meant it to.
    public var isClean: Bool {
        switch self {
        case .closedByLocal, .shutdown, .listenerIdle: return true
        case .closedByEdge(let code): return code.map { Self.normalCloseCodes.contains($0) } ?? true
        case .reset, .protocolViolation, .keepaliveTimeout, .writeFailed, .localIOFailed, .failedToOpen: return false
        }
    }

    /// A plain line for people, naming what happened to the tunnel to `host`.
    public func message(host: String) -> String {
        switch self {
        case .closedByLocal: return "the tunnel to \(host) was closed by the local side"
        case .closedByEdge(let code):
            let shown = code.map { " (code \($0))" } ?? ""
            return isClean ? "the edge closed the tunnel to \(host)\(shown)"
                : "the edge closed the tunnel to \(host) with an error\(shown): the connection is lost"
        case .shutdown: return "the tunnel to \(host) was closed"
        case .listenerIdle(let idle):
            return "the listener for \(host) stopped after \(idle.components.seconds) s without a connection"
        case .reset(let detail):
            return "the edge reset the tunnel to \(host) mid-stream (\(detail)): the connection is lost"
        case .protocolViolation(let detail):
            return "the edge broke the WebSocket protocol (\(detail)): the tunnel to \(host) was closed"
        case .keepaliveTimeout(let silence):
            return "the edge did not answer for \(silence.components.seconds) s (keepalive): the tunnel to \(host) is lost"
        case .writeFailed(let detail):
            return "writing to the edge failed (\(detail)): the tunnel to \(host) is lost"
        case .localIOFailed(let detail):
            return "\(detail); the tunnel to \(host) was closed"
        case .failedToOpen(let failure):
            return failure.message
        }
    }

    /// The failure a session reports when the tunnel ended this way; nil for a clean end.
    public func failure(host: String) -> TunnelFailure? {
        guard !isClean else { return nil }
        if case .failedToOpen(let failure) = self { return failure }
        let category: TunnelFailure.Category
        let kind: TunnelFailure.Kind
        switch self {
        case .protocolViolation: (category, kind) = (.protocolViolation, .protocolViolation)
        case .localIOFailed: (category, kind) = (.localResource, .localIO)
        default: (category, kind) = (.transport, .connectionLost)
        }
        return TunnelFailure(category: category, isRetryable: false, message: message(host: host), detail: description,
                             kind: kind)
    }

    /// A short name for logs.
    public var description: String {
        switch self {
        case .closedByLocal(let code): return "closed by the local side (Close \(code))"
        case .closedByEdge(let code): return "closed by the edge (Close \(code.map(String.init) ?? "without code"))"
        case .shutdown: return "shut down"
        case .listenerIdle(let idle): return "listener idle for \(idle.components.seconds) s"
        case .reset(let detail): return "reset: \(detail)"
        case .protocolViolation(let detail): return "protocol violation: \(detail)"
        case .keepaliveTimeout(let silence): return "keepalive timeout after \(silence.components.seconds) s"
        case .writeFailed(let detail): return "write to the edge failed: \(detail)"
        case .localIOFailed(let detail): return "local I/O failed: \(detail)"
        case .failedToOpen(let failure): return "failed to open: \(failure.message)"
        }
    }
}
