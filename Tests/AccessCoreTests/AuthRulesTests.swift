import AccessTestSupport
import AccessCore
import Foundation
import Testing

/// Pure rules of PROTOCOL.md §2–§3, with vectors made by python (Fixtures/AuthVectors.swift).
@Suite("Auth rules")
struct AuthRulesTests {
    static let iat = Date(timeIntervalSince1970: AuthVectors.iat)

    // MARK: Base64

    @Test func base64BothAlphabetsWithAndWithoutPadding() {
        #expect(Base64.decode("-_8=", alphabet: .url) == [0xFB, 0xFF])
        #expect(Base64.decode("-_8", alphabet: .url) == [0xFB, 0xFF])
        #expect(Base64.decode("+/8=", alphabet: .standard) == [0xFB, 0xFF])
        #expect(Base64.decode("+/8=", alphabet: .url) == nil)
        #expect(Base64.decode("-_8=", alphabet: .standard) == nil)
        #expect(Base64.decode("a", alphabet: .url) == nil)
        #expect(Base64.decode("ab c", alphabet: .url) == nil)
        #expect(Base64.encode([0xFB, 0xFF], alphabet: .url, padded: true) == "-_8=")
        #expect(Base64.encode([0xFB, 0xFF], alphabet: .url, padded: false) == "-_8")
    }

    // MARK: JWT

    @Test func decodesMetadataClaims() throws {
        let jwt = try JWT.decode(AuthVectors.metadata)
        #expect(jwt.algorithm == "RS256")
        #expect(jwt.keyID == "k1")
        #expect(jwt.claims.type == "match")
        #expect(jwt.claims.hostname == "ssh.example.com")
        #expect(jwt.claims.authDomain == "team.cloudflareaccess.com")
        #expect(jwt.claims.audience == [AuthVectors.aud])
        #expect(jwt.claims.appHostname == "*.example.com/ssh")
        #expect(jwt.claims.issuedAt == Self.iat)
        #expect(jwt.signature.count == 256)
        #expect(!"\(jwt)".contains("eyJ"))
    }

    @Test func audienceStringOrArray() throws {
        #expect(try JWT.decode(AuthVectors.appToken).claims.audience == [AuthVectors.aud])
        #expect(try JWT.decode(AuthVectors.appTokenArrayAud).claims.audience == ["other", AuthVectors.aud])
    }

