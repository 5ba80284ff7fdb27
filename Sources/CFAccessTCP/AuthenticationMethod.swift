import AccessCore

/// Supplies an Access application token for an origin, by whatever means suits the app: the
/// built-in browser/device login, an in-app browser, a token the app already holds.
///
/// A session asks ``storedAppToken(for:)`` first and dials with that token, or with none; only
/// when the edge answers with the Access login redirect does it ask ``appToken(for:refresh:)``
/// (an origin without Access never sees a login, as with cloudflared).
public protocol OAuthFlow: Sendable {
    /// Returns an app token (JWT) for `origin`, logging in if needed. With `refresh`, Access
    /// rejected the token the flow gave before: drop it from any cache and get a new one.
    /// Cancelling the calling task must end a login in progress (throw kind `.loginCancelled`).
    func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String

    /// A token for `origin` the flow already holds, found without a network request or a
    /// person (nil: dial without a credential first). Default: nil.
    func storedAppToken(for origin: OriginURL) async -> String?
}

extension OAuthFlow {
    /// No stored token: the first dial goes without a credential.
    public func storedAppToken(for origin: OriginURL) async -> String? { nil }
}

/// How a session proves itself to Cloudflare Access.
public enum AuthenticationMethod: Sendable {
    /// Service token headers (`Cf-Access-Client-Id` / `Cf-Access-Client-Secret`).
    case serviceToken(ServiceToken)
    /// An OAuth app token from `flow`. The first dial carries the flow's stored token, or none;
    /// discovery and a login run only when Access answers with its login redirect, so an origin
    /// without Access connects without either.
    case oauth(any OAuthFlow)
    /// The service token first; if Access rejects it, OAuth through `flow`. Never by surprise:
    /// only this case falls back.
    case serviceTokenWithOAuthFallback(ServiceToken, any OAuthFlow)
    /// An app token the caller already holds (sent as `Cf-Access-Token`).
    case accessToken(String)
    /// No credential (for origins that need none, or to learn whether a login is needed).
    case none

    var serviceToken: ServiceToken? {
        switch self {
        case .serviceToken(let token), .serviceTokenWithOAuthFallback(let token, _): return token
        case .oauth, .accessToken, .none: return nil
        }
    }

    var flow: (any OAuthFlow)? {
        switch self {
        case .oauth(let flow), .serviceTokenWithOAuthFallback(_, let flow): return flow
        case .serviceToken, .accessToken, .none: return nil
        }
    }

    var plan: (primary: SessionStateMachine.Credential, fallback: Bool) {
        switch self {
        case .serviceToken, .none: return (.serviceToken, false)
        case .serviceTokenWithOAuthFallback: return (.serviceToken, true)
        case .oauth: return (.stored, true)
        case .accessToken: return (.oauth, false)
        }
    }
}

/// A fixed token as an `OAuthFlow` (for `.accessToken`): it cannot be refreshed.
struct FixedTokenFlow: OAuthFlow {
    let token: String
    func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        if refresh {
            throw TunnelFailure.accessRejected(host: origin.host, credential: .accessToken, loginURL: nil)
        }
        return token
    }
}
