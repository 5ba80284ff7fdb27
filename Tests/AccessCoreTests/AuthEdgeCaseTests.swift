import AccessCore
import AccessTestSupport
import Foundation
import Testing

/// A compact JWT from JSON texts (unsigned: the rules under test never check signatures).
private func jwt(header: String = #"{"alg":"RS256"}"#, payload: String, signature: String = "c2ln") -> String {
    Base64.encode(Array(header.utf8), alphabet: .url, padded: false) + "."
        + Base64.encode(Array(payload.utf8), alphabet: .url, padded: false) + "." + signature
}

/// The reason `JWT.decode` gives for `token`, or nil when it decodes.
private func decodeFailure(_ token: String) -> String? {
    do {
        _ = try JWT.decode(token)
        return nil
    } catch {
        return error.reason
    }
}

@Suite("Base64 edge cases")
struct Base64EdgeCaseTests {
    @Test("refused inputs", arguments: [
        ("QUJD====", Base64.Alphabet.standard, "more than two padding characters"),
        ("QUJDR", .standard, "a length of 4n+1 is never valid"),
        ("QUI==", .standard, "padding that does not complete a quad"),
        ("QU=I", .standard, "padding inside the text"),
        ("a_b-", .standard, "URL characters in the standard alphabet"),
        ("ab-c", .standard, "\"-\" in the standard alphabet"),
        ("ab/c", .url, "\"/\" in the URL alphabet"),
        ("QUJD\n", .standard, "white space"),
        ("QUJ\u{E9}", .url, "a non-ASCII letter"),
    ])
    func refuses(_ text: String, _ alphabet: Base64.Alphabet, _ why: String) {
        #expect(Base64.decode(text, alphabet: alphabet) == nil, "\(why)")
    }

    @Test func decodesEveryLengthWithAndWithoutPadding() {
        let bytes: [UInt8] = [0x00, 0x10, 0x83, 0xFB, 0xFF, 0xBF, 0x7E]
        for count in 0...bytes.count {
            let slice = Array(bytes.prefix(count))
            for alphabet in [Base64.Alphabet.standard, .url] {
                for padded in [true, false] {
                    let text = Base64.encode(slice, alphabet: alphabet, padded: padded)
                    #expect(Base64.decode(text, alphabet: alphabet) == slice, "\(text)")
                    #expect(padded || !text.hasSuffix("="))
                }
            }
        }
    }

    @Test func standardEncodingKeepsPlusAndSlash() {
        #expect(Base64.encode([0xFB, 0xFF], alphabet: .standard, padded: true) == "+/8=")
        #expect(Base64.encode([0xFB, 0xFF], alphabet: .standard, padded: false) == "+/8")
        #expect(Base64.encode([], alphabet: .url, padded: true) == "")
        #expect(Base64.decode("", alphabet: .url) == [])
    }
}

