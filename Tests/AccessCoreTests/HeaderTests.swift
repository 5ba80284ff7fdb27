import AccessCore
import Testing

/// A `-H` argument and the header it must give.
struct HeaderCase: Sendable, CustomTestStringConvertible {
    let raw: String
    let name: String
    let value: String
    var testDescription: String { Self.visible(raw) }

    /// The input with control characters made visible, for test names.
    static func visible(_ text: String) -> String {
        text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "\\u{\(String($0.value, radix: 16))}" : String($0) }
            .joined()
    }
}

/// Input that must be refused and a piece of the message.
struct HeaderRefusal: Sendable, CustomTestStringConvertible {
    let raw: String
    let messageContains: String
    var testDescription: String { HeaderCase.visible(raw) }
}

@Suite("HeaderField.parse")
struct HeaderFieldTests {
    static let acceptedCases: [HeaderCase] = [
        HeaderCase(raw: "X-Foo: bar", name: "X-Foo", value: "bar"),
        HeaderCase(raw: "X-Foo:bar", name: "X-Foo", value: "bar"),
        HeaderCase(raw: "  X-Foo \t:   bar baz \t", name: "X-Foo", value: "bar baz"),
        HeaderCase(raw: "X-Empty:", name: "X-Empty", value: ""),
        HeaderCase(raw: "X-Colons: a:b::c", name: "X-Colons", value: "a:b::c"),
        HeaderCase(raw: "X-Tab: a\tb", name: "X-Tab", value: "a\tb"),
        HeaderCase(raw: "X-Utf8: café ☕", name: "X-Utf8", value: "café ☕"),
        HeaderCase(raw: "!#$%&'*+-.^_`|~09az: v", name: "!#$%&'*+-.^_`|~09az", value: "v"),
    ]

    @Test("accepted", arguments: acceptedCases)
    func accepted(_ c: HeaderCase) throws {
        let field = try HeaderField.parse(c.raw)
        #expect(field == HeaderField(name: c.name, value: c.value))
    }

    static let refusedCases: [HeaderRefusal] = [
        HeaderRefusal(raw: "X-Foo bar", messageContains: "has no \":\""),
        HeaderRefusal(raw: "", messageContains: "has no \":\""),
        HeaderRefusal(raw: ": value", messageContains: "empty header name"),
        HeaderRefusal(raw: "   : value", messageContains: "empty header name"),
        HeaderRefusal(raw: "X Foo: bar", messageContains: "contains white space"),
        HeaderRefusal(raw: "X\u{0}Y: bar", messageContains: "contains a NUL character"),
        HeaderRefusal(raw: "X\u{1B}Y: bar", messageContains: "control character (U+001B)"),
        HeaderRefusal(raw: "Ünïcode: bar", messageContains: "non-ASCII character (U+00DC)"),
        HeaderRefusal(raw: "X\r\nY: bar", messageContains: "contains a line break"),
        HeaderRefusal(raw: "X(y): v", messageContains: "contains \"(\""),
        HeaderRefusal(raw: "X: a\r\nb", messageContains: "the header \"X: …\": value contains a line break"),
        HeaderRefusal(raw: "X: a\nb", messageContains: "value contains a line break"),
        HeaderRefusal(raw: "X: a\rb", messageContains: "value contains a line break"),
        HeaderRefusal(raw: "X: a\u{2028}b", messageContains: "value contains a line break"),
        HeaderRefusal(raw: "X: a\u{0}b", messageContains: "value contains a NUL character"),
        HeaderRefusal(raw: "X: a\u{1B}[31m", messageContains: "value contains a control character (U+001B)"),
        HeaderRefusal(raw: "X: a\u{7F}", messageContains: "value contains a control character (U+007F)"),
        HeaderRefusal(raw: "X: trailing\r\n", messageContains: "value contains a line break"),
    ]

    @Test("refused", arguments: refusedCases)
    func refused(_ c: HeaderRefusal) {
        let error = #expect(throws: ConfigurationError.self) { try HeaderField.parse(c.raw) }
        #expect(error?.message.contains(c.messageContains) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("\n") == false)
        #expect(error?.message.contains("\r") == false)
    }

    @Test("messages never show a header value", arguments: [
        "Authorization: Bearer sekrit\r\n",
        "Cf-Access-Client-Secret: sekrit\u{0}",
        "Cookie: CF_Authorization=sekrit\u{1B}",
        "Authorization Bearer sekrit: x",
        "sekrit",
    ])
    func noValueInMessages(_ raw: String) {
        let error = #expect(throws: ConfigurationError.self) { try HeaderField.parse(raw) }
        #expect(error?.message.contains("sekrit") == false, "\(error?.message ?? "")")
    }

