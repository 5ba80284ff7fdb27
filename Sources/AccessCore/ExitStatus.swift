/// The process exit statuses of `cf-access-tcp`, one per way a run can end (README, "Exit
/// status"). The numbers follow BSD's sysexits.h where one fits, so they stay clear of the
/// small statuses a remote command returns and of the shell's 126, 127 and 128+signal.
public enum ExitStatus: Int32, Sendable, CaseIterable {
    /// A clean close: one side ended the connection normally (a Close frame, EOF both ways,
    /// a listener stopped on request).
    case success = 0
    /// A flag, environment value or configuration is wrong (EX_USAGE). ArgumentParser uses the
    /// same number for the errors it finds itself.
    case usage = 64
    /// The edge could not be reached or set up: DNS, a refused or timed-out TCP connect, TLS,
    /// a proxy, an edge answering 5xx (EX_UNAVAILABLE).
    case unavailable = 69
    /// A bug of ours (EX_SOFTWARE).
    case software = 70
    /// A local read or write failed: stdout cannot be written, the listener cannot bind, no
    /// file descriptors left (EX_IOERR).
    case localIO = 74
    /// An established tunnel was lost: reset by the edge, no answer to keepalives, the edge
    /// went away mid-stream (EX_TEMPFAIL: trying again may work).
    case connectionLost = 75
    /// The edge broke the WebSocket or HTTP protocol (EX_PROTOCOL).
    case protocolError = 76
    /// Cloudflare Access rejected the credential, or a login failed or was refused (EX_NOPERM).
    case accessDenied = 77
    /// Interrupted by SIGINT (128 + 2), as shells report it.
    case interrupted = 130
    /// Stopped by SIGTERM (128 + 15).
    case terminated = 143

    /// The status for a failure of the given category, before or while connecting.
    public init(failure category: TunnelFailure.Category) {
        switch category {
        case .configuration: self = .usage
        case .authentication: self = .accessDenied
        case .transport: self = .unavailable
        case .protocolViolation: self = .protocolError
        case .internal, .invalidState: self = .software
        case .localResource: self = .localIO
        }
    }
}
