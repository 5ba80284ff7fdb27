/// Where a tunnel session is. Every subscriber of a session's state stream sees the current
/// state first, then each change.
public enum ConnectionState: Sendable, Equatable, CustomStringConvertible {
    /// Created, never connected.
    case idle
    /// Getting a credential (service token at hand, or an OAuth login in progress).
    case authenticating
    /// Opening the WebSocket to the edge, then the local listener.
    case connecting
    /// Ready: the local listener is on `localPort` (0 for a port-less stream).
    case connected(localPort: UInt16)
    /// Waiting before attempt `attempt` (2, 3, …) after a retryable failure.
    case reconnecting(attempt: Int)
    /// Closed on request; `connect` may be called again.
    case disconnected
    /// Stopped by a failure; `connect` may be called again.
    case failed(TunnelFailure)

    /// Whether `connect` is allowed from here (nothing is in progress or up).
    public var isTerminal: Bool {
        switch self {
        case .idle, .disconnected, .failed: return true
        case .authenticating, .connecting, .connected, .reconnecting: return false
        }
    }

    /// A short name for logs.
    public var description: String {
        switch self {
        case .idle: return "idle"
        case .authenticating: return "authenticating"
        case .connecting: return "connecting"
        case .connected(let port): return "connected(localPort: \(port))"
        case .reconnecting(let attempt): return "reconnecting(attempt: \(attempt))"
        case .disconnected: return "disconnected"
        case .failed(let failure): return "failed(\(failure.message))"
        }
    }
}