    @Test func secretHeadersPrintRedacted() {
        let secret = HeaderField(name: "authorization", value: "Bearer sekrit")
        #expect(secret.isSecret)
        #expect(secret.redactedLine == "authorization: [redacted]")
        #expect(!"\(secret)".contains("sekrit"))
        #expect(!String(reflecting: secret).contains("sekrit"))
        var dumped = ""
        dump(secret, to: &dumped)
        #expect(!dumped.contains("sekrit"))

        let plain = HeaderField(name: "X-Trace", value: "abc")
        #expect(!plain.isSecret)
        #expect(plain.redactedLine == "X-Trace: abc")
        #expect("\(plain)" == "X-Trace: abc")
    }

    @Test("issue 16.5: credential-sounding names are secret", arguments: [
        "X-Credential", "X-Passphrase", "X-Otp", "X-Forwarded-Jwt", "X-Signature", "X-Private-Data",
    ])
    func credentialNames(_ name: String) {
        #expect(HeaderField.isSecretName(name))
        let header = HeaderField(name: name, value: "123456")
        #expect(header.redactedLine == "\(name): [redacted]")
        #expect(!Redaction.scrub("\(name): 123456").contains("123456"))
    }

    @Test("a sentence with such a word before a colon stays readable")
    func credentialWordsInSentences() {
        let text = "the metadata is not a JWT: it does not have three dot-separated parts"
        #expect(Redaction.scrub(text) == text)
    }

    @Test("issue 16.5: a value that looks like a credential is redacted under any name", arguments: [
        "Bearer abc", "bearer abc", "Basic dXNlcjpwYXNz", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
        "sid=eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "9f8e7d6c5b4a39281706f5e4d3c2b1a0", "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5",
        "prefix sk_live_51HxYz2eZvKYlo2C0aBcDeFg",
        // A JWT cut short (two parts): still its header, so still a credential.
        "eyJhbGciOiJIUzI1NiJ9.cut",
    ])
    func credentialValues(_ value: String) {
        #expect(HeaderField.looksLikeCredential(value))
        let header = HeaderField(name: "X-Whatever", value: value)
        #expect(header.isSecret)
        #expect(header.redactedLine == "X-Whatever: [redacted]")
        #expect(!"\(header)".contains(value))
        let request = try? RequestBuilder.upgradeRequest(
            origin: try OriginURL.parse("ssh.example.com"), userAgent: "ua", serviceToken: nil, accessToken: nil,
            destination: nil, extraHeaders: [header])
        #expect(request?.redactedHeaderLines.contains("X-Whatever: [redacted]") == true)
    }

    @Test("ordinary values stay readable", arguments: [
        "abc", "gzip, deflate", "en-US,en;q=0.9", "ssh.internal.example.com:22", "cf-access-tcp/0.1.0",
        "Tue, 24 Nov 2026 13:00:00 GMT", "text/html; charset=utf-8", "no-cache", "1.2.3.4", "staging",
    ])
    func ordinaryValues(_ value: String) {
        #expect(!HeaderField.looksLikeCredential(value))
        #expect(HeaderField(name: "X-Trace", value: value).redactedLine == "X-Trace: \(value)")
    }

    @Test("secret names", arguments: [
        ("Cf-Access-Client-Secret", true), ("cf-access-token", true), ("AUTHORIZATION", true),
        ("Cookie", true), ("proxy-authorization", true),
        ("Cf-Access-Client-Id", false), ("User-Agent", false), ("X-Authorization-Hint", true), ("X-Request-Id", false),
    ])
    func secretNames(_ name: String, _ secret: Bool) {
        #expect(HeaderField.isSecretName(name) == secret)
    }
}

@Suite("ServiceToken")
struct ServiceTokenTests {
    static let id = "0123456789abcdef0123456789abcdef.access"
    static let secret = "f00dfacecafebabe0123456789abcdeff00dfacecafebabe0123456789abcdef"

    @Test func keepsValuesAndTrimsSurroundingSpace() throws {
        let token = try ServiceToken(clientID: "  \(Self.id)\n", clientSecret: "\t\(Self.secret)\r\n")
        #expect(token.clientID == Self.id)
        #expect(token.clientSecret == Self.secret)
    }

    @Test func neverPrintsTheSecret() throws {
        let token = try ServiceToken(clientID: Self.id, clientSecret: Self.secret)
        let renderings = [
            "\(token)", String(describing: token), String(reflecting: token), token.description, token.debugDescription,
            "\([token])", "\(Optional(token) as Any)",
        ]
        var dumped = ""
        dump(token, to: &dumped)
        for text in renderings + [dumped] {
            #expect(!text.contains(Self.secret), "\(text)")
            #expect(!text.contains(Self.id), "client ID shown whole: \(text)")
            #expect(text.contains("[redacted]"))
        }
        #expect(token.description == "ServiceToken(clientID: 012345…, clientSecret: [redacted])")
    }

