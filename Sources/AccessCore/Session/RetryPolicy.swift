/// How often and after which delays a retryable failure is tried again.
///
/// The delay function is deterministic: attempt 2 waits `delays[0]`, attempt 3 `delays[1]`, and
/// so on; past the list, the last delay repeats. No jitter: the sessions of one process are few,
/// and a predictable schedule is easier to explain to a user watching the state.
public struct RetryPolicy: Sendable, Equatable {
    /// Total attempts, the first included (1 = never retry).
    public let maxAttempts: Int
    /// Delays before attempts 2, 3, …
    public let delays: [Duration]

    /// The default: up to three retries after 1 s, 5 s and 15 s.
    public static let standard = RetryPolicy(maxAttempts: 4, delays: [.seconds(1), .seconds(5), .seconds(15)])
    /// A single attempt.
    public static let never = RetryPolicy(maxAttempts: 1, delays: [])

    /// Creates a policy; `maxAttempts` below 1 counts as 1, negative delays as zero.
    public init(maxAttempts: Int, delays: [Duration]) {
        self.maxAttempts = max(1, maxAttempts)
        self.delays = delays.map { max(.zero, $0) }
    }

    /// The delay before `attempt` (2 or more), or nil when no such attempt is allowed.
    public func delay(beforeAttempt attempt: Int) -> Duration? {
        guard attempt >= 2, attempt <= maxAttempts else { return nil }
        guard let last = delays.last else { return .zero }
        let index = attempt - 2
        return index < delays.count ? delays[index] : last
    }
}
