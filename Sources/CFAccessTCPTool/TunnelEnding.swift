import AccessTransport
import CFAccessTCP
import FoundationEssentials
import Logging

/// Reports a failure as one plain line on stderr and, when a log file is in use, in it too.
struct FailureReport: Sendable {
    let logger: Logger
    let toLogFile: Bool

    func line(_ message: String) {
        writeStderr("cf-access-tcp: \(message)")
        if toLogFile { logger.error("\(message)") }
    }

    /// A failure's plain line (with the flags to look at), and at debug level its kind and
    /// technical detail (neither holds a secret).
    func failure(_ failure: TunnelFailure) {
        line(failure.withFlags)
        logger.debug("failure kind: \(failure.kind), category: \(failure.category), detail: \(failure.detail)")
    }
}

extension TunnelStream {
    /// Why the tunnel ended, waiting at most `seconds`; nil if it did not say in time.
    func ended(within seconds: Double) async -> TunnelEnd? {
        let end = OneShot<TunnelEnd>()
        let watcher = Task { end.fulfil(await self.ended) }
        defer { watcher.cancel() }
        return await end.value(within: seconds)
    }
}
