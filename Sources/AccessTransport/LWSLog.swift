internal import CCFWebSockets
import Foundation
import Logging

/// Receives libwebsockets' own log lines (errors and warnings only: header dumps never reach us,
/// so no credential can leak through them) and keeps the latest ones, because the real reason of
/// a TLS failure is only ever written there.
enum LWSLog {
    private static let state = LockedBox(State())

    private struct State {
        var logger: Logger?
        var recent: [String] = []
    }

    /// Installs the sink; idempotent.
    static func install(logger: Logger) {
        state.withLock { $0.logger = logger }
        lws_set_log_level(Int32(LLL_ERR | LLL_WARN), { level, line in
            guard let line else { return }
            var text = String(cString: line)
            while text.last == "\n" || text.last == "\r" { text.removeLast() }
            LWSLog.record(level: level, text)
        })
    }

    private static func record(level: Int32, _ text: String) {
        let logger = state.withLock { s -> Logger? in
            s.recent.append(text)
            if s.recent.count > 16 { s.recent.removeFirst(s.recent.count - 16) }
            return s.logger
        }
        logger?.debug("libwebsockets: \(text)")
    }

    /// The most recent libwebsockets lines, oldest first.
    static func recentLines() -> [String] { state.withLock { $0.recent } }
}
