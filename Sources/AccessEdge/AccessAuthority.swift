import Foundation

/// The kind of token the emulator issues.
enum TokenKind: String, Sendable, CaseIterable {
    /// An application token (`CF_Authorization` of the app, `Cf-Access-Token`): `aud` = [AUD].
    case app
    /// An organisation token (`CF_Authorization` of the auth domain): `aud` = [auth domain].
    case org
}

/// What one poll of the transfer service gets.
enum TransferAnswer: Sendable {
    /// 404: no completed login for that key (yet).
    case notYet
    /// 500 (`--transfer-mode error500`).
    case serviceError
    /// No answer at all (`--transfer-mode hang`).
    case hang
    /// 200 with this body and `service-public-key` header.
    case delivered(body: String, servicePublicKey: String)
}

/// What opening the `/cdn-cgi/access/cli` page did.
enum LoginOpening: Sendable {
    /// The login is complete; the transfer service will deliver the tokens.
    case completed
    /// `--login-mode manual`: waiting for `POST /cdn-cgi/edge/admin/complete`.
    case waitingForApproval
}

/// Cloudflare's side of the login protocol, as state shared by every connection: the RS256
/// key ring, token issuance and checks, revocation, logins waiting for the transfer service,
/// and the one-shot `CF_AppSession`s of the org-token exchange.
///
/// Thread-safe: one `NSLock` guards the mutable state; signing happens outside it.
final class AccessAuthority: @unchecked Sendable {
    let settings: AuthSettings
    private let stats: EdgeStats
    /// The team's SSH user CA (short-lived certificates).
    let sshCA: SSHUserCA
    /// The emulated user's `sub`, fixed for the process.
    private let subject = UUID().uuidString.lowercased()

    private let lock = NSLock()
    /// Oldest first; the last one signs.
    private var keys: [RSASigningKey]
    private var metadataSignedWithCurrentKey = 0
    private var issuedAppTokenIDs: Set<String> = []
    private var revokedTokenIDs: Set<String> = []
    private var logins: [String: Login] = [:]
    private var appSessions: [String: AppSession] = [:]
    /// `CF_AppSession` values the app host set on its login redirects (`--app-session-layout
    /// app`): host and expiry; spent by `/cdn-cgi/access/authorized`.
    private var pendingAppSessions: [String: (host: String, expires: Date)] = [:]

    /// A login for one client public key, from the cli page (or an admin call) to its delivery.
    private struct Login {
        var sendOrgToken: Bool
        /// Set when completed: the JSON to seal.
        var payload: [UInt8]?
    }

    /// A `CF_AppSession` handed out by the login endpoint, spent by `/cdn-cgi/access/authorized`.
    private struct AppSession {
        var email: String
        var host: String
        var redirectPath: String
        var expires: Date
    }

