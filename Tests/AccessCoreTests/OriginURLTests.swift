import AccessCore
import Testing

/// A `the hostname` that must parse, and what it must become.
struct OriginCase: Sendable, CustomTestStringConvertible {
    let input: String
    let host: String
    let port: Int?
    let path: String
    let hostHeader: String
    let webSocketURL: String

    init(_ input: String, host: String, port: Int? = nil, path: String = "/", hostHeader: String? = nil, webSocketURL: String? = nil) {
        self.input = input
        self.host = host
        self.port = port
        self.path = path
        let header = hostHeader ?? (port.map { host + ":" + String($0) } ?? host)
        self.hostHeader = header
        self.webSocketURL = webSocketURL ?? "wss://" + header + path
    }

    var testDescription: String { "\"\(input)\"" }
}

/// A `the hostname` that must be refused, and a piece of the message.
struct RefusedCase: Sendable, CustomTestStringConvertible {
    let input: String
    let messageContains: String
    /// Text that must not appear in the message (a secret in the input).
    let mustNotContain: String?

    init(_ input: String, _ messageContains: String, mustNotContain: String? = nil) {
        self.input = input
        self.messageContains = messageContains
        self.mustNotContain = mustNotContain
    }

    var testDescription: String { "\"\(input)\"" }
}

@Suite("OriginURL.parse")
struct OriginURLTests {
    static let acceptedCases: [OriginCase] = [
        // Scheme handling.
        OriginCase("ssh.example.com", host: "ssh.example.com"),
        OriginCase("  ssh.example.com \n", host: "ssh.example.com"),
        OriginCase("http://ssh.example.com", host: "ssh.example.com"),
        OriginCase("https://ssh.example.com", host: "ssh.example.com"),
        OriginCase("HTTPS://ssh.example.com", host: "ssh.example.com"),
        OriginCase("ws://ssh.example.com", host: "ssh.example.com"),
        OriginCase("wss://ssh.example.com", host: "ssh.example.com"),
        // Ports.
        OriginCase("ssh.example.com:2222", host: "ssh.example.com", port: 2222),
        OriginCase("https://ssh.example.com:8443", host: "ssh.example.com", port: 8443),
        OriginCase("wss://ssh.example.com:443", host: "ssh.example.com", port: 443),
        OriginCase("ssh.example.com:1", host: "ssh.example.com", port: 1),
        OriginCase("ssh.example.com:65535", host: "ssh.example.com", port: 65535),
        // Case, trailing dot, paths.
        OriginCase("SSH.Example.COM", host: "ssh.example.com"),
        OriginCase("ssh.example.com.", host: "ssh.example.com"),
        OriginCase("https://ssh.example.com./", host: "ssh.example.com"),
        OriginCase("https://ssh.example.com/some/Path", host: "ssh.example.com", path: "/some/Path"),
        OriginCase("ssh.example.com:8443/a%20b/", host: "ssh.example.com", port: 8443, path: "/a%20b/"),
        OriginCase("svc_1.example.com", host: "svc_1.example.com"),
        OriginCase(String(repeating: "a", count: 63) + ".example.com",
                   host: String(repeating: "a", count: 63) + ".example.com"),
        // IDN → Punycode (vectors from Python's `"…".encode("idna")`).
        OriginCase("bücher.example", host: "xn--bcher-kva.example"),
        OriginCase("BÜCHER.example", host: "xn--bcher-kva.example"),
        OriginCase("bu\u{0308}cher.example", host: "xn--bcher-kva.example"), // decomposed ü, NFC first
        OriginCase("https://münchen.de:8443/x", host: "xn--mnchen-3ya.de", port: 8443, path: "/x"),
        OriginCase("例え.テスト", host: "xn--r8jz45g.xn--zckzah"),
        OriginCase("例え\u{3002}テスト", host: "xn--r8jz45g.xn--zckzah"), // ideographic full stop
        OriginCase("ssh.пример.рф", host: "ssh.xn--e1afmkfd.xn--p1ai"),
        OriginCase("xn--bcher-kva.example", host: "xn--bcher-kva.example"),
        // IPv4.
        OriginCase("192.0.2.1", host: "192.0.2.1"),
        OriginCase("https://192.0.2.1:8443", host: "192.0.2.1", port: 8443),
        // IPv6.
        OriginCase("::1", host: "::1", hostHeader: "[::1]", webSocketURL: "wss://[::1]/"),
        OriginCase("2001:db8::1", host: "2001:db8::1", hostHeader: "[2001:db8::1]"),
        OriginCase("2001:DB8:0:0:0:0:0:1", host: "2001:db8::1", hostHeader: "[2001:db8::1]"),
        OriginCase("https://::1", host: "::1", hostHeader: "[::1]"),
        OriginCase("[::1]:2222", host: "::1", port: 2222, hostHeader: "[::1]:2222"),
        OriginCase("https://[2001:db8::1]:8443/p", host: "2001:db8::1", port: 8443, path: "/p",
                   hostHeader: "[2001:db8::1]:8443", webSocketURL: "wss://[2001:db8::1]:8443/p"),
        OriginCase("[::ffff:192.0.2.1]", host: "::ffff:c000:201", hostHeader: "[::ffff:c000:201]"),
    ]

