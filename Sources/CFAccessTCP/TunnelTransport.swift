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

    /// The library's defaults: one connection, then stop listening (an SSH client's one session).
    public static let singleConnection = ListenerLimits(maxConcurrentConnections: 1, stopAcceptingAfterFirstConnection: true)
    /// The command line's defaults: as many as come.
    public static let unlimited = ListenerLimits(maxConcurrentConnections: nil, stopAcceptingAfterFirstConnection: false)

    /// Creates limits.
    public init(maxConcurrentConnections: Int?, stopAcceptingAfterFirstConnection: Bool) {
        self.maxConcurrentConnections = maxConcurrentConnections
        self.stopAcceptingAfterFirstConnection = stopAcceptingAfterFirstConnection
    }
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
}

/// The effectful parts a session drives; replaced by scripted doubles in tests.
package protocol TunnelTransport: Sendable {
    /// Opens one WebSocket with `configuration` to prove the edge accepts it, then closes it.
    func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure?
    /// Listens on `address` and bridges accepted connections within `limits`, each with the
    /// request of `authorizer` if given, else with `configuration`'s.
    func serve(_ configuration: CarrierConfiguration, on address: ListenAddress,
               limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel
    /// Opens a WebSocket and returns a connected socket bridged to it.
    func openStream(_ configuration: CarrierConfiguration) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel)
}

