import AccessCore
import AccessTransport

/// The service token a listener's connections carry, replaceable while the listener runs
/// (``AccessTunnel/replaceServiceToken(_:)``, the tool's SIGHUP): each new connection takes the
/// current token; open connections keep theirs. A refusal is not dialled again: a fixed token has
/// no fresh one to offer.
final class ServiceTokenAuthorizer: ConnectionAuthorizer {
    private let current: LockedBox<ServiceToken>
    private let build: @Sendable (ServiceToken) throws(TunnelFailure) -> UpgradeRequest

    /// - Parameter build: the upgrade request that carries a token.
    init(token: ServiceToken, build: @escaping @Sendable (ServiceToken) throws(TunnelFailure) -> UpgradeRequest) {
        current = LockedBox(token)
        self.build = build
    }

    var redialsOnRefusal: Bool { false }

    /// New connections carry `token` from now on.
    func replace(with token: ServiceToken) {
        current.withLock { $0 = token }
    }

    func request(rejected: UpgradeRequest?) async throws(TunnelFailure) -> (UpgradeRequest, CredentialKind) {
        (try build(current.withLock { $0 }), .serviceToken)
    }
}
