import ArgumentParser
import CFAccessSSH
import CFAccessTCP
import FoundationEssentials
import Glibc

/// The process exit statuses of `cf-access-tcp`, one per way a run can end (README, "Exit
/// status"). The numbers follow BSD's sysexits.h where one fits, so they stay clear of the
/// small statuses a remote command returns and of the shell's 126, 127 and 128+signal.
///
/// This file is the one place where a failure becomes a status: the libraries report what
/// happened (``TunnelFailure``, ``TunnelEnd``, ``SSHFailure``) and know nothing of processes.
enum ExitStatus: Int32, Sendable, CaseIterable {
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

    /// The status of a failure before or while connecting, by its category.
    init(_ failure: TunnelFailure) {
        switch failure.category {
        case .configuration: self = .usage
        case .authentication: self = .accessDenied
        case .transport: self = .unavailable
        case .protocolViolation: self = .protocolError
        case .internal, .invalidState: self = .software
        case .localResource: self = .localIO
        case .cancelled: self = .interrupted
        }
    }

    /// The status of a run whose tunnel ended this way.
    init(_ end: TunnelEnd) {
        switch end {
        case .closedByLocal, .shutdown, .listenerIdle: self = .success
        case .closedByEdge: self = end.isClean ? .success : .connectionLost
        case .reset, .keepaliveTimeout, .writeFailed: self = .connectionLost
        case .protocolViolation: self = .protocolError
        case .localIOFailed: self = .localIO
        case .failedToOpen(let failure): self.init(failure)
        }
    }

    /// The status of `cf-access-tcp shell` for an SSH failure.
    init(_ failure: SSHFailure) {
        switch failure.kind {
        case .timedOut: self = .unavailable
        case .connectionLost: self = .connectionLost
        case .authenticationFailed, .hostKeyRejected: self = .accessDenied
        case .protocolError: self = .protocolError
        case .localIO: self = .localIO
        case .configuration: self = .usage
        default: self = .protocolError
        }
    }

    /// The status of any error a command reports: the library's failures as above, a bad flag
    /// or value as a usage error, anything else as a bug.
    init(_ error: any Error) {
        switch error {
        case let failure as TunnelFailure: self.init(failure)
        case let failure as SSHFailure: self.init(failure)
        case is ConfigurationError: self = .usage
        case let stop as ShellRunner.Stop: self = stop.status
        default: self = .software
        }
    }

    /// The status of a run stopped by `signal` (SIGINT 130, SIGTERM 143, as shells report them).
    init(signal: Int32) {
        self = signal == SIGINT ? .interrupted : .terminated
    }

    /// The status as ArgumentParser's exit code.
    var code: ExitCode { ExitCode(rawValue) }
}
