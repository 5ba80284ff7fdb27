import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// The token cache: reading (with the expiry and audience checks), saving, and the edge's
/// verdict on a token before it is trusted.
extension AccessTokenProvider {
    /// The cached token `name` if usable; a malformed, expired or foreign file is deleted
    /// with an info line, an untrusted one ignored with a warning.
    func cachedToken(_ name: String, audience: String?) -> String? {
        let path = store.path(of: name)
        switch store.read(name) {
        case .missing:
            return nil
        case .untrusted(let reason):
            logger.warning("ignoring the cached token file", metadata: ["path": "\(path)", "reason": "\(reason)"])
            return nil
        case .content(let text, _):
            switch TokenCacheRules.check(token: text, requiredAudience: audience, now: clock.now()) {
            case .success:
                return text
            case .failure(let problem):
                logger.info("deleting the cached token file", metadata: ["path": "\(path)", "reason": "\(problem)"])
                store.delete(name)
                return nil
            }
        }
    }

    func save(_ token: String, as name: String) {
        do {
            try store.write(name, text: token)
        } catch {
            logger.warning("cannot cache the token", metadata: ["reason": "\(error.message)"])
        }
    }

    /// Whether the edge accepts `token` for `origin` (no Access login redirect).
    func edgeAccepts(token: String, origin: OriginURL) async throws(TunnelFailure) -> Bool {
        let url = origin.httpsURL + "?cloudflared_token_check=true"
        let response = try await http.send(HTTPRequest(method: "GET", url: url,
                                                       headers: [(AccessHeaderName.accessToken, token)],
                                                       timeoutSeconds: Self.discoveryTimeoutSeconds))
        if (300...399).contains(response.status), let location = response.value(of: "Location"),
           UpgradeRefusal.isAccessLoginLocation(location) {
            return false
        }
        return true
    }
}