    @Test("refused", arguments: [
        ("", "sekrit", "the service token's client ID is empty"),
        ("   ", "sekrit", "the service token's client ID is empty"),
        ("id", "", "the service token's client secret is empty"),
        ("id", " \n ", "the service token's client secret is empty"),
        ("i\nd", "sekrit", "the service token's client ID contains a line break"),
        ("id", "sek\r\nrit", "the service token's client secret contains a line break"),
        ("id", "sek\u{0}rit", "the service token's client secret contains a line break or control character"),
        ("id", "sek\u{1B}rit", "the service token's client secret contains a line break or control character"),
    ])
    func refused(_ id: String, _ secret: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) { try ServiceToken(clientID: id, clientSecret: secret) }
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("sek") == false)
    }
}

@Suite("RequestBuilder")
struct RequestBuilderTests {
    static let origin = try! OriginURL.parse("ssh.example.com")
    static let secret = "f00dfacecafebabe0123456789abcdeff00dfacecafebabe0123456789abcdef"
    static let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2lnbmF0dXJl"

    static func build(
        serviceToken: ServiceToken? = nil, accessToken: String? = nil, destination: String? = nil,
        extra: [HeaderField] = []
    ) throws(ConfigurationError) -> UpgradeRequest {
        try RequestBuilder.upgradeRequest(
            origin: origin, userAgent: Version.userAgent, serviceToken: serviceToken,
            accessToken: accessToken, destination: destination, extraHeaders: extra)
    }

    @Test func minimalRequestHasOnlyUserAgent() throws {
        let request = try Self.build()
        #expect(request.headers == [HeaderField(name: "User-Agent", value: "cf-access-tcp/0.1.0")])
        #expect(request.origin == Self.origin)
        #expect(Version.userAgent == "cf-access-tcp/" + Version.string)
    }