    /// Makes the first signing key (2048-bit RSA; takes a moment).
    init(settings: AuthSettings, stats: EdgeStats) throws {
        self.settings = settings
        self.stats = stats
        sshCA = SSHUserCA(keyPath: settings.sshCAKeyPath, validitySeconds: settings.sshCertificateTTL)
        keys = [try RSASigningKey()]
    }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }

    // MARK: Keys

    /// The current signing key.
    private var currentKey: RSASigningKey { locked { keys[keys.count - 1] } }

    /// Makes a new key and makes it current; the JWKS keeps listing the old ones.
    /// Returns the new `kid`.
    @discardableResult
    func rotateKey() throws -> String {
        let fresh = try RSASigningKey()
        locked {
            keys.append(fresh)
            metadataSignedWithCurrentKey = 0
        }
        stats.record(.keyRotated)
        return fresh.kid
    }

    /// The JWKS document of `GET /cdn-cgi/access/certs`: every key, newest first.
    func jwksJSON() -> String {
        let ring = locked { Array(keys.reversed()) }
        let jwks: [[String: Any]] = ring.map { key -> [String: Any] in
            ["kid": key.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
             "n": Base64Text.url(key.modulus, padded: false), "e": Base64Text.url(key.exponent, padded: false)]
        }
        let certificates: [[String: Any]] = ring.map { key -> [String: Any] in
            ["kid": key.kid, "cert": key.certificatePEM]
        }
        let document: [String: Any] = ["keys": jwks, "public_cert": certificates[0], "public_certs": certificates]
        return String(decoding: (try? EdgeJWT.json(document)) ?? Array("{}".utf8), as: UTF8.self)
    }

    // MARK: Metadata

    /// The `cf-access-metadata` JWT for `host`, shaped by `--metadata-mode`; nil for `missing`.
    func metadataToken(host: String, now: Date = Date()) throws -> String? {
        let mode = settings.metadataMode
        if mode == .missing { return nil }
        if mode == .badBase64 { return "eyJ*bad*.*not*base64*.*sig*" }
        if settings.rotateKidAfter > 0 {
            let due = locked { metadataSignedWithCurrentKey >= settings.rotateKidAfter }
            if due { try rotateKey() }
        }
        let key = locked { () -> RSASigningKey in
            metadataSignedWithCurrentKey += 1
            return keys[keys.count - 1]
        }
        var iat = Int(now.timeIntervalSince1970)
        if mode == .staleIat { iat -= 25 * 3600 }
        if mode == .futureIat { iat += 600 }
        let claims: [String: Any] = [
            "type": mode == .wrongType ? "nomatch" : "match",
            "hostname": mode == .wrongHostname ? "wrong-" + host : host,
            "auth_domain": mode == .foreignAuthDomain ? "\(settings.team).evilcloudflareaccess.com" : settings.authDomain,
            "aud": mode == .wrongAudEmpty ? "" : settings.audience,
            "app_hostname": settings.appHostname,
            "iat": iat,
        ]
        let kid = mode == .unknownKid ? String(repeating: "0", count: 56) + "deadbeef" : nil
        let token = try EdgeJWT.sign(claims: claims, key: key, kid: kid)
        guard mode == .badSignature else { return token }
        // Flip a bit in the middle of the signature, keeping it valid base64url.
        let dot = token.lastIndex(of: ".")!
        var signature = Base64Text.decodeURL(String(token[token.index(after: dot)...]))!
        signature[signature.count / 2] ^= 0x01
        return String(token[...dot]) + Base64Text.url(signature, padded: false)
    }

    // MARK: Tokens

    /// Issues a token. `audience` overrides the kind's `aud`; `ttl` may be negative (already
    /// expired). App tokens get a `jti` so `revokeAllAppTokens` can revoke them.
    func issue(kind: TokenKind, audience: String? = nil, ttl: Int? = nil, email: String? = nil,
               now: Date = Date()) throws -> String {
        let issuedAt = Int(now.timeIntervalSince1970)
        let lifetime = ttl ?? (kind == .app ? settings.appTokenTTL : settings.orgTokenTTL)
        let id = Sodium.randomBytes(16).map { String(format: "%02x", $0) }.joined()
        let claims: [String: Any] = [
            "aud": [audience ?? (kind == .app ? settings.audience : settings.authDomain)],
            "email": email ?? settings.email,
            "exp": issuedAt + lifetime,
            "iat": issuedAt,
            "nbf": issuedAt,
            "iss": settings.issuer,
            "sub": subject,
            "type": kind.rawValue,
            "identity_nonce": Base64Text.url(Sodium.randomBytes(12), padded: false),
            "jti": id,
        ]
        let token = try EdgeJWT.sign(claims: claims, key: currentKey)
        if kind == .app {
            locked { _ = issuedAppTokenIDs.insert(id) }
        }
        stats.record(kind == .app ? .appTokenIssued : .orgTokenIssued)
        return token
    }

    /// Why a token is refused (for `--verbose` lines; never includes the token).
    enum Rejection: String, Error {
        case malformed = "not a JWT"
        case unknownKey = "signed by a key this emulator does not have"
        case badSignature = "bad signature"
        case wrongKind = "wrong token type"
        case wrongAudience = "wrong aud"
        case expired = "expired"
        case revoked = "revoked"
    }

    /// Checks a token this emulator issued: RS256 signature by one of its keys, `type`, `aud`
    /// (app: contains the AUD; org: contains the auth domain), `exp` in the future, not revoked.
    /// Returns the claims.
    func check(_ token: String, kind: TokenKind, now: Date = Date()) -> Result<[String: String], Rejection> {
        guard let parsed = EdgeJWT.parse(token.trimmingCharacters(in: .whitespaces)),
              parsed.header["alg"] as? String == "RS256" else { return .failure(.malformed) }
        let key = locked { keys.first { $0.kid == parsed.kid } }
        guard let key else { return .failure(.unknownKey) }
        guard key.verify(parsed.signingInput, signature: parsed.signature) else { return .failure(.badSignature) }
        let claims = parsed.claims
        guard claims["type"] as? String == kind.rawValue else { return .failure(.wrongKind) }
        let expected = kind == .app ? settings.audience : settings.authDomain
        guard EdgeJWT.audiences(claims).contains(expected) else { return .failure(.wrongAudience) }
        guard let exp = (claims["exp"] as? NSNumber)?.doubleValue, exp > now.timeIntervalSince1970 else {
            return .failure(.expired)
        }
        let id = claims["jti"] as? String ?? ""
        if kind == .app, locked({ revokedTokenIDs.contains(id) }) { return .failure(.revoked) }
        return .success(["email": claims["email"] as? String ?? settings.email, "jti": id])
    }

    /// True for an app token this emulator issued that is still good.
    func isValidAppToken(_ token: String) -> Bool {
        if case .success = check(token, kind: .app) { return true }
        return false
    }

    /// Revokes every app token issued so far; returns how many that was.
    @discardableResult
    func revokeAllAppTokens() -> Int {
        let count = locked { () -> Int in
            let fresh = issuedAppTokenIDs.subtracting(revokedTokenIDs).count
            revokedTokenIDs.formUnion(issuedAppTokenIDs)
            return fresh
        }
        stats.record(.tokensRevoked)
        return count
    }

    // MARK: Transfer flow

    /// The client's box public key from `token=`: base64 URL alphabet with padding, 32 bytes.
    static func clientPublicKey(_ text: String) -> [UInt8]? {
        guard text.count == 44, text.hasSuffix("="), let bytes = Base64Text.decodeURL(text),
              bytes.count == Sodium.keyBytes else { return nil }
        return bytes
    }

    /// The browser opened the cli page for `publicKey`: registers the login and, in `auto`
    /// mode, completes it.
    func openLogin(publicKey: String, sendOrgToken: Bool) throws -> LoginOpening {
        locked {
            if logins[publicKey] == nil {
                logins[publicKey] = Login(sendOrgToken: sendOrgToken)
            }
            return ()
        }
        guard settings.loginMode == .auto else { return .waitingForApproval }
        try completeLogin(publicKey: publicKey)
        return .completed
    }

    /// Completes the login for `publicKey` (registering it if the cli page was never opened):
    /// issues the app and org tokens the transfer service will deliver. False when it was
    /// already completed and not yet delivered.
    @discardableResult
    func completeLogin(publicKey: String, email: String? = nil) throws -> Bool {
        let already = locked { logins[publicKey]?.payload != nil }
        if already { return false }
        let sendOrgToken = locked { logins[publicKey]?.sendOrgToken ?? true }
        let appToken = try issue(kind: .app, email: email)
        var tokens = ["app_token": appToken]
        if sendOrgToken { tokens["org_token"] = try issue(kind: .org, email: email) }
        let payload = try EdgeJWT.json(tokens)
        locked { logins[publicKey, default: Login(sendOrgToken: sendOrgToken)].payload = payload }
        stats.record(.loginCompleted)
        return true
    }

    /// One poll of `GET /transfer/<publicKey>`, shaped by `--transfer-mode`. A delivery
    /// (200) is one-shot: the login is forgotten, later polls are "not yet".
    func poll(publicKey: String) -> TransferAnswer {
        switch settings.transferMode {
        case .error500: return .serviceError
        case .never: return .notYet
        case .hang: return .hang
        case .ok, .wrongKey, .truncated, .badBase64: break
        }
        let payload = locked { () -> [UInt8]? in
            guard let payload = logins[publicKey]?.payload else { return nil }
            logins[publicKey] = nil
            return payload
        }
        guard let payload, let clientKey = Self.clientPublicKey(publicKey) else { return .notYet }
        let server = Sodium.boxKeyPair()
        let nonce = Sodium.randomBytes(Sodium.nonceBytes)
        let sealer = settings.transferMode == .wrongKey ? Sodium.boxKeyPair().secretKey : server.secretKey
        guard let sealed = Sodium.box(payload, nonce: nonce, recipientPublicKey: clientKey,
                                      senderSecretKey: sealer) else { return .notYet }
        let body: String
        switch settings.transferMode {
        case .truncated: body = Base64Text.standard(Array(nonce.prefix(10)))
        case .badBase64: body = "%%% this is not base64 %%%"
        default: body = Base64Text.standard(nonce + sealed)
        }
        stats.record(.transferDelivered)
        return .delivered(body: body, servicePublicKey: Base64Text.url(server.publicKey, padded: true))
    }

    // MARK: Org-token exchange

    /// A valid app token's email, or nil.
    func appTokenEmail(_ token: String) -> String? {
        if case .success(let claims) = check(token, kind: .app) { return claims["email"] }
        return nil
    }

    /// A valid org token's email, or nil.
    func orgTokenEmail(_ token: String) -> String? {
        if case .success(let claims) = check(token, kind: .org) { return claims["email"] }
        return nil
    }

    /// Hands out a one-shot `CF_AppSession` (valid 5 minutes) for `host`.
    func startAppSession(email: String, host: String, redirectPath: String, now: Date = Date()) -> String {
        let id = Sodium.randomBytes(24).map { String(format: "%02x", $0) }.joined()
        locked {
            appSessions[id] = AppSession(email: email, host: host, redirectPath: redirectPath,
                                         expires: now.addingTimeInterval(300))
        }
        return id
    }

    /// A new `CF_AppSession` value for the app host's login redirect (valid 5 min).
    func newPendingAppSession(host: String, now: Date = Date()) -> String {
        let id = Sodium.randomBytes(16).map { String(format: "%02x", $0) }.joined()
        locked {
            pendingAppSessions = pendingAppSessions.filter { $0.value.expires > now }
            pendingAppSessions[id] = (host, now.addingTimeInterval(300))
        }
        return id
    }

    /// Spends a `CF_AppSession` the app host set, for `host`; false if unknown, spent, expired or
    /// another host's.
    func spendPendingAppSession(_ id: String, host: String, now: Date = Date()) -> Bool {
        let pending = locked { pendingAppSessions.removeValue(forKey: id) }
        guard let pending, pending.host == host, pending.expires > now else { return false }
        return true
    }

    /// Spends a `CF_AppSession` for `host`: a new app token and the path to go back to, or nil
    /// for an unknown, spent, expired or foreign session.
    func finishAppSession(_ id: String, host: String, now: Date = Date()) throws -> (token: String, redirectPath: String)? {
        let session = locked { appSessions.removeValue(forKey: id) }
        guard let session, session.host == host, session.expires > now else { return nil }
        return (try issue(kind: .app, email: session.email), session.redirectPath)
    }
}
