internal import CCFOpenSSL
internal import CCFWebSockets
import AccessTransport
import Logging

/// What the executable, and only the executable, changes in its own process for the libraries
/// it links (the libraries themselves leave the host process alone: reference/DECISIONS.md).
enum ToolProcess {
    /// Sets up OpenSSL for this process: call it first thing in every command, before any tunnel
    /// or HTTPS request; then `routeLibWebSocketsLog(to:)` once logging is set up.
    static func prepare() {
        _ = openSSLWithoutExitCleanup
    }

    /// OpenSSL without its exit-time cleanup (`OPENSSL_INIT_NO_ATEXIT`): the process may exit
    /// while the carrier's thread, libcurl or a finishing thread still uses OpenSSL, and freeing
    /// its global state under them corrupts the heap. The first initialisation decides, so this
    /// runs before any other OpenSSL call of the process.
    private static let openSSLWithoutExitCleanup: Bool = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1

    private static let lwsLogger = LockedBox<Logger?>(nil)

    /// libwebsockets' errors and warnings go to our log at debug level (never to stderr as raw
    /// lines: stdout/stderr belong to the ProxyCommand and the one-line failure message). Its
    /// notices and header dumps never reach us, so no credential can leak through them.
    static func routeLibWebSocketsLog(to logger: Logger) {
        lwsLogger.withLock { $0 = logger }
        lws_set_log_level(Int32(LLL_ERR | LLL_WARN)) { _, line in
            guard let line else { return }
            var text = String(cString: line)
            while text.last == "\n" || text.last == "\r" { text.removeLast() }
            ToolProcess.lwsLogger.withLock { $0 }?.debug("libwebsockets: \(text)")
        }
    }
}