@Suite("JWT edge cases")
struct JWTEdgeCaseTests {
    @Test("refused tokens", arguments: [
        (jwt(payload: "{}", signature: "!!"), "its signature is not base64url"),
        ("eyJhbGciOiJSUzI1NiJ9.%%.c2ln", "its payload is not base64url"),
        (jwt(header: "[1]", payload: "{}"), "its header is not a JSON object"),
        (jwt(header: "not json", payload: "{}"), "its header is not a JSON object"),
        (jwt(header: #"{"alg":5}"#, payload: "{}"), "its header has no \"alg\""),
        (jwt(header: #"{"alg":"RS256","kid":7}"#, payload: "{}"), "its header \"kid\" is not a string"),
        (jwt(payload: #"{"aud":["a",1]}"#), "its \"aud\" array holds a non-string"),
        (jwt(payload: #"{"aud":{"a":1}}"#), "its \"aud\" is neither a string nor an array of strings"),
        (jwt(payload: #"{"iat":false}"#), "its \"iat\" is not a number"),
        (jwt(payload: #"{"iss":1}"#), "its \"iss\" is not a string"),
        (jwt(payload: #"{"type":true}"#), "its \"type\" is not a string"),
        (jwt(payload: #"{"hostname":["h"]}"#), "its \"hostname\" is not a string"),
        (jwt(payload: #"{"auth_domain":null}"#), "its \"auth_domain\" is not a string"),
        (jwt(payload: #"{"app_hostname":2}"#), "its \"app_hostname\" is not a string"),
        ("a.b.c.d", "it does not have three dot-separated parts"),
    ])
    func refuses(_ token: String, _ reason: String) {
        #expect(decodeFailure(token) == reason)
    }

    @Test func readsEveryClaimItLooksAt() throws {
        let token = jwt(header: #"{"alg":"RS256","kid":"k7","typ":"JWT"}"#,
                        payload: #"{"aud":"app","exp":1700003600.5,"iat":1700000000,"iss":"https://team.cloudflareaccess.com","#
                            + #""type":"org","hostname":"h.example","auth_domain":"team.cloudflareaccess.com","#
                            + #""app_hostname":"*.example","email":"ignored@example.com"}"#,
                        signature: "c2ln")
        let decoded = try JWT.decode("  \(token)\n")
        #expect(decoded.keyID == "k7")
        #expect(decoded.claims.audience == ["app"])
        #expect(decoded.claims.expiresAt == Date(timeIntervalSince1970: 1_700_003_600.5))
        #expect(decoded.claims.issuedAt == Date(timeIntervalSince1970: 1_700_000_000))
        #expect(decoded.claims.issuer == "https://team.cloudflareaccess.com")
        #expect(decoded.claims.type == "org")
        #expect(decoded.claims.hostname == "h.example")
        #expect(decoded.claims.authDomain == "team.cloudflareaccess.com")
        #expect(decoded.claims.appHostname == "*.example")
        #expect(decoded.signature == Array("sig".utf8))
        #expect(decoded.signingInput == Array(token.split(separator: ".").prefix(2).joined(separator: ".").utf8))
    }

    @Test func noKidAndNoAudienceAreFine() throws {
        let decoded = try JWT.decode(jwt(payload: "{}"))
        #expect(decoded.keyID == nil)
        #expect(decoded.claims == JWTClaims())
        #expect(decoded.description == "JWT(alg: RS256, kid: none)")
    }

    @Test func noDescriptionShowsTheToken() throws {
        let decoded = try JWT.decode(AuthVectors.appToken)
        let signature = String(AuthVectors.appToken.split(separator: ".")[2].prefix(12))
        var dumped = ""
        dump(decoded, to: &dumped)
        for text in [decoded.description, decoded.debugDescription, String(reflecting: decoded), dumped] {
            #expect(text.contains("JWT(alg: RS256, kid: k1)"))
            #expect(!text.contains("eyJ") && !text.contains(signature), "\(text)")
        }
        do {
            _ = try JWT.decode("x")
            Issue.record("\"x\" decoded as a JWT")
        } catch {
            #expect(error.description == error.reason && error.reason == "it does not have three dot-separated parts")
        }
    }
}

@Suite("JWKS edge cases")
struct JWKSEdgeCaseTests {
    @Test func skipsKeysItCannotUse() throws {
        let good = #"{"kty":"RSA","kid":"good","n":"AQAB","e":"AQAB"}"#
        let set = try JWKS.parse(Array(("{\"keys\":[" + [
            "\"not an object\"",
            #"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#,
            #"{"kty":"RSA","kid":"empty-n","n":"","e":"AQAB"}"#,
            #"{"kty":"RSA","kid":"bad-e","n":"AQAB","e":"!!"}"#,
            #"{"kid":"no-kty","n":"AQAB","e":"AQAB"}"#,
            good,
        ].joined(separator: ",") + "]}").utf8))
        #expect(set.keys == [RSAPublicJWK(keyID: "good", modulus: [1, 0, 1], exponent: [1, 0, 1])])
        #expect(throws: JWTFormatError.self) { try JWKS.parse(Array(#"{"keys":{}}"#.utf8)) }
        #expect(throws: JWTFormatError.self) { try JWKS.parse(Array("not json".utf8)) }
    }

    @Test func aCacheTimeInTheFarFutureIsFetchedAgain() {
        let now = Date(timeIntervalSince1970: AuthVectors.iat)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(25 * 3600), hasKey: true, lastFetchedByUs: nil, now: now) == .fetch)
        #expect(JWKSCachePolicy.decide(cachedAt: now.addingTimeInterval(3600), hasKey: true, lastFetchedByUs: nil, now: now) == .useCached)
    }
}

@Suite("metadata claim edge cases")
struct MetadataEdgeCaseTests {
    @Test("problem phrases", arguments: [
        (MetadataProblem.wrongType(nil), "its type is \"\" instead of \"match\""),
        (.wrongType("no\nmatch"), "its type is \"no\\nmatch\" instead of \"match\""),
        (.hostnameMismatch(claimed: "evil.example", requested: "ssh.example.com"),
         "it is for host \"evil.example\", not ssh.example.com"),
        (.hostnameMismatch(claimed: nil, requested: "ssh.example.com"), "it is for host \"\", not ssh.example.com"),
        (.authDomainNotAccess("evil.example"), "its auth_domain \"evil.example\" is not a *.cloudflareaccess.com domain"),
        (.authDomainNotAccess(nil), "its auth_domain \"\" is not a *.cloudflareaccess.com domain"),
        (.audienceEmpty, "it names no application audience (aud)"),
        (.issuedAtMissing, "it has no issue time (iat)"),
        (.issuedTooLongAgo(Date(timeIntervalSince1970: 0)), "it was issued more than 24 hours ago (check the system clock)"),
        (.issuedInTheFuture(Date(timeIntervalSince1970: 0)),
         "it was issued more than 5 minutes in the future (check the system clock)"),
    ])
    func phrase(_ problem: MetadataProblem, _ expected: String) {
        #expect(problem.description == expected)
    }

    @Test("auth domains", arguments: [
        ("team.cloudflareaccess.com", true),
        ("TEAM.CloudflareAccess.COM", true),
        ("a-b.c9.cloudflareaccess.com", true),
        ("-team.cloudflareaccess.com", false),
        ("team-.cloudflareaccess.com", false),
        ("te_am.cloudflareaccess.com", false),
        ("te am.cloudflareaccess.com", false),
        ("tëam.cloudflareaccess.com", false),
        ("a..cloudflareaccess.com", false),
        (String(repeating: "a", count: 64) + ".cloudflareaccess.com", false),
        (String(repeating: "a", count: 63) + ".cloudflareaccess.com", true),
        ("team.cloudflareaccess.com.evil.example", false),
        ("teamcloudflareaccess.com", false),
    ])
    func authDomain(_ domain: String, _ accepted: Bool) {
        #expect(MetadataRules.isAccessDomain(domain) == accepted)
    }

    @Test func trailingDotsAndEmptyAppHostname() throws {
        var claims = AuthRulesTests.claims()
        claims.hostname = "SSH.Example.com."
        claims.appHostname = ""
        let info = try MetadataRules.appInfo(claims: claims, requestedHost: "ssh.example.com", now: AuthRulesTests.iat).get()
        #expect(info.appHostname == "SSH.Example.com.")
        #expect(info.description == "app SSH.Example.com. at team.cloudflareaccess.com")
        claims.hostname = nil
        #expect(MetadataRules.appInfo(claims: claims, requestedHost: "ssh.example.com", now: AuthRulesTests.iat)
            == .failure(.hostnameMismatch(claimed: nil, requested: "ssh.example.com")))
    }

    @Test func theFirstNonEmptyAudienceIsTheApp() throws {
        var claims = AuthRulesTests.claims()
        claims.audience = ["", "second", "third"]
        #expect(try MetadataRules.appInfo(claims: claims, requestedHost: "ssh.example.com", now: AuthRulesTests.iat)
            .get().appAUD == "second")
    }
}

@Suite("token cache edge cases")
struct TokenCacheEdgeCaseTests {
    @Test("problem phrases", arguments: [
        (CachedTokenProblem.malformed("its header is not base64url"), "it is not a valid token (its header is not base64url)"),
        (.noExpiry, "it has no expiry time (exp)"),
        (.expired(Date(timeIntervalSince1970: 1_767_225_600)), "it expired at 2026-01-01T00:00:00Z"),
        (.foreignAudience, "it belongs to another application (aud)"),
    ])
    func phrase(_ problem: CachedTokenProblem, _ expected: String) {
        #expect(problem.description == expected)
    }

    @Test func malformedNamesTheReason() {
        let now = Date(timeIntervalSince1970: AuthVectors.iat)
        #expect(TokenCacheRules.check(token: "a.b", requiredAudience: nil, now: now)
            == .failure(.malformed("it does not have three dot-separated parts")))
        #expect(TokenCacheRules.check(token: jwt(payload: #"{"exp":"soon"}"#), requiredAudience: nil, now: now)
            == .failure(.malformed("its \"exp\" is not a number")))
    }

    @Test func fileNamesReplaceOnlyWhatCloudflaredReplaces() {
        #expect(TokenCacheNaming.orgTokenFileName(authDomain: "team/x*") == "team-x*-org-token")
        #expect(TokenCacheNaming.jwksFileName(authDomain: "a/b") == "a-b-jwks")
        #expect(!TokenCacheNaming.isTokenFileName(".hidden-token"))
        #expect(TokenCacheNaming.isTokenFileName(TokenCacheNaming.orgTokenFileName(authDomain: "team.cloudflareaccess.com")))
    }

    @Test("the AUD of an app token file of exactly one host, for the token offered before discovery")
    func audienceOfAHostsTokenFile() {
        let host = "ssh.example.com"
        #expect(TokenCacheNaming.audience(ofAppTokenFile: "ssh.example.com-4b1d6c0e8f2a-token", host: host) == "4b1d6c0e8f2a")
        let app = AppInfo(authDomain: "team.cloudflareaccess.com", appAUD: "abc123", appHostname: host)
        #expect(TokenCacheNaming.audience(ofAppTokenFile: TokenCacheNaming.appTokenFileName(for: app), host: host) == "abc123")
        for other in ["ssh.example.com-path-abc123-token",      // an application on a path
                      "ssh.example.com.evil-abc123-token",      // another host
                      "xssh.example.com-abc123-token",          // another host
                      "ssh.example.com--token",                 // no AUD
                      "ssh.example.com-token",
                      "ssh.example.com-abc123-token.lock",      // not a token file
                      "ssh.example.com-org-token"] {
            #expect(TokenCacheNaming.audience(ofAppTokenFile: other, host: host) == nil, "\(other)")
        }
        #expect(TokenCacheNaming.audience(ofAppTokenFile: "-abc-token", host: "") == nil)
    }
}

@Suite("HTTP seam values")
struct HTTPSeamTests {
    @Test func requestDescriptionHidesQueryHeadersAndCookies() {
        let request = HTTPRequest(method: "HEAD", url: "https://ssh.example.com/cdn-cgi/access/login?token=\(Planted.jwt)",
                                  headers: [("Authorization", "Bearer \(Planted.secret)")],
                                  cookies: [("CF_Authorization", Planted.word)], timeoutSeconds: 7)
        #expect(request.description == "HEAD https://ssh.example.com/cdn-cgi/access/login")
        #expect(request.headers.map(\.name) == ["Authorization"] && request.cookies.map(\.name) == ["CF_Authorization"])
        #expect(request.timeoutSeconds == 7)
        let bare = HTTPRequest(method: "GET", url: "https://h.example/", timeoutSeconds: 3)
        #expect(bare.headers.isEmpty && bare.cookies.isEmpty)
    }

    @Test func responseHeaderLookupIgnoresCaseAndKeepsRepeats() {
        let response = HTTPResponse(status: 302, headers: [
            ("Set-Cookie", "a=1"), ("Location", "/next"), ("set-cookie", "b=2"), ("SET-COOKIE", "c=3"),
        ], body: Array("secret body".utf8))
        #expect(response.values(of: "Set-Cookie") == ["a=1", "b=2", "c=3"])
        #expect(response.value(of: "LOCATION") == "/next")
        #expect(response.value(of: "cf-access-metadata") == nil)
        #expect(response.values(of: "x").isEmpty)
        #expect(response.description == "HTTP 302")
    }

    @Test("box problems", arguments: [
        (BoxOpenProblem.badSenderKey, "the service public key is not a 32-byte key"),
        (.truncated, "the sealed data is shorter than a nonce and an authenticator"),
        (.rejected, "it does not open with our key (wrong key or altered data)"),
    ])
    func boxProblem(_ problem: BoxOpenProblem, _ expected: String) {
        #expect(problem.description == expected)
    }
}

@Suite("transfer and exchange edge cases")
struct TransferEdgeCaseTests {
    @Test func longServiceErrorsAreCut() {
        guard case .serviceError(503, let detail) = TransferRules.interpret(
            status: 503, servicePublicKey: nil, body: Array(String(repeating: "x", count: 600).utf8)) else {
            Issue.record("503 must be a service error")
            return
        }
        #expect(detail == String(repeating: "x", count: 200) + "…")
        #expect(TransferRules.interpret(status: 500, servicePublicKey: nil, body: []) == .serviceError(status: 500, detail: ""))
    }

    @Test func keyHeaderInEitherAlphabetAndBlankHeader() {
        #expect(TransferRules.interpret(status: 200, servicePublicKey: " +/8= ", body: Array("AAAA".utf8))
            == .sealed(box: [0, 0, 0], senderPublicKey: [0xFB, 0xFF]))
        #expect(TransferRules.interpret(status: 200, servicePublicKey: "  ", body: Array("AAAA".utf8))
            == .malformed("the answer has no service-public-key header"))
        #expect(TransferRules.pollURL(base: "https://login.fed.cloudflareaccess.org//", publicKey: "a==")
            == "https://login.fed.cloudflareaccess.org/transfer/a%3D%3D")
    }

    @Test func openedTokensAreTrimmedAndNeverPrinted() throws {
        let tokens = try #require(TransferRules.tokens(fromOpened: Array(#"{"app_token":" \#(AuthVectors.appToken)\n"}"#.utf8)))
        #expect(tokens.appToken == AuthVectors.appToken)
        #expect(tokens.orgToken == "")
        #expect(tokens.description == "Tokens([redacted])" && "\(tokens)" == "Tokens([redacted])")
        #expect(TransferRules.tokens(fromOpened: Array(#"{"app_token":"  "}"#.utf8)) == nil)
        #expect(TransferRules.tokens(fromOpened: Array(#"{"app_token":1}"#.utf8)) == nil)
    }

    @Test("app URLs the exchange refuses", arguments: ["ssh.example.com", "ftp://ssh.example.com/", "https://", "https:///path"])
    func refusedAppURL(_ url: String) {
        #expect(OrgTokenExchange(appURL: url, orgToken: "ORG") == nil)
    }

    /// Follows one redirect from `from` to `location` and returns the URL requested next.
    private func next(from: String, location: String) throws -> String? {
        var exchange = try #require(OrgTokenExchange(appURL: from, orgToken: "ORG"))
        guard case .send(let request) = exchange.received(status: 302, location: location, setCookies: []) else { return nil }
        return request.url
    }

    @Test("Location resolution", arguments: [
        ("https://a.example/x/y?q=1#f", "//b.example/p", "https://b.example/p"),
        ("https://a.example/x/y?q=1", "?page=2", "https://a.example/x/y?page=2"),
        ("https://a.example/x/y", "z?k=v#frag", "https://a.example/x/z?k=v"),
        ("https://a.example/x/", "z", "https://a.example/x/z"),
        ("https://a.example", "z", "https://a.example/z"),
        ("https://A.example:8443/x", " /cdn-cgi/access/login/app ", "https://A.example:8443/cdn-cgi/access/login/app"),
        ("HTTPS://a.example?x=1#top", "https://c.example", "https://c.example/"),
    ])
    func resolves(_ from: String, _ location: String, _ expected: String) throws {
        #expect(try next(from: from, location: location) == expected)
    }

    @Test func redirectsThatCannotBeFollowedEndTheExchange() throws {
        #expect(try next(from: "https://a.example/", location: "ftp://files.example/") == nil)
        var exchange = try #require(OrgTokenExchange(appURL: "https://a.example/", orgToken: "ORG"))
        guard case .failed(let reason) = exchange.received(status: 302, location: nil, setCookies: []) else {
            Issue.record("a 302 without Location must fail")
            return
        }
        #expect(reason == "the app answered HTTP 302 without reaching /cdn-cgi/access/authorized")
        guard case .failed(let again) = exchange.received(status: 302, location: "/x", setCookies: []) else {
            Issue.record("an ended exchange must stay ended")
            return
        }
        #expect(again == "the exchange already ended")
    }

    @Test func descriptionShowsNeitherQueryNorToken() throws {
        let exchange = try #require(OrgTokenExchange(appURL: "https://a.example/app?token=secret", orgToken: Planted.jwt))
        #expect(exchange.description == "OrgTokenExchange(https://a.example/app)")
    }

    @Test func theLastSessionCookieAndTokenCookieWin() throws {
        var exchange = try #require(OrgTokenExchange(appURL: "https://a.example/", orgToken: "ORG"))
        let action = exchange.received(status: 302, location: "/cdn-cgi/access/authorized",
                                       setCookies: ["CF_AppSession=old", "CF_AppSession=\"new\"; Path=/"])
        guard case .send(let authorized) = action else {
            Issue.record("no authorized request")
            return
        }
        #expect(authorized.cookies.map(\.value) == ["new"])
        guard case .finished(let token) = exchange.received(
            status: 200, location: nil, setCookies: ["CF_Authorization=first", "CF_Authorization=second"]) else {
            Issue.record("no token")
            return
        }
        #expect(token == "second")
    }

    @Test func anEmptyTokenCookieIsNoToken() throws {
        var exchange = try #require(OrgTokenExchange(appURL: "https://a.example/cdn-cgi/access/authorized", orgToken: "ORG"))
        guard case .failed(let reason) = exchange.received(status: 302, location: "/", setCookies: ["CF_Authorization="]) else {
            Issue.record("an empty token cookie must fail")
            return
        }
        #expect(reason == "the authorized answer (HTTP 302) set no CF_Authorization cookie")
    }
}

@Suite("login lock record edge cases")
struct LoginLockEdgeCaseTests {
    @Test("records refused", arguments: [
        #"{"pid":0,"start_time":1}"#,
        #"{"pid":-3,"start_time":1}"#,
        #"{"pid":2147483648,"start_time":1}"#,
        #"{"pid":5,"start_time":0}"#,
        #"{"pid":"5","start_time":1}"#,
        #"{"pid":5}"#,
        "[5,1]",
    ])
    func refused(_ json: String) {
        #expect(LoginLockRecord.parse(Array(json.utf8)) == nil)
    }

    @Test func recordRoundTripsAtTheLimits() {
        let record = LoginLockRecord(pid: Int32.max, startTimeMilliseconds: 1)
        #expect(record.json == #"{"pid":2147483647,"start_time":1}"#)
        #expect(LoginLockRecord.parse(Array(record.json.utf8)) == record)
    }
}

@Suite("login URL escaping")
struct LoginURLEscapeTests {
    @Test("as Go's url.QueryEscape", arguments: [
        ("AZaz09-_.~", "AZaz09-_.~"),
        ("a b", "a+b"),
        ("k=v&x/y?z", "k%3Dv%26x%2Fy%3Fz"),
        ("é", "%C3%A9"),
        ("+%", "%2B%25"),
    ])
    func escapes(_ raw: String, _ expected: String) {
        #expect(LoginURL.queryEscape(raw) == expected)
    }
}
