/// The setting a person should look at to fix a failure. The library's messages name it in
/// words; the command line adds the flags that set it (`FailureSubject` → `--service-token-id`…).
public enum FailureSubject: Sendable, Equatable, CaseIterable {
    /// The service token (client ID and secret).
    case serviceToken
    /// The Access application's hostname.
    case hostname
    /// The CA certificates trusted for the edge.
    case caFile
    /// Overrides of where names are dialled.
    case addressOverrides
    /// The token cache directory.
    case tokenDirectory
    /// The local listen address.
    case listenAddress
    /// The pinned public keys of the edge.
    case pins
}

/// Which credential the failed request offered, so a message can say what to fix.
public enum CredentialKind: Sendable, Equatable {
    /// No credential: a first attempt without login.
    case none
    /// A service token (`Cf-Access-Client-Id` / `Cf-Access-Client-Secret`).
    case serviceToken
    /// An application token from a login (`Cf-Access-Token`).
    case accessToken
}

/// A failure of the tunnel: what went wrong (``Kind``, for code to switch on), a category,
/// whether trying again may help, a plain one-line message for people that says what to do,
/// and technical detail for logs apart.
///
/// Neither `message` nor `detail` ever holds a secret: the factories take no secrets and
/// pass outside text (reasons, URLs) through `Redaction`.
///
/// Two failures are equal when their kind, category, retry hint, subject and detail are: the
/// message is wording for people and may change. (Failures of kind ``Kind/unspecified`` also
/// compare their messages, as nothing else tells them apart.)
public struct TunnelFailure: Error, Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The kind of failure, for exit codes and retry policy.
    public enum Category: Sendable, Equatable {
        /// An operation was asked for in a state that does not allow it.
        case invalidState
        /// Cloudflare Access refused the credential, or one is needed.
        case authentication
        /// DNS, TCP, TLS, timeouts, the edge or origin being down.
        case transport
        /// What the user gave us is wrong.
        case configuration
        /// The other side broke the protocol (e.g. a text frame, a non-101 success).
        case protocolViolation
        /// A bug of ours.
        case `internal`
        /// The machine ran out of something we need: file descriptors, memory.
        case localResource
        /// The caller stopped the operation: its task was cancelled, or the session was
        /// disconnected while it ran.
        case cancelled
    }

    /// What went wrong; stable, for code to act on.
    public let kind: Kind
    /// The coarse group of the failure: picks the exit status and the retry policy.
    public let category: Category
    /// Whether the same attempt may succeed later without a change by the user.
    public let isRetryable: Bool
    /// Plain, one line, says what to do; never contains a secret.
    public let message: String
    /// Technical detail for logs (may be ""); one line; never contains a secret.
    public let detail: String
    /// The setting to look at to fix it, if one is to blame. Messages name it in words ("the
    /// service token"); a command line adds its own flag names (issue 11.14).
    public let subject: FailureSubject?

    /// The message.
    public var description: String { message }

    /// Kind, category, message and detail, for logs.
    public var debugDescription: String {
        "TunnelFailure(\(kind), \(category), retryable: \(isRetryable), message: \(message)"
            + (detail.isEmpty ? ")" : ", detail: \(detail))")
    }

    /// Two failures are equal when they are the same failure (kind, category, retryability,
    /// subject and technical detail), whatever the wording of their messages.
    public static func == (lhs: TunnelFailure, rhs: TunnelFailure) -> Bool {
        lhs.kind == rhs.kind && lhs.category == rhs.category && lhs.isRetryable == rhs.isRetryable
            && lhs.subject == rhs.subject && lhs.detail == rhs.detail
            && (lhs.kind != .unspecified || lhs.message == rhs.message)
    }

    /// Makes a failure from text that may come from elsewhere: `message` and `detail` are
    /// put on one line and passed through `Redaction.scrub`.
    public init(category: Category, isRetryable: Bool, message: String, detail: String = "",
                subject: FailureSubject? = nil, kind: Kind = .unspecified) {
        self.init(trusted: category, isRetryable: isRetryable,
                  message: Redaction.scrub(message), detail: Redaction.scrub(detail), subject: subject, kind: kind)
    }

    /// Our own wording; inputs were already made safe by the factory.
    init(trusted category: Category, isRetryable: Bool, message: String, detail: String,
         subject: FailureSubject? = nil, kind: Kind) {
        self.kind = kind
        self.category = category
        self.isRetryable = isRetryable
        self.message = Display.oneLine(message)
        self.detail = Display.oneLine(detail)
        self.subject = subject
    }

    // MARK: Access

    /// Access answered with a login redirect: it wants a login, or rejected the credential.
    ///
    /// `loginURL` (the `Location`) appears in `detail` without user information, query or
    /// fragment. Category `.authentication`, not retryable.
    public static func accessRejected(host: String, credential: CredentialKind, loginURL: String?) -> TunnelFailure {
        let host = Display.oneLine(host)
        let message: String
        switch credential {
        case .serviceToken:
            message = "Cloudflare Access rejected the service token for \(host) (redirected to login): "
                + "check the service token's client ID and secret"
        case .accessToken:
            message = "Cloudflare Access rejected the access token for \(host) (redirected to login): "
                + "log in again with `cf-access-tcp login \(host)`"
        case .none:
            message = "\(host) needs a Cloudflare Access login: run `cf-access-tcp login \(host)`, "
                + "or use a service token"
        }
        let detail = loginURL.map { "Access login redirect to " + Redaction.url($0) } ?? ""
        return TunnelFailure(trusted: .authentication, isRetryable: false, message: message,
                             detail: detail,
                             subject: credential == .accessToken ? nil : .serviceToken,
                             kind: credential == .none ? .loginRequired : .accessRejected)
    }

    /// The failure for each kind of refused upgrade. `.accessLoginRequired` is
    /// `accessRejected(host:credential: .none, loginURL:)`; callers that know which
    /// credential they offered call `accessRejected` themselves.
    package static func refused(host: String, refusal: UpgradeRefusal) -> TunnelFailure {
        let host = Display.oneLine(host)
        switch refusal {
        case .accessLoginRequired(let loginURL):
            return accessRejected(host: host, credential: .none, loginURL: loginURL)
        case .redirect(let status, let location):
            return TunnelFailure(
                trusted: .configuration, isRetryable: false,
                message: "\(host) answered with a redirect (HTTP \(statusText(status))) that is not an Access login: "
                    + "check that the hostname is the Access application's hostname",
                detail: location.map { "Location: " + Redaction.url($0) } ?? "no Location header", subject: .hostname,
                kind: .unexpectedRedirect)
        case .unauthorized:
            return TunnelFailure(
                trusted: .authentication, isRetryable: false,
                message: "Cloudflare Access refused \(host) (HTTP 401 Unauthorized): check the service token "
                    + "or log in again with `cf-access-tcp login \(host)`",
                detail: "HTTP 401 from \(host)", subject: .serviceToken, kind: .accessRejected)
        case .forbidden:
            return TunnelFailure(
                trusted: .authentication, isRetryable: false,
                message: "Cloudflare Access denied \(host) (HTTP 403 Forbidden): "
                    + "your identity or service token is not allowed by the application's policy",
                detail: "HTTP 403 from \(host)", kind: .accessDenied)
        case .notFound:
            return TunnelFailure(
                trusted: .configuration, isRetryable: false,
                message: "\(host) answered HTTP 404 Not Found: check the hostname; "
                    + "no Access application or tunnel serves that host and path",
                detail: "HTTP 404 from \(host)", subject: .hostname, kind: .notFound)
        case .badGateway(let status):
            return TunnelFailure(
                trusted: .transport, isRetryable: true,
                message: "The Cloudflare edge for \(host) answered HTTP \(status): "
                    + "the origin or its tunnel is down; try again later",
                detail: "HTTP \(statusText(status)) from \(host)", kind: .originUnavailable)
        case .unexpectedStatus(429):
            return TunnelFailure(
                trusted: .transport, isRetryable: true,
                message: "\(host) answered HTTP 429 Too Many Requests: wait a minute, then try again",
                detail: "HTTP 429 from \(host)", kind: .rateLimited)
        case .unexpectedStatus(let status):
            return TunnelFailure(
                trusted: .protocolViolation, isRetryable: false,
                message: "\(host) answered the WebSocket upgrade with HTTP \(statusText(status)) "
                    + "instead of 101 Switching Protocols: check that the hostname is an Access application for TCP",
                detail: "HTTP \(status) from \(host)", subject: .hostname, kind: .unexpectedStatus)
        }
    }

    // MARK: Transport

    /// The TLS handshake with `host` failed. Category `.transport`, not retryable.
    package static func tls(host: String, reason: String) -> TunnelFailure {
        let host = Display.oneLine(host)
        var reason = Redaction.scrub(reason)
        while reason.hasSuffix(".") { reason.removeLast() }
        if reason.isEmpty { reason = "handshake failed" }
        return TunnelFailure(
            trusted: .transport, isRetryable: false,
            message: "TLS with \(host) failed: \(reason). Check the system clock and the CA certificates",
            detail: reason, subject: .caFile, kind: .tls)
    }

    /// The edge for `host` presented no certificate with a pinned key: `presented` lists the pins
    /// of the certificates it showed, leaf first (empty when unknown, as from libcurl). Category
    /// `.transport`, not retryable: waiting does not change the edge's key.
    package static func pinMismatch(host: String, presented: [String]) -> TunnelFailure {
        let host = Display.oneLine(host)
        let shown = presented.isEmpty ? "" : ": it showed " + presented.joined(separator: ", ")
        return TunnelFailure(
            trusted: .transport, isRetryable: false,
            message: "the edge for \(host) presented no pinned key\(shown); "
                + "check the pins, or whether something on the path (a TLS-inspecting proxy) replaced the edge's certificate",
            detail: "pin mismatch\(shown)", subject: .pins, kind: .tls)
    }

    /// `host` did not resolve. Category `.transport`, retryable.
    package static func dns(host: String) -> TunnelFailure {
        let host = Display.oneLine(host)
        return TunnelFailure(
            trusted: .transport, isRetryable: true,
            message: "Cannot resolve \(host): check the hostname and your network (DNS)",
            detail: "DNS lookup of \(host) failed: name not found, or network unavailable", kind: .dns)
    }

    /// The TCP connection to `address` was refused. Category `.transport`, retryable.
    package static func connectionRefused(address: String) -> TunnelFailure {
        let address = Display.oneLine(address)
        return TunnelFailure(
            trusted: .transport, isRetryable: true,
            message: "Connection refused by \(address): is the edge address right?",
            detail: "TCP connect to \(address): connection refused", kind: .connectionRefused)
    }

    /// No route, interface down or similar. `detail` (e.g. the system's words) goes to
    /// `detail`, scrubbed. Category `.transport`, retryable.
    package static func networkUnavailable(detail: String) -> TunnelFailure {
        TunnelFailure(
            trusted: .transport, isRetryable: true,
            message: "Network unavailable: check your network connection, then try again",
            detail: Redaction.scrub(detail), kind: .networkUnavailable)
    }

    /// Nothing came back from `host` within `seconds`. The message starts with
    /// "Connection timed out." Category `.transport`, retryable.
    package static func timedOut(host: String, seconds: Int) -> TunnelFailure {
        let host = Display.oneLine(host)
        return TunnelFailure(
            trusted: .transport, isRetryable: true,
            message: "Connection timed out. No answer from \(host) within \(seconds) s: "
                + "check your network and that \(host) is reachable, then try again",
            detail: "no answer from \(host) within \(seconds) s", kind: .timedOut)
    }

    // MARK: Other

    /// The other side broke the carrier protocol, e.g. sent a text frame. `what` is scrubbed.
    /// Category `.protocolViolation`, not retryable.
    package static func protocolViolation(_ what: String) -> TunnelFailure {
        let what = Redaction.scrub(what)
        return TunnelFailure(
            trusted: .protocolViolation, isRetryable: false,
            message: "Protocol violation: \(what); check that the hostname is an Access application for TCP",
            detail: what, subject: .hostname, kind: .protocolViolation)
    }

    /// A configuration problem found while running. Category `.configuration`, not retryable;
    /// the message is the error's.
    public static func configuration(_ error: ConfigurationError, subject: FailureSubject? = nil) -> TunnelFailure {
        TunnelFailure(trusted: .configuration, isRetryable: false, message: error.message, detail: error.message,
                      subject: subject, kind: .configuration)
    }

    /// No file descriptor could be had (EMFILE/ENFILE): says the limit and how to raise it.
    /// Category `.localResource`, retryable (another connection may end).
    package static func outOfFileDescriptors(limit: Int?, what: String) -> TunnelFailure {
        let shown = limit.map { " (the limit is \($0))" } ?? ""
        return TunnelFailure(trusted: .localResource, isRetryable: true,
                             message: "Too many open files\(shown): close some connections or raise the limit with `ulimit -n`",
                             detail: Redaction.scrub(what), kind: .outOfFileDescriptors)
    }

    /// A bug of ours. `what` is scrubbed. Category `.internal`, not retryable.
    public static func internalError(_ what: String) -> TunnelFailure {
        let what = Redaction.scrub(what)
        return TunnelFailure(
            trusted: .internal, isRetryable: false,
            message: "Internal error: \(what). This is a bug in cf-access-tcp; please report it",
            detail: what, kind: .internal)
    }

    /// An operation asked for in a state that does not allow it (e.g. writing to a closed
    /// tunnel). `what` is scrubbed. Category `.invalidState`, not retryable.
    public static func invalidState(_ what: String) -> TunnelFailure {
        let what = Redaction.scrub(what)
        return TunnelFailure(
            trusted: .invalidState, isRetryable: false,
            message: "Invalid state: \(what)",
            detail: what, kind: .invalidState)
    }

    /// The caller stopped `what` (a connect, a read): its task was cancelled or the session
    /// disconnected. Category `.cancelled`, not retryable.
    public static func cancelled(_ what: String) -> TunnelFailure {
        let what = Redaction.scrub(what)
        return TunnelFailure(trusted: .cancelled, isRetryable: false, message: "Cancelled: \(what)", detail: what,
                             kind: .cancelled)
    }

    /// "302 Found" style text for a status code.
    static func statusText(_ status: Int) -> String {
        let reason: String
        switch status {
        case 200: reason = "OK"
        case 204: reason = "No Content"
        case 300: reason = "Multiple Choices"
        case 301: reason = "Moved Permanently"
        case 302: reason = "Found"
        case 303: reason = "See Other"
        case 304: reason = "Not Modified"
        case 307: reason = "Temporary Redirect"
        case 308: reason = "Permanent Redirect"
        case 400: reason = "Bad Request"
        case 405: reason = "Method Not Allowed"
        case 408: reason = "Request Timeout"
        case 426: reason = "Upgrade Required"
        case 500: reason = "Internal Server Error"
        case 502: reason = "Bad Gateway"
        case 503: reason = "Service Unavailable"
        case 504: reason = "Gateway Timeout"
        case 520: reason = "Unknown Error (Cloudflare)"
        case 521: reason = "Web Server Is Down (Cloudflare)"
        case 522: reason = "Connection Timed Out (Cloudflare)"
        case 523: reason = "Origin Is Unreachable (Cloudflare)"
        case 524: reason = "A Timeout Occurred (Cloudflare)"
        case 530: reason = "Origin Unreachable (Cloudflare)"
        default: return String(status)
        }
        return String(status) + " " + reason
    }
}
