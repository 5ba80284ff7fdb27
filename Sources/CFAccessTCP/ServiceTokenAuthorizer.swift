import AccessCore
import AccessTransport

/// The service token a listener's connections carry, replaceable while the listener runs
/// (``AccessTunnel/replaceServiceToken(_:)``, the tool's SIGHUP): each new connection takes the
/// current token; open connections keep theirs. A refusal is not dialled again: a fixed token has
/// no fresh one to offer.
final class ServiceTokenAuthorizer: ConnectionAuthorizer {
    /// The current token, and the request built for it (once per token, not per connection).
    private let current: LockedBox<(token: ServiceToken, request: UpgradeRequest?)>
    private let build: @Sendable (ServiceToken) throws(TunnelFailure) -> UpgradeRequest

    /// - Parameter build: the upgrade request that carries a token.
    init(token: ServiceToken, build: @escaping @Sendable (ServiceToken) throws(TunnelFailure) -> UpgradeRequest) {
        current = LockedBox((token, nil))
        self.build = build
    }

    var redialsOnRefusal: Bool { false }

    /// New connections carry `token` from now on.
    func replace(with token: ServiceToken) {
        current.withLock { $0 = (token, nil) }
    }

    func request(rejected: UpgradeRequest?) async throws(TunnelFailure) -> (UpgradeRequest, CredentialKind) {
        try immediate()
    }

    /// The current token's request, on the accepting thread: no task to wait for.
    func immediateRequest() -> Result<(UpgradeRequest, CredentialKind), TunnelFailure>? {
        Result { () throws(TunnelFailure) in try immediate() }
    }

    private func immediate() throws(TunnelFailure) -> (UpgradeRequest, CredentialKind) {
        let (token, built) = current.withLock { $0 }
        if let built { return (built, .serviceToken) }
        let request = try build(token)
        // Kept unless the token was replaced meanwhile.
        current.withLock { if $0.token == token, $0.request == nil { $0.request = request } }
        return (request, .serviceToken)
    }
}
