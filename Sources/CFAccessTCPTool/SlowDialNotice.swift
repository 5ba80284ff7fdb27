import CFAccessTCP
import FoundationEssentials
import Logging

/// Says "Connecting to H…" (info level, so on stderr or in the log file) once a dial has gone on
/// for about a second, so a slow edge or a 15 s timeout is never a silent wait (issue 11.16).
/// Time spent authenticating (a login in a browser) does not count: only `.connecting`.
struct SlowDialNotice {
    /// How long a dial runs before the notice.
    static let delay: Duration = .seconds(1)

    /// Watches `tunnel` until the returned task is cancelled.
    static func watch(_ tunnel: AccessTunnel, host: String, logger: Logger) -> Task<Void, Never> {
        Task {
            var connectingSince: ContinuousClock.Instant?
            while !Task.isCancelled {
                if case .connecting = tunnel.currentState {
                    let since = connectingSince ?? .now
                    connectingSince = since
                    if ContinuousClock.now - since >= delay {
                        logger.info("Connecting to \(host)…")
                        return
                    }
                } else {
                    connectingSince = nil
                }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }
}