    @Test func headerOrder() throws {
        let token = try ServiceToken(clientID: "id.access", clientSecret: Self.secret)
        let request = try Self.build(
            serviceToken: token, accessToken: Self.jwt, destination: "ssh.internal:22",
            extra: [HeaderField(name: "X-B", value: "2"), HeaderField(name: "X-A", value: "1")])
        #expect(request.headers.map(\.name) == [
            "User-Agent", "Cf-Access-Token", "Cf-Access-Client-Id", "Cf-Access-Client-Secret",
            "Cf-Access-Jump-Destination", "X-B", "X-A",
        ])
        #expect(request.value(forHeader: "cf-access-client-secret") == Self.secret)
        #expect(request.value(forHeader: "CF-ACCESS-TOKEN") == Self.jwt)
        #expect(request.value(forHeader: "Cf-Access-Jump-Destination") == "ssh.internal:22")
        #expect(request.value(forHeader: "Host") == nil)
    }

    @Test("issue 17.6: a repeated -H name sends every value, in order (as cloudflared does)")
    func everyValueOfARepeatedName() throws {
        let request = try Self.build(extra: [
            HeaderField(name: "X-Env", value: "first"), HeaderField(name: "x-env", value: "second"),
            HeaderField(name: "X-Other", value: "o"), HeaderField(name: "X-ENV", value: "third"),
        ])
        #expect(request.headers.map(\.redactedLine) == [
            "User-Agent: cf-access-tcp/0.1.0", "X-Env: first", "x-env: second", "X-Other: o", "X-ENV: third",
        ])
        #expect(request.value(forHeader: "x-env") == "first")
    }

    @Test func builtInHeadersBeatUserDuplicates() throws {
        let token = try ServiceToken(clientID: "real-id", clientSecret: "real-secret")
        let request = try Self.build(serviceToken: token, accessToken: Self.jwt, destination: "db:5432", extra: [
            HeaderField(name: "user-agent", value: "curl/8"),
            HeaderField(name: "CF-ACCESS-CLIENT-ID", value: "other-id"),
            HeaderField(name: "cf-access-client-secret", value: "other-secret"),
            HeaderField(name: "Cf-Access-Token", value: "other-token"),
            HeaderField(name: "cf-access-jump-destination", value: "evil:22"),
        ])
        #expect(request.headers.count == 5)
        #expect(request.value(forHeader: "User-Agent") == Version.userAgent)
        #expect(request.value(forHeader: "Cf-Access-Client-Id") == "real-id")
        #expect(request.value(forHeader: "Cf-Access-Client-Secret") == "real-secret")
        #expect(request.value(forHeader: "Cf-Access-Token") == Self.jwt)
        #expect(request.value(forHeader: "Cf-Access-Jump-Destination") == "db:5432")
    }

    @Test("reserved names refused", arguments: [
        "Host", "host", "Connection", "UPGRADE", "Content-Length", "transfer-encoding",
        "Sec-WebSocket-Key", "sec-websocket-protocol", "Sec-WebSocket-Extensions", "Sec-WebSocket-Version",
    ])
    func reservedNames(_ name: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Self.build(extra: [HeaderField(name: name, value: "x")])
        }
        #expect(error?.message.contains("is not allowed") == true)
    }

    @Test("invalid extra headers refused", arguments: [
        ("X Y", "v", "white space"), ("", "v", "empty header name"), ("X:Y", "v", "contains \":\""),
        ("Ü", "v", "non-ASCII"), ("X\r\nInjected", "v", "line break"),
        ("X-A", "a\r\nInjected: 1", "line break"), ("X-A", "a\u{0}", "NUL"), ("X-A", "a\u{8}", "control character"),
    ])
    func invalidExtras(_ name: String, _ value: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Self.build(extra: [HeaderField(name: name, value: value)])
        }
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
    }

    @Test("access token checked", arguments: ["", "  ", "eyJ.a\r\nX: y", "eyJ.a\u{0}"])
    func badAccessToken(_ token: String) {
        let error = #expect(throws: ConfigurationError.self) { try Self.build(accessToken: token) }
        #expect(error?.message.contains("eyJ") == false)
    }

    @Test func accessTokenTrimmed() throws {
        #expect(try Self.build(accessToken: Self.jwt + "\n").value(forHeader: "Cf-Access-Token") == Self.jwt)
    }

    @Test("destination accepted and normalized", arguments: [
        ("ssh.internal:22", "ssh.internal:22"),
        ("  SSH.Internal.Example:2222 ", "ssh.internal.example:2222"),
        ("10.0.0.5:22", "10.0.0.5:22"),
        ("[2001:DB8::1]:22", "[2001:db8::1]:22"),
        ("tcp://ssh.internal:22", "ssh.internal:22"),
        ("ssh://ssh.internal:22/", "ssh.internal:22"),
        ("tcp://ssh.internal:22/path", "ssh.internal:22"),
        ("ssh.internal:22/some/path", "ssh.internal:22"),
        ("tcp://[2001:db8::1]:22/x", "[2001:db8::1]:22"),
        ("bücher.internal:22", "xn--bcher-kva.internal:22"),
    ])
    func destinationAccepted(_ raw: String, _ sent: String) throws {
        #expect(try Self.build(destination: raw).value(forHeader: "Cf-Access-Jump-Destination") == sent)
    }

    @Test("destination refused", arguments: [
        "", "ssh.internal", "ssh.internal:", "ssh.internal:0", "ssh.internal:70000", "ssh.internal:ssh",
        "ssh internal:22", "a:b:c", "2001:db8::1", "[::1]", "[::1]22", ":22", "host:22\r\nX: y", "ftp ://host:22",
    ])
    func destinationRefused(_ raw: String) {
        let error = #expect(throws: ConfigurationError.self) { try Self.build(destination: raw) }
        #expect(error?.message.hasPrefix("the destination") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("\n") == false)
    }

    @Test func redactedHeaderLinesHideSecretsButShowNames() throws {
        let token = try ServiceToken(clientID: "id.access", clientSecret: Self.secret)
        let request = try Self.build(serviceToken: token, accessToken: Self.jwt, destination: "ssh.internal:22", extra: [
            HeaderField(name: "Authorization", value: "Bearer sekrit-bearer"),
            HeaderField(name: "cookie", value: "CF_Authorization=sekrit-cookie"),
            HeaderField(name: "Proxy-Authorization", value: "Basic sekrit-proxy"),
            HeaderField(name: "X-Trace", value: "visible"),
        ])
        #expect(request.redactedHeaderLines == [
            "User-Agent: cf-access-tcp/0.1.0",
            "Cf-Access-Token: [redacted]",
            "Cf-Access-Client-Id: id.access",
            "Cf-Access-Client-Secret: [redacted]",
            "Cf-Access-Jump-Destination: ssh.internal:22",
            "Authorization: [redacted]",
            "cookie: [redacted]",
            "Proxy-Authorization: [redacted]",
            "X-Trace: visible",
        ])
        var dumped = ""
        dump(request, to: &dumped)
        for text in [request.redactedHeaderLines.joined(separator: "\n"), "\(request)", String(reflecting: request), dumped] {
            for secret in [Self.secret, Self.jwt, "sekrit"] {
                #expect(!text.contains(secret), "\(text)")
            }
        }
        #expect("\(request)".hasPrefix("GET wss://ssh.example.com/ ["))
    }
}