    @Test(arguments: [
        ("", "three"), ("a.b", "three"), ("!!.e30.c2ln", "header is not base64url"),
        ("e30.e30.c2ln", "alg"), ("eyJhbGciOiJSUzI1NiJ9.WzFd.c2ln", "payload is not a JSON object"),
        ("eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOjF9.c2ln", "aud"), ("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOiJ4In0.c2ln", "exp"),
        ("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOnRydWV9.c2ln", "exp"),
    ])
    func refusesMalformedJWTs(token: String, reasonPart: String) {
        #expect {
            _ = try JWT.decode(token)
        } throws: { error in
            (error as? JWTFormatError)?.reason.contains(reasonPart) == true
        }
    }

    // MARK: Metadata claims (§2)

    static func claims(_ edit: (inout JWTClaims) -> Void = { _ in }) -> JWTClaims {
        var claims = JWTClaims()
        claims.type = "match"
        claims.hostname = "ssh.example.com"
        claims.authDomain = "Team.CloudflareAccess.com"
        claims.audience = ["aud1"]
        claims.issuedAt = iat
        edit(&claims)
        return claims
    }

    @Test func acceptsGoodMetadataAndFallsBackToHostname() throws {
        let result = MetadataRules.appInfo(claims: Self.claims(), requestedHost: "SSH.example.com", now: Self.iat)
        #expect(result == .success(AppInfo(authDomain: "team.cloudflareaccess.com", appAUD: "aud1", appHostname: "ssh.example.com")))
        let wildcard = MetadataRules.appInfo(claims: Self.claims { $0.appHostname = "*.example.com" },
                                             requestedHost: "ssh.example.com", now: Self.iat)
        #expect(try wildcard.get().appHostname == "*.example.com")
    }

    @Test func refusesEachBadClaim() {
        func check(_ edit: (inout JWTClaims) -> Void, now: Date = AuthRulesTests.iat) -> MetadataProblem? {
            if case .failure(let problem) = MetadataRules.appInfo(claims: Self.claims(edit), requestedHost: "ssh.example.com", now: now) {
                return problem
            }
            return nil
        }
        #expect(check { $0.type = "nomatch" } == .wrongType("nomatch"))
        #expect(check { $0.type = nil } == .wrongType(nil))
        #expect(check { $0.hostname = "other.example.com" } == .hostnameMismatch(claimed: "other.example.com", requested: "ssh.example.com"))
        #expect(check { $0.authDomain = "team.example.com" } == .authDomainNotAccess("team.example.com"))
        #expect(check { $0.authDomain = "evil.com/x.cloudflareaccess.com" } == .authDomainNotAccess("evil.com/x.cloudflareaccess.com"))
        #expect(check { $0.authDomain = "cloudflareaccess.com" } == .authDomainNotAccess("cloudflareaccess.com"))
        #expect(check { $0.authDomain = ".cloudflareaccess.com" } == .authDomainNotAccess(".cloudflareaccess.com"))
        #expect(check { $0.audience = [] } == .audienceEmpty)
        #expect(check { $0.audience = [""] } == .audienceEmpty)
        #expect(check { $0.issuedAt = nil } == .issuedAtMissing)
        #expect(check({ _ in }, now: Self.iat.addingTimeInterval(24 * 3600 + 1)) == .issuedTooLongAgo(Self.iat))
        #expect(check({ _ in }, now: Self.iat.addingTimeInterval(24 * 3600)) == nil)
        #expect(check({ _ in }, now: Self.iat.addingTimeInterval(-301)) == .issuedInTheFuture(Self.iat))
        #expect(check({ _ in }, now: Self.iat.addingTimeInterval(-300)) == nil)
    }

    // MARK: JWKS

    @Test func parsesJWKSAndSkipsOtherKeys() throws {
        let set = try JWKS.parse(Array(AuthVectors.jwks.utf8))
        #expect(set.keys.map(\.keyID) == ["k1"])
        #expect(set.key(id: "k1")?.modulus.count == 256)
        #expect(set.key(id: "k1")?.exponent == [1, 0, 1])
        #expect(set.key(id: "k9") == nil)
        #expect(throws: JWTFormatError.self) { try JWKS.parse(Array("[]".utf8)) }
    }

    @Test func jwksCachePolicy() {
        let now = Self.iat
        #expect(JWKSCachePolicy.decide(cachedAt: nil, hasKey: false, lastFetchedByUs: now, now: now) == .fetch)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-3600), hasKey: true, lastFetchedByUs: nil, now: now) == .useCached)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-24 * 3600), hasKey: true, lastFetchedByUs: nil, now: now) == .fetch)
        // An unknown kid: fetch unless this process fetched less than a minute ago.
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-30), hasKey: false, lastFetchedByUs: nil, now: now) == .fetch)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-30), hasKey: false,
                                       lastFetchedByUs: now.addingTimeInterval(-30), now: now) == .useCached)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-30), hasKey: false,
                                       lastFetchedByUs: now.addingTimeInterval(-60), now: now) == .fetch)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(-30), hasKey: false,
                                       lastFetchedByUs: now.addingTimeInterval(120), now: now) == .fetch)
    }

    // MARK: Cache files (§3)

    @Test func cacheFileNamesAsCloudflared() {
        let app = AppInfo(authDomain: "team.cloudflareaccess.com", appAUD: "aud1", appHostname: "*.example.com/ssh/x")
        #expect(TokenCacheNaming.appTokenFileName(for: app) == "-.example.com-ssh-x-aud1-token")
        #expect(TokenCacheNaming.orgTokenFileName(authDomain: "team.cloudflareaccess.com") == "team.cloudflareaccess.com-org-token")
        #expect(TokenCacheNaming.jwksFileName(authDomain: "team.cloudflareaccess.com") == "team.cloudflareaccess.com-jwks")
        #expect(TokenCacheNaming.lockFileName(for: "a-token") == "a-token.lock")
        #expect(TokenCacheNaming.urlFileName(for: "a-token") == "a-token.url")
        #expect(TokenCacheNaming.isTokenFileName("x-aud-token"))
        #expect(!TokenCacheNaming.isTokenFileName("x-aud-token.lock"))
        #expect(!TokenCacheNaming.isTokenFileName("team-jwks"))
    }

    @Test func cachedTokenValidity() {
        let valid = Self.iat.addingTimeInterval(60)
        #expect(TokenCacheRules.check(token: AuthVectors.appToken, requiredAudience: AuthVectors.aud, now: valid)
            == .success(Self.iat.addingTimeInterval(3600)))
        #expect(TokenCacheRules.check(token: AuthVectors.appTokenArrayAud, requiredAudience: AuthVectors.aud, now: valid)
            == .success(Self.iat.addingTimeInterval(3600)))
        #expect(TokenCacheRules.check(token: AuthVectors.appToken, requiredAudience: "another-aud", now: valid)
            == .failure(.foreignAudience))
        #expect(TokenCacheRules.check(token: AuthVectors.appToken, requiredAudience: AuthVectors.aud, now: Self.iat.addingTimeInterval(3600))
            == .failure(.expired(Self.iat.addingTimeInterval(3600))))
        #expect(TokenCacheRules.check(token: AuthVectors.metadata, requiredAudience: nil, now: valid) == .failure(.noExpiry))
        if case .failure(.malformed) = TokenCacheRules.check(token: "garbage\n", requiredAudience: nil, now: valid) {} else {
            Issue.record("garbage must be malformed")
        }
        #expect(TokenCacheRules.check(token: AuthVectors.orgToken, requiredAudience: nil, now: valid) == .success(Self.iat.addingTimeInterval(7200)))
    }

    // MARK: Lock staleness (§3)

    @Test func lockStaleness() {
        let now = Self.iat
        let record = Array(LoginLockRecord(pid: 4242, startTimeMilliseconds: 1_699_999_000_000).json.utf8)
        func verdict(_ content: [UInt8]?, age: TimeInterval = 5, start: Int64?) -> LoginLockRules.Verdict {
            LoginLockRules.verdict(content: content, modifiedAt: now.addingTimeInterval(-age), now: now) { pid in
                pid == 4242 ? start : nil
            }
        }
        #expect(verdict(record, start: 1_699_999_000_000) == .held(pid: 4242))
        #expect(verdict(record, start: 1_699_999_000_900) == .held(pid: 4242))
        if case .stale = verdict(record, start: 1_699_999_001_500) {} else { Issue.record("pid reuse must be stale") }
        if case .stale = verdict(record, start: nil) {} else { Issue.record("dead pid must be stale") }
        if case .stale = verdict(record, age: 601, start: 1_699_999_000_000) {} else { Issue.record("old lock must be stale") }
        if case .stale = verdict(Array("{not json".utf8), start: 1) {} else { Issue.record("garbage must be stale") }
        if case .stale = verdict(nil, start: 1) {} else { Issue.record("unreadable must be stale") }
        #expect(LoginLockRecord.parse(Array("{\"pid\":12,\"start_time\":1700000000123}".utf8))
            == LoginLockRecord(pid: 12, startTimeMilliseconds: 1_700_000_000_123))
    }

    // MARK: Login URL (§3 step 2)

    @Test func loginURLExactly() throws {
        let origin = try OriginURL.parse("ssh.example.com")
        let url = LoginURL.build(app: origin, publicKey: "abc-_=", appAUD: "AUD1")
        // Expected value computed with python's urlencode(sorted(...)), as Go's url.Values.Encode.
        #expect(url == "https://ssh.example.com/cdn-cgi/access/cli?aud=AUD1&edge_token_transfer=true"
            + "&redirect_url=https%3A%2F%2Fssh.example.com%2F%3Faud%3DAUD1%26token%3Dabc-_%253D"
            + "&send_org_token=true&token=abc-_%3D")
        let closing = LoginURL.build(app: origin, publicKey: "k", appAUD: "A", closeInterstitial: true)
        #expect(closing.contains("&close_interstitial=true&edge_token_transfer=true"))
        let withPort = LoginURL.build(app: try OriginURL.parse("https://ssh.example.com:8443/app"), publicKey: "k", appAUD: "A")
        #expect(withPort.hasPrefix("https://ssh.example.com:8443/cdn-cgi/access/cli?aud=A&"))
        #expect(withPort.contains("redirect_url=https%3A%2F%2Fssh.example.com%3A8443%2Fapp%3Faud%3DA%26token%3Dk&"))
    }

    // MARK: Transfer (§3 step 4)

    @Test func transferPollOutcomes() {
        #expect(TransferRules.pollURL(base: "https://login.cloudflareaccess.org/", publicKey: "ab-_c=")
            == "https://login.cloudflareaccess.org/transfer/ab-_c%3D")
        #expect(TransferRules.interpret(status: 404, servicePublicKey: nil, body: []) == .notYet)
        #expect(TransferRules.interpret(status: 302, servicePublicKey: nil, body: []) == .notYet)
        guard case .serviceError(502, let detail) = TransferRules.interpret(
            status: 502, servicePublicKey: nil, body: Array("upstream down token=\(AuthVectors.appToken)".utf8)) else {
            Issue.record("502 must be a service error"); return
        }
        #expect(detail.hasPrefix("upstream down") && !detail.contains("eyJ"))
        #expect(TransferRules.interpret(status: 200, servicePublicKey: nil, body: Array("AAAA".utf8))
            == .malformed("the answer has no service-public-key header"))
        #expect(TransferRules.interpret(status: 200, servicePublicKey: "a-_b", body: Array("%%%".utf8))
            == .malformed("the body is not base64"))
        #expect(TransferRules.interpret(status: 200, servicePublicKey: "!!", body: Array("AAAA".utf8))
            == .malformed("the service-public-key header is not base64"))
        #expect(TransferRules.interpret(status: 200, servicePublicKey: "-_8", body: Array("+/8=\n".utf8))
            == .sealed(box: [0xFB, 0xFF], senderPublicKey: [0xFB, 0xFF]))
        #expect(TransferRules.tokens(fromOpened: Array("{\"app_token\":\"a\",\"org_token\":\"o\"}".utf8))?.appToken == "a")
        #expect(TransferRules.tokens(fromOpened: Array("{\"org_token\":\"o\"}".utf8)) == nil)
        #expect(TransferRules.tokens(fromOpened: Array("[]".utf8)) == nil)
    }

    // MARK: Org token exchange (§3)

    @Test func orgTokenExchangeWalk() throws {
        var exchange = try #require(OrgTokenExchange(appURL: "https://ssh.example.com/", orgToken: "ORG"))
        guard case .send(let first) = exchange.start() else { Issue.record("no first request"); return }
        #expect(first.method == "HEAD" && first.url == "https://ssh.example.com/" && first.cookies.isEmpty)

        var action = exchange.received(status: 302, location: "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=1",
                                       setCookies: [])
        guard case .send(let login) = action else { Issue.record("no login request"); return }
        #expect(login.url == "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=1")
        #expect(login.cookies.map(\.name) == ["CF_Authorization"] && login.cookies.map(\.value) == ["ORG"])

        action = exchange.received(status: 302, location: "https://ssh.example.com/cdn-cgi/access/authorized?code=x",
                                   setCookies: ["CF_AppSession=sess1; Path=/; HttpOnly", "other=1"])
        guard case .send(let authorized) = action else { Issue.record("no authorized request"); return }
        #expect(authorized.url == "https://ssh.example.com/cdn-cgi/access/authorized?code=x")
        #expect(authorized.cookies.map(\.name) == ["CF_AppSession"] && authorized.cookies.map(\.value) == ["sess1"])

        action = exchange.received(status: 302, location: "/", setCookies: ["CF_Authorization=APP; Path=/; Secure"])
        guard case .finished(let token) = action else { Issue.record("no token"); return }
        #expect(token == "APP")
        #expect(!"\(exchange)".contains("ORG"))
    }

    @Test func orgTokenExchangeFailures() throws {
        var noRedirect = try #require(OrgTokenExchange(appURL: "https://ssh.example.com/", orgToken: "ORG"))
        if case .failed = noRedirect.received(status: 200, location: nil, setCookies: []) {} else { Issue.record("200 must fail") }

        var noCookie = try #require(OrgTokenExchange(appURL: "https://ssh.example.com/", orgToken: "ORG"))
        _ = noCookie.received(status: 302, location: "/cdn-cgi/access/authorized", setCookies: [])
        if case .failed = noCookie.received(status: 302, location: "/", setCookies: []) {} else { Issue.record("no cookie must fail") }

        var loop = try #require(OrgTokenExchange(appURL: "https://ssh.example.com/", orgToken: "ORG"))
        var last: OrgTokenExchange.Action = loop.start()
        for _ in 0..<11 { last = loop.received(status: 302, location: "/again", setCookies: []) }
        if case .failed = last {} else { Issue.record("a redirect loop must end") }

        var plain = try #require(OrgTokenExchange(appURL: "https://ssh.example.com/", orgToken: "ORG"))
        if case .failed = plain.received(status: 302, location: "http://ssh.example.com/", setCookies: []) {} else {
            Issue.record("plain http must fail")
        }
    }

    @Test func setCookieParsing() {
        #expect(SetCookie.parse("CF_Authorization=abc.def; Path=/; Secure") == SetCookie(name: "CF_Authorization", value: "abc.def"))
        #expect(SetCookie.parse("a=\"quoted\"") == SetCookie(name: "a", value: "quoted"))
        #expect(SetCookie.parse("novalue") == nil)
        #expect(SetCookie.parse("=x") == nil)
    }

    // MARK: --resolve

    @Test func resolveOverrides() throws {
        let v4 = try ResolveOverride.parse("Team.CloudflareAccess.com:443:127.0.0.1")
        #expect(v4.host == "team.cloudflareaccess.com" && v4.port == 443 && v4.address == "127.0.0.1")
        #expect(v4.description == "team.cloudflareaccess.com:443:127.0.0.1")
        let v6 = try ResolveOverride.parse("login.cloudflareaccess.org:8443:[::1]")
        #expect(v6.address == "::1" && v6.description == "login.cloudflareaccess.org:8443:[::1]")
        #expect(try ResolveOverride.parse("a.example:1:::1").address == "::1")
        for bad in ["", "host", "host:443", ":443:127.0.0.1", "host:0:127.0.0.1", "host:443:", "host:443:nothost", "ho st:443:127.0.0.1"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try ResolveOverride.parse(bad) }
        }
    }
}
