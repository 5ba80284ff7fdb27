import AccessCore

extension AccessTunnel.Options {
    /// An option of ``AccessTunnel/Options`` that can be out of range.
    public enum Field: String, Sendable, CaseIterable {
        /// ``AccessTunnel/Options/connectTimeout``.
        case connectTimeout
        /// ``AccessTunnel/Options/keepaliveInterval``.
        case keepaliveInterval
        /// ``AccessTunnel/Options/halfCloseLinger``.
        case halfCloseLinger
        /// The retries of ``AccessTunnel/Options/retry`` (its `maxAttempts` less one).
        case retries
        /// ``ListenerLimits/maxConcurrentConnections`` of ``AccessTunnel/Options/limits``.
        case maxConcurrentConnections
        /// ``ListenerLimits/maxCarrierThreads`` of ``AccessTunnel/Options/limits``.
        case maxCarrierThreads
        /// ``ListenerLimits/spareConnectionLifetime`` of ``AccessTunnel/Options/limits``.
        case spareConnectionLifetime
    }

    /// An option out of its range: which one, and the range in words.
    public struct OutOfRange: Error, Sendable, Equatable, CustomStringConvertible {
        /// The option.
        public let field: Field
        /// What it must be, e.g. "between 1 and 600 seconds".
        public let allowed: String
        /// The value given, as text (a duration in seconds).
        public let given: String

        /// "connectTimeout must be between 1 and 600 seconds (got 0)".
        public var description: String { "\(field.rawValue) must be \(allowed) (got \(given))" }
    }

    /// The range of ``connectTimeout``.
    public static let connectTimeoutRange: ClosedRange<Duration> = .seconds(1) ... .seconds(600)
    /// The range of ``keepaliveInterval`` (`.zero` = off).
    public static let keepaliveRange: ClosedRange<Duration> = .zero ... .seconds(86_400)
    /// The range of ``halfCloseLinger`` (`.zero` = close at once).
    public static let halfCloseLingerRange: ClosedRange<Duration> = .zero ... .seconds(3600)
    /// Retries allowed (attempts less one).
    public static let retriesRange: ClosedRange<Int> = 0...10
    /// The range of ``ListenerLimits/maxCarrierThreads``.
    public static let carrierThreadsRange: ClosedRange<Int> = 1...256
    /// The range of ``ListenerLimits/spareConnectionLifetime`` (nil = no spare): Cloudflare closes
    /// a client's idle HTTP/1.1 connection after 400 s, so a spare never waits that long.
    public static let spareLifetimeRange: ClosedRange<Duration> = .seconds(1) ... .seconds(300)

    /// Checks every range; `connect` and `openStream` call it first, so nothing starts with an
    /// option that makes no sense. Throws the first option out of range.
    public func validate() throws(OutOfRange) {
        guard Self.connectTimeoutRange.contains(connectTimeout) else {
            throw OutOfRange(field: .connectTimeout, allowed: "between 1 and 600 seconds", given: Self.shown(connectTimeout))
        }
        guard Self.keepaliveRange.contains(keepaliveInterval) else {
            throw OutOfRange(field: .keepaliveInterval, allowed: "between 0 (off) and 86400 seconds",
                             given: Self.shown(keepaliveInterval))
        }
        guard Self.halfCloseLingerRange.contains(halfCloseLinger) else {
            throw OutOfRange(field: .halfCloseLinger, allowed: "between 0 (close at once) and 3600 seconds",
                             given: Self.shown(halfCloseLinger))
        }
        guard Self.retriesRange.contains(retry.maxAttempts - 1) else {
            throw OutOfRange(field: .retries, allowed: "between 0 and 10", given: String(retry.maxAttempts - 1))
        }
        if let maximum = limits.maxConcurrentConnections, maximum < 1 {
            throw OutOfRange(field: .maxConcurrentConnections, allowed: "at least 1", given: String(maximum))
        }
        if let threads = limits.maxCarrierThreads, !Self.carrierThreadsRange.contains(threads) {
            throw OutOfRange(field: .maxCarrierThreads, allowed: "between 1 and 256", given: String(threads))
        }
        if let lifetime = limits.spareConnectionLifetime, !Self.spareLifetimeRange.contains(lifetime) {
            throw OutOfRange(field: .spareConnectionLifetime, allowed: "between 1 and 300 seconds (nil: no spare)",
                             given: Self.shown(lifetime))
        }
    }

    /// A duration in seconds, as a whole number when it is one ("601", "-0.5").
    private static func shown(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 { return String(seconds) }
        return String(Double(seconds) + Double(attoseconds) / 1e18)
    }
}
