import AccessCore

/// The app token a listener's connections carry (OAuth): each new connection asks the flow for
/// its current token — so one that expired while the listener ran is replaced — and all the
/// connections Access refuses at once share one refresh (one login, never one per connection).
actor OAuthConnectionAuthorizer: ConnectionAuthorizer {
    private let flow: any OAuthFlow
    private let origin: OriginURL
    private let build: @Sendable (String?) throws(TunnelFailure) -> UpgradeRequest
    /// The refresh in flight, and the token it replaces.
    private var refresh: (replacing: String, task: Task<Result<String, TunnelFailure>, Never>)?
    /// The last refresh's outcome: the refused token and the one that replaced it.
    private var lastRefresh: (refused: String, fresh: String)?

    /// - Parameter build: the upgrade request that carries a token.
    init(flow: any OAuthFlow, origin: OriginURL, build: @escaping @Sendable (String?) throws(TunnelFailure) -> UpgradeRequest) {
        self.flow = flow
        self.origin = origin
        self.build = build
    }

    func request(rejected: UpgradeRequest?) async throws(TunnelFailure) -> (UpgradeRequest, CredentialKind) {
        let token: String
        if let refused = rejected?.value(forHeader: AccessHeaderName.accessToken) {
            token = try await replacement(for: refused)
        } else if let stored = await flow.storedAppToken(for: origin) {
            token = stored
        } else {
            token = try await flow.appToken(for: origin, refresh: false)
        }
        return (try build(token), .accessToken)
    }

    private func replacement(for refused: String) async throws(TunnelFailure) -> String {
        if let lastRefresh, lastRefresh.refused == refused { return lastRefresh.fresh }
        if let refresh, refresh.replacing == refused { return try await refresh.task.value.get() }
        let flow = self.flow
        let origin = self.origin
        let task = Task { () -> Result<String, TunnelFailure> in
            do throws(TunnelFailure) {
                return .success(try await flow.appToken(for: origin, refresh: true))
            } catch {
                return .failure(error)
            }
        }
        refresh = (refused, task)
        let result = await task.value
        if refresh?.replacing == refused { refresh = nil }
        if case .success(let fresh) = result { lastRefresh = (refused, fresh) }
        return try result.get()
    }
}
