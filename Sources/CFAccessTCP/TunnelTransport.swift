import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// Limits of a session's local listener.
public struct ListenerLimits: Sendable, Equatable {
    /// Connections bridged at the same time; one more is closed at once (nil = unlimited).
    public var maxConcurrentConnections: Int?
    /// Close the listener once the first connection is accepted.
    public var stopAcceptingAfterFirstConnection: Bool
    /// Stop the listener once no connection has been open for this long, and end the session
    /// cleanly (nil: never). For socket activation: the service manager starts the process again
    /// on the next connection, and what waits in the socket's backlog meanwhile stays there.
    public var idleExit: Duration?
    /// Most event-loop threads that carry the listener's connections, each with its own share of
    /// them (nil: one per core the process may run on). A thread is started only when every
    /// running one carries a connection, so one connection never costs a second thread.
    public var maxCarrierThreads: Int?
    /// How long a spare connection to the edge waits for the next local connection (nil: none).
    /// Once a connection has delivered the edge's first bytes, its thread dials one more connection
    /// to the edge (TCP and TLS, no request, so the origin never hears of it) when it holds none;
    /// the next local connection takes it over and waits only for the upgrade's round trip, not for
    /// the TCP and TLS handshakes too. A spare nobody took is closed after this long, and none
    /// follows until a connection opens again: an idle listener holds no connection to the edge.
    /// Never with
    /// ``stopAcceptingAfterFirstConnection``. Between 1 and 300 seconds.
    public var spareConnectionLifetime: Duration?

    /// The library's defaults: one connection, then stop listening (an SSH client's one session).
    public static let singleConnection = ListenerLimits(maxConcurrentConnections: 1, stopAcceptingAfterFirstConnection: true)
    /// The command line's defaults: as many as come, with a spare connection kept for
    /// ``defaultSpareLifetime`` after each.
    public static let unlimited = ListenerLimits(maxConcurrentConnections: nil, stopAcceptingAfterFirstConnection: false,
                                                 spareConnectionLifetime: defaultSpareLifetime)
    /// How long ``unlimited`` keeps a spare connection: 30 seconds.
    public static let defaultSpareLifetime = Duration.seconds(30)

    /// Creates limits.
    public init(maxConcurrentConnections: Int?, stopAcceptingAfterFirstConnection: Bool, idleExit: Duration? = nil,
                maxCarrierThreads: Int? = nil, spareConnectionLifetime: Duration? = nil) {
        self.maxConcurrentConnections = maxConcurrentConnections
        self.stopAcceptingAfterFirstConnection = stopAcceptingAfterFirstConnection
        self.idleExit = idleExit
        self.maxCarrierThreads = maxCarrierThreads
        self.spareConnectionLifetime = spareConnectionLifetime
    }
}

/// A listening TCP socket handed to the process, as systemd's socket activation does
/// (`LISTEN_FDS`, `sd_listen_fds(3)`): the listener accepts on it instead of binding
/// ``AccessTunnel/Options/listenAddress``. From `connect` on the tunnel owns the descriptor and
/// closes it in the end, but never shuts it down: the service manager keeps a copy, and what
/// waits in its backlog stays for the next process. It must be bound to a loopback address unless
/// non-loopback addresses are allowed.
public struct ListeningSocket: Sendable, Equatable {
    /// The descriptor (3 for systemd's first socket).
    public let descriptor: Int32
    /// Whether a socket bound to another address than loopback is accepted.
    public let allowsNonLoopback: Bool

    /// The listening socket `descriptor`.
    public init(descriptor: Int32, allowsNonLoopback: Bool = false) {
        self.descriptor = descriptor
        self.allowsNonLoopback = allowsNonLoopback
    }
}

/// Where a listener accepts: an address it binds, or a socket handed over.
package enum ListenPlace: Sendable, Equatable {
    case address(ListenAddress)
    case socket(ListeningSocket)
}

/// A running local side of a session.
package protocol ServingTunnel: Sendable {
    /// The local port (0 for a port-less stream).
    var port: UInt16 { get }
    /// Closes the listener and every bridged connection before returning.
    func close() async
    /// Returns once the tunnel has ended by itself, with why: the stream's tunnel closed, or the
    /// last connection of a listener that stopped accepting after its first ended. Returns nil
    /// at once when this serving never ends by itself (a listener that keeps accepting).
    func ended() async -> TunnelEnd?
}

extension ServingTunnel {
    /// Never ends by itself.
    package func ended() async -> TunnelEnd? { nil }
}

/// Gives each connection a listener bridges its own upgrade request, so that an app token that
/// expires or is revoked while the listener runs is replaced for the next connection, and a
/// connection Access refuses is dialled once more with a fresh token.
package protocol ConnectionAuthorizer: Sendable {
    /// The upgrade request for a new connection and the credential it carries. With
    /// `rejected`, Access refused a connection that carried that request: get a fresh credential
    /// (unless another connection already did).
    func request(rejected: UpgradeRequest?) async throws(TunnelFailure) -> (UpgradeRequest, CredentialKind)
    /// Whether a connection Access refuses is dialled once more with `request(rejected:)`: only
    /// when a fresh credential can be had (an OAuth login), not for a fixed service token.
    var redialsOnRefusal: Bool { get }
    /// The request for a new connection when it can be had without waiting (a service token),
    /// else nil: the connection then waits for `request(rejected:)`.
    func immediateRequest() -> Result<(UpgradeRequest, CredentialKind), TunnelFailure>?
}

extension ConnectionAuthorizer {
    /// Redials by default.
    package var redialsOnRefusal: Bool { true }
    /// Asks `request(rejected:)` by default.
    package func immediateRequest() -> Result<(UpgradeRequest, CredentialKind), TunnelFailure>? { nil }
}

/// The effectful parts a session drives; replaced by scripted doubles in tests.
package protocol TunnelTransport: Sendable {
    /// Opens one WebSocket with `configuration` to prove the edge accepts it, then closes it.
    func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure?
    /// Listens on `place` and bridges accepted connections within `limits`, each with the
    /// request of `authorizer` if given, else with `configuration`'s.
    func serve(_ configuration: CarrierConfiguration, on place: ListenPlace,
               limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel
    /// Opens a WebSocket and returns a connected socket bridged to it; with `pair`, bridges
    /// duplicates of its descriptors instead and returns a stream without a descriptor.
    func openStream(_ configuration: CarrierConfiguration, joining pair: LocalPair?) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel)
}

