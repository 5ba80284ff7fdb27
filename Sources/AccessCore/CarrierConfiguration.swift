/// Everything the carrier needs to dial the origin: the prepared upgrade request and how to reach it.
///
/// A plain value: the session (`AccessTunnel`) builds it and hands it to the `TunnelTransport`
/// seam, whose live implementation is the carrier (AccessTransport).
package struct CarrierConfiguration: Sendable {
    /// The upgrade request (origin and headers), built by the core.
    package var request: UpgradeRequest
    /// Dial another address than the origin's host (Host, SNI and verification keep the hostname).
    package var connectTo: ConnectTarget?
    /// A PEM file of CA certificates to trust instead of the system store.
    package var caFile: String?
    /// `--resolve HOST:PORT:ADDR` overrides: a dial to HOST:PORT goes to ADDR (Host, SNI and
    /// verification keep HOST), like curl's.
    package var resolveOverrides: [ResolveOverride]
    /// An HTTP proxy to tunnel through with `CONNECT` (from `HTTPS_PROXY`), or nil.
    package var proxy: ProxySettings?
    /// Which credential the request carries, for the messages of an Access refusal.
    package var credential: CredentialKind
    /// Seconds allowed for TCP connect + TLS + upgrade before the dial fails.
    package var handshakeTimeoutSeconds: Int
    /// Seconds of silence after which a tunnel sends a WebSocket ping (0 = never). A tunnel whose
    /// peer stays silent for three intervals is closed.
    package var keepaliveSeconds: Int
    /// Seconds the tunnel keeps carrying the edge's bytes after the local side finished sending
    /// (stdin EOF, `shutdown(SHUT_WR)`), unless the edge closes first; 0 closes at once.
    package var halfCloseLingerSeconds: Double = 5
    /// Pinned public keys: the TLS handshake counts only when the edge's leaf or another
    /// certificate of its chain carries one of them (none: no pinning).
    package var pins: [PublicKeyPin] = []
    /// A listener's connections: how often, and after which delays, a connection whose dial
    /// failed in a way worth retrying is dialled again while it waits (`.never`: closed at once).
    package var connectionRetry = RetryPolicy.never

    /// This configuration with another half-close linger (negative counts as 0).
    package func withHalfCloseLinger(_ seconds: Double) -> CarrierConfiguration {
        var copy = self
        copy.halfCloseLingerSeconds = max(0, seconds)
        return copy
    }

    /// The system CA bundle on Debian-family systems.
    package static let systemCABundle = "/etc/ssl/certs/ca-certificates.crt"

    /// Creates a configuration.
    package init(request: UpgradeRequest, connectTo: ConnectTarget? = nil, caFile: String? = nil,
                credential: CredentialKind, handshakeTimeoutSeconds: Int = 15, keepaliveSeconds: Int = 30,
                resolveOverrides: [ResolveOverride] = [], proxy: ProxySettings? = nil) {
        self.resolveOverrides = resolveOverrides
        self.proxy = proxy
        self.request = request
        self.connectTo = connectTo
        self.caFile = caFile
        self.credential = credential
        self.handshakeTimeoutSeconds = handshakeTimeoutSeconds
        self.keepaliveSeconds = max(0, keepaliveSeconds)
    }

    /// The host or address actually dialled.
    package var dialHost: String { connectTo?.address ?? request.origin.host }
    /// The port actually dialled.
    package var dialPort: Int { connectTo?.port ?? request.origin.effectivePort }
}
