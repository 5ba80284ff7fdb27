import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// App discovery (PROTOCOL.md §2): the metadata request, the metadata JWT's signature under the
/// team's key set (fetched and cached by the JWKS policy) and its claims, giving the `AppInfo`.
extension AccessTokenProvider {
    func discover(_ origin: OriginURL) async throws(TunnelFailure) -> AppInfo {
        if let known = appInfos[origin.httpsURL] { return known }
        let request = HTTPRequest(method: "HEAD", url: origin.httpsURL,
                                  headers: [Self.metadataRequestHeader], timeoutSeconds: Self.discoveryTimeoutSeconds)
        let response = try await http.send(request)
        guard let raw = response.value(of: Self.metadataHeader), !raw.isEmpty else {
            throw .noAccessApplication(url: origin.httpsURL)
        }
        let jwt: JWT
        do {
            jwt = try JWT.decode(raw)
        } catch {
            throw .metadataUnverified(host: origin.host, reason: "the metadata is not a JWT: \(error.reason)")
        }
        guard jwt.algorithm == "RS256" else {
            throw .metadataUnverified(host: origin.host, reason: "it is signed with \(quotedPublic(jwt.algorithm)), not RS256")
        }
        guard let keyID = jwt.keyID, !keyID.isEmpty else {
            throw .metadataUnverified(host: origin.host, reason: "it names no signing key (kid)")
        }
        let app: AppInfo
        switch MetadataRules.appInfo(claims: jwt.claims, requestedHost: origin.host, now: clock.now()) {
        case .success(let info): app = info
        case .failure(let problem): throw .metadataRejected(host: origin.host, problem: problem)
        }
        let key = try await signingKey(authDomain: app.authDomain, keyID: keyID, host: origin.host)
        guard verifier.verifyRS256(message: jwt.signingInput, signature: jwt.signature, key: key) else {
            throw .metadataUnverified(host: origin.host, reason: "its signature does not match key \(quotedPublic(keyID))")
        }
        logger.debug("found the Access application", metadata: ["app": "\(app.appHostname)", "auth_domain": "\(app.authDomain)"])
        appInfos[origin.httpsURL] = app
        return app
    }

    /// The key `keyID` of `authDomain`, from the 24-h disk cache or fetched (at most once a
    /// minute for an unknown kid).
    func signingKey(authDomain: String, keyID: String, host: String) async throws(TunnelFailure) -> RSAPublicJWK {
        let name = TokenCacheNaming.jwksFileName(authDomain: authDomain)
        var cached: (JWKS, Date)?
        switch store.read(name) {
        case .content(let text, let modifiedAt):
            if let set = try? JWKS.parse(Array(text.utf8)) {
                cached = (set, modifiedAt)
            } else {
                logger.info("deleting an unreadable cached key set", metadata: ["path": "\(store.path(of: name))"])
                store.delete(name)
            }
        case .untrusted(let reason):
            logger.warning("ignoring the cached key set", metadata: ["path": "\(store.path(of: name))", "reason": "\(reason)"])
        case .missing:
            break
        }
        let hasKey = cached?.0.key(id: keyID) != nil
        let decision = JWKSCachePolicy.decide(cachedAt: cached?.1, hasKey: hasKey,
                                              lastFetchedByUs: keySetFetches[authDomain], now: clock.now())
        if decision == .useCached, let set = cached?.0 {
            if let key = set.key(id: keyID) { return key }
            throw .metadataUnverified(host: host, reason: "it is signed with an unknown key \(quotedPublic(keyID))")
        }
        let url = "https://" + authDomain + "/cdn-cgi/access/certs"
        keySetFetches[authDomain] = clock.now()
        let response = try await http.send(HTTPRequest(method: "GET", url: url, timeoutSeconds: Self.discoveryTimeoutSeconds))
        guard response.status == 200 else {
            throw .keySetUnavailable(authDomain: authDomain, reason: "HTTP \(response.status) from \(url)")
        }
        let set: JWKS
        do {
            set = try JWKS.parse(response.body)
        } catch {
            throw .keySetUnavailable(authDomain: authDomain, reason: error.reason)
        }
        do {
            try store.write(name, text: String(decoding: response.body, as: UTF8.self))
        } catch {
            logger.warning("cannot cache the key set", metadata: ["reason": "\(error.message)"])
        }
        guard let key = set.key(id: keyID) else {
            throw .metadataUnverified(host: host, reason: "it is signed with an unknown key \(quotedPublic(keyID))")
        }
        return key
    }
}

/// A short public value (algorithm, kid) in quotes for messages, scrubbed like any outside text.
fileprivate func quotedPublic(_ text: String) -> String {
    "\"" + Redaction.scrub(String(text.prefix(64))) + "\""
}
