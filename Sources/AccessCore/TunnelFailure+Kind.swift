extension TunnelFailure {
    /// What went wrong, for code that acts on a failure: stable across releases and never
    /// derived from the wording of a message (issue 13.6).
    ///
    /// New kinds may be added in later versions, so a `switch` over kinds needs a `default`.
    /// A kind belongs to one ``TunnelFailure/Category``; ``TunnelFailure/category`` stays the
    /// coarse grouping that picks an exit status and the retry policy.
    ///
    /// ```swift
    /// do { _ = try await tunnel.connect(hostname: host, method: .oauth) }
    /// catch let failure as TunnelFailure where failure.kind == .accessRejected { … }
    /// ```
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        /// The stable name (`"dns"`, `"access-rejected"`, …), fit for logs and metrics.
        public let name: String

        init(_ name: String) { self.name = name }

        /// The name.
        public var description: String { name }

        // MARK: Network and edge

        /// A name did not resolve.
        public static let dns = Kind("dns")
        /// A TCP connection (to the edge, a connect-to address or a proxy) was refused.
        public static let connectionRefused = Kind("connection-refused")
        /// No route to the address, an interface down, or a network error without a better name.
        public static let networkUnavailable = Kind("network-unavailable")
        /// Nothing came back in time.
        public static let timedOut = Kind("timed-out")
        /// The TLS handshake failed (certificate, clock, protocol).
        public static let tls = Kind("tls")
        /// An HTTP proxy (`HTTPS_PROXY`) refused the CONNECT.
        public static let proxyRefused = Kind("proxy-refused")
        /// The edge answered 502–530: the origin or its tunnel is down.
        public static let originUnavailable = Kind("origin-unavailable")
        /// The edge answered 429 Too Many Requests.
        public static let rateLimited = Kind("rate-limited")
        /// An established tunnel was lost (reset, keepalive timeout, a failed write).
        public static let connectionLost = Kind("connection-lost")
        /// An HTTPS request of the login or discovery steps failed for another network reason.
        public static let requestFailed = Kind("request-failed")

        // MARK: Cloudflare Access

        /// The hostname needs an Access login and none was offered (or may be started).
        public static let loginRequired = Kind("login-required")
        /// Access refused the credential offered: a login redirect or HTTP 401.
        public static let accessRejected = Kind("access-rejected")
        /// Access knows who we are but the application's policy does not allow us (HTTP 403).
        public static let accessDenied = Kind("access-denied")
        /// The application's metadata JWT was malformed, unverified or refused.
        public static let metadataInvalid = Kind("metadata-invalid")
        /// The signing keys (JWKS) of the team domain could not be had.
        public static let keySetUnavailable = Kind("key-set-unavailable")
        /// The login did not produce a token.
        public static let loginFailed = Kind("login-failed")
        /// Nobody finished the login in time.
        public static let loginTimedOut = Kind("login-timed-out")
        /// The login was interrupted.
        public static let loginCancelled = Kind("login-cancelled")
        /// Another process held the login lock for too long.
        public static let loginLockTimedOut = Kind("login-lock-timed-out")
        /// Cloudflare's login transfer service failed (HTTP 5xx).
        public static let transferServiceFailed = Kind("transfer-service-failed")
        /// Access did not sign a short-lived SSH certificate (`cert_sign` answered an error).
        public static let certificateRefused = Kind("certificate-refused")

        // MARK: Configuration

        /// The hostname has no Access application and the edge wants one.
        public static let noAccessApplication = Kind("no-access-application")
        /// The edge answered 404: no application or tunnel serves that host and path.
        public static let notFound = Kind("not-found")
        /// The edge redirected somewhere that is not an Access login.
        public static let unexpectedRedirect = Kind("unexpected-redirect")
        /// The token cache directory or a file in it could not be used.
        public static let tokenCache = Kind("token-cache")
        /// Something the user gave is wrong (a flag, an address, a file).
        public static let configuration = Kind("configuration")

        // MARK: Protocol

        /// The edge broke the WebSocket or HTTP protocol.
        public static let protocolViolation = Kind("protocol-violation")
        /// The edge answered the upgrade with a status that is neither 101 nor a known refusal.
        public static let unexpectedStatus = Kind("unexpected-status")
        /// An answer was larger than we accept (headers or body).
        public static let oversizedAnswer = Kind("oversized-answer")

        // MARK: Local

        /// The process ran out of file descriptors.
        public static let outOfFileDescriptors = Kind("out-of-file-descriptors")
        /// Reading or writing the local side of a tunnel failed.
        public static let localIO = Kind("local-io")
        /// An operation was asked for in a state that does not allow it.
        public static let invalidState = Kind("invalid-state")
        /// The caller cancelled the operation (its task, or `disconnect()` during a connect).
        public static let cancelled = Kind("cancelled")
        /// A bug in cf-access-tcp.
        public static let `internal` = Kind("internal")
        /// A failure made without a kind (``TunnelFailure/init(category:isRetryable:message:detail:subject:kind:)``
        /// without one).
        public static let unspecified = Kind("unspecified")

        /// Every kind this version knows, for documentation and tests.
        public static let all: [Kind] = [
            .dns, .connectionRefused, .networkUnavailable, .timedOut, .tls, .proxyRefused, .originUnavailable,
            .rateLimited, .connectionLost, .requestFailed, .loginRequired, .accessRejected, .accessDenied,
            .metadataInvalid, .keySetUnavailable, .loginFailed, .loginTimedOut, .loginCancelled, .loginLockTimedOut,
            .transferServiceFailed, .certificateRefused, .noAccessApplication, .notFound, .unexpectedRedirect, .tokenCache, .configuration,
            .protocolViolation, .unexpectedStatus, .oversizedAnswer, .outOfFileDescriptors, .localIO, .invalidState,
            .cancelled, .internal, .unspecified,
        ]
    }
}