    @Test("accepted and normalized", arguments: acceptedCases)
    func accepted(_ c: OriginCase) throws {
        let origin = try OriginURL.parse(c.input)
        #expect(origin.host == c.host)
        #expect(origin.port == c.port)
        #expect(origin.path == c.path)
        #expect(origin.hostHeader == c.hostHeader)
        #expect(origin.webSocketURL == c.webSocketURL)
        #expect(origin.httpsURL == "https://" + c.hostHeader + c.path)
        #expect(origin.effectivePort == (c.port ?? 443))
        #expect(origin.isIPv6 == c.host.contains(":"))
    }

    static let refusedCases: [RefusedCase] = [
        RefusedCase("", "the hostname is empty"),
        RefusedCase("   \t ", "the hostname is empty"),
        RefusedCase("http://", "the hostname is empty"),
        RefusedCase("https:///path", "the hostname is empty"),
        RefusedCase(":443", "the hostname is empty"),
        RefusedCase("ftp://ssh.example.com", "scheme \"ftp\", which is not supported"),
        RefusedCase("tcp://ssh.example.com:22", "scheme \"tcp\""),
        RefusedCase("ssh.example.com:0", "out of range"),
        RefusedCase("ssh.example.com:65536", "out of range"),
        RefusedCase("ssh.example.com:99999999999999999999999", "out of range"),
        RefusedCase("ssh.example.com:22a", "not a number"),
        RefusedCase("ssh.example.com:-1", "not a number"),
        RefusedCase("ssh.example.com: 22", "not a number"),
        RefusedCase("ssh.example.com:", "empty port"),
        RefusedCase(":::", "neither a host name nor an IPv6 address"),
        RefusedCase("1::2::3", "neither a host name nor an IPv6 address"),
        RefusedCase("host name", "contains a space"),
        RefusedCase("host\tname.example", "invisible character (U+0009)"),
        RefusedCase("a..b", "empty label"),
        RefusedCase(".example.com", "empty label"),
        RefusedCase(".", "has no host name"),
        RefusedCase("user@host", "user name or password"),
        RefusedCase("https://admin:hunter2@ssh.example.com", "user name or password", mustNotContain: "hunter2"),
        RefusedCase("ssh.example.com?token=abc", "query", mustNotContain: "abc"),
        RefusedCase("ssh.example.com/path#frag", "fragment"),
        RefusedCase(String(repeating: "a", count: 64) + ".example.com", "longer than 63"),
        RefusedCase(Array(repeating: String(repeating: "a", count: 50), count: 6).joined(separator: "."), "too long"),
        RefusedCase("exa$mple.com", "\"$\" is not allowed"),
        RefusedCase("-bad.example.com", "may not start or end with \"-\""),
        RefusedCase("bad-.example.com", "may not start or end with \"-\""),
        RefusedCase("999.1.1.1", "not a valid IPv4 address"),
        RefusedCase("1.2.3", "not a valid IPv4 address"),
        RefusedCase("[::1", "without \"]\""),
        RefusedCase("[zz::1]:22", "invalid IPv6 address"),
        RefusedCase("[::1]x", "text after \"]\""),
        RefusedCase("ssh.example.com/a b", "contains a space"),
        RefusedCase("ssh.example.com/%zz", "two hex digits"),
        RefusedCase("ssh.example.com/ü", "must be percent-encoded"),
        RefusedCase("snow☃.example", "not allowed in an international domain name"),
        RefusedCase("\u{0301}abc.example", "not allowed in an international domain name"),
        RefusedCase("ssh.example.com\r\nX-Injected: 1", "invisible character"),
    ]

    @Test("refused with a clear one-line message", arguments: refusedCases)
    func refused(_ c: RefusedCase) {
        let error = #expect(throws: ConfigurationError.self) { try OriginURL.parse(c.input) }
        guard let error else { return }
        #expect(error.message.contains(c.messageContains), "\(error.message)")
        #expect(error.description == error.message)
        #expect(!error.message.contains("\n") && !error.message.contains("\r"))
        if let secret = c.mustNotContain {
            #expect(!error.message.contains(secret))
        }
    }

    @Test func emptyMessageIsTheDocumentedOne() {
        #expect(throws: ConfigurationError(
            "the hostname is empty: give the Access application's hostname, e.g. ssh.example.com")) {
            try OriginURL.parse("")
        }
    }

    @Test func outputs() throws {
        let plain = try OriginURL.parse("ssh.example.com")
        #expect(plain.httpsURL == "https://ssh.example.com/")
        #expect(plain.webSocketURL == "wss://ssh.example.com/")
        #expect(plain.hostHeader == "ssh.example.com")
        #expect(plain.effectivePort == 443)
        #expect(!plain.isIPv6)
        #expect(plain.description == "https://ssh.example.com/")

        let v6 = try OriginURL.parse("[::1]:8443")
        #expect(v6.isIPv6)
        #expect(v6.hostHeader == "[::1]:8443")
        #expect(v6.httpsURL == "https://[::1]:8443/")
        #expect(v6.webSocketURL == "wss://[::1]:8443/")
        #expect(v6.effectivePort == 8443)
    }

    @Test func schemesAllGiveTheSameOrigin() throws {
        let expected = try OriginURL.parse("ssh.example.com")
        for input in ["http://ssh.example.com", "https://ssh.example.com/", "ws://ssh.example.com", "wss://SSH.example.com."] {
            #expect(try OriginURL.parse(input) == expected, "\(input)")
        }
    }
}
