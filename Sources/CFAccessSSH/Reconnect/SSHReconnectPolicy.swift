/// When an interactive session is reconnected after its connection was lost: what counts as a
/// loss, and the waits before each attempt (1 s, 5 s, 15 s by default, then give up).
///
/// A loss is a channel that ended with ``SSHChannelEnd/lost(_:)``: the tunnel closed or broke,
/// the SSH transport failed, or keepalives went unanswered (``SSHKeepalive``). A remote exit, a
/// signal, a local close or a local output failure is not a loss.
public struct SSHReconnectPolicy: Sendable, Equatable {
    /// The wait before each attempt, in order; their count is the number of attempts.
    public var delays: [Duration]

    /// A policy with these waits (default 1 s, 5 s, 15 s); an empty list never reconnects.
    public init(delays: [Duration] = [.seconds(1), .seconds(5), .seconds(15)]) {
        self.delays = delays
    }

    /// Never reconnect.
    public static let never = SSHReconnectPolicy(delays: [])

    /// The number of attempts before giving up.
    public var attempts: Int { delays.count }

    /// Whether `end` is a lost connection (worth reconnecting).
    public func isConnectionLoss(_ end: SSHChannelEnd) -> Bool {
        if case .lost = end { return true }
        return false
    }
}

/// The reconnect decisions for one session, without I/O or clock: events in (the channel ended,
/// an attempt failed or worked), what to do out. The caller waits, reconnects and says so.
///
/// ```swift
/// var reconnection = SSHReconnection(policy: SSHReconnectPolicy())
/// var action = reconnection.channelEnded(end)
/// while case .reconnect(let attempt, let attempts, let delay) = action {
///     try await Task.sleep(for: delay)
///     if let session = try? await connect() { reconnection.reconnected(); …; break }
///     action = reconnection.attemptFailed()
/// }
/// // .finish: the end was not a loss; .giveUp(attempts:): report the last failure
/// ```
public struct SSHReconnection: Sendable, Equatable {
    /// What to do next.
    public enum Action: Sendable, Equatable {
        /// The end was not a lost connection (or the policy never reconnects): finish with it.
        case finish
        /// Wait `after`, then make attempt number `attempt` (from 1) of `attempts`.
        case reconnect(attempt: Int, of: Int, after: Duration)
        /// Every attempt failed: end as a lost connection.
        case giveUp(attempts: Int)
    }

    /// The policy the decisions follow.
    public let policy: SSHReconnectPolicy
    /// Attempts made since the connection was lost (0 while connected).
    public private(set) var attemptsMade = 0

    /// Decisions by `policy`.
    public init(policy: SSHReconnectPolicy) {
        self.policy = policy
    }

    /// The channel ended: a lost connection starts reconnecting (if the policy allows), anything
    /// else finishes.
    public mutating func channelEnded(_ end: SSHChannelEnd) -> Action {
        attemptsMade = 0
        guard policy.isConnectionLoss(end) else { return .finish }
        return nextAttempt(orElse: .finish)
    }

    /// The last attempt failed: the next one, or give up.
    public mutating func attemptFailed() -> Action {
        nextAttempt(orElse: .giveUp(attempts: attemptsMade))
    }

    /// The last attempt worked: back to connected (a later loss starts again from the first wait).
    public mutating func reconnected() {
        attemptsMade = 0
    }

    private mutating func nextAttempt(orElse last: Action) -> Action {
        guard attemptsMade < policy.attempts else { return last }
        let delay = policy.delays[attemptsMade]
        attemptsMade += 1
        return .reconnect(attempt: attemptsMade, of: policy.attempts, after: delay)
    }
}
