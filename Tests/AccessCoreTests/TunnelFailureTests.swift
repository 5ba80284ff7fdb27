import AccessCore
import Testing

/// A factory call and what its failure must look like.
struct FailureCase: Sendable, CustomTestStringConvertible {
    let name: String
    let failure: TunnelFailure
    let category: TunnelFailure.Category
    let retryable: Bool
    /// Pieces the message must contain: the host, and what to do.
    let contains: [String]
    var testDescription: String { name }
}

/// Secrets planted in inputs; none may come out.
enum Planted {
    static let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJhcHAifQ.c2lnbmF0dXJlLXNlY3JldA"
    static let secret = "f00dfacecafebabe0123456789abcdeff00dfacecafebabe0123456789abcdef"
    static let word = "hunter2"
    static let all = [jwt, secret, word, "kid=", "redirect_url", "token=x"]
}

@Suite("TunnelFailure")
struct TunnelFailureTests {
    static let host = "ssh.example.com"
    static let loginURL = "https://user:\(Planted.word)@team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com"
        + "?kid=abc&redirect_url=%2F&token=\(Planted.jwt)#\(Planted.secret)"

    static let cases: [FailureCase] = [
        FailureCase(name: "accessRejected service token",
                    failure: .accessRejected(host: host, credential: .serviceToken, loginURL: loginURL),
                    category: .authentication, retryable: false,
                    contains: [host, "check the service token's client ID and secret"]),
        FailureCase(name: "accessRejected access token",
                    failure: .accessRejected(host: host, credential: .accessToken, loginURL: loginURL),
                    category: .authentication, retryable: false,
                    contains: [host, "`cf-access-tcp login ssh.example.com`"]),
        FailureCase(name: "accessRejected no credential",
                    failure: .accessRejected(host: host, credential: .none, loginURL: nil),
                    category: .authentication, retryable: false,
                    contains: [host, "`cf-access-tcp login ssh.example.com`", "or use a service token"]),
        FailureCase(name: "refused login", failure: .refused(host: host, refusal: .accessLoginRequired(loginURL: loginURL)),
                    category: .authentication, retryable: false, contains: [host, "cf-access-tcp login"]),
        FailureCase(name: "refused redirect",
                    failure: .refused(host: host, refusal: .redirect(status: 301, location: loginURL)),
                    category: .configuration, retryable: false, contains: [host, "HTTP 301", "check that the hostname"]),
        FailureCase(name: "refused redirect without Location",
                    failure: .refused(host: host, refusal: .redirect(status: 307, location: nil)),
                    category: .configuration, retryable: false, contains: [host, "HTTP 307", "the hostname"]),
        FailureCase(name: "refused 401", failure: .refused(host: host, refusal: .unauthorized),
                    category: .authentication, retryable: false, contains: [host, "HTTP 401", "log in again"]),
        FailureCase(name: "refused 403", failure: .refused(host: host, refusal: .forbidden),
                    category: .authentication, retryable: false, contains: [host, "HTTP 403", "policy"]),
        FailureCase(name: "refused 404", failure: .refused(host: host, refusal: .notFound),
                    category: .configuration, retryable: false, contains: [host, "HTTP 404", "check the hostname"]),
        FailureCase(name: "refused 502", failure: .refused(host: host, refusal: .badGateway(status: 502)),
                    category: .transport, retryable: true, contains: [host, "HTTP 502", "try again later"]),
        FailureCase(name: "refused 530", failure: .refused(host: host, refusal: .badGateway(status: 530)),
                    category: .transport, retryable: true, contains: [host, "HTTP 530", "try again later"]),
        FailureCase(name: "refused 429", failure: .refused(host: host, refusal: .unexpectedStatus(429)),
                    category: .transport, retryable: true, contains: [host, "HTTP 429", "try again"]),
        FailureCase(name: "refused 200", failure: .refused(host: host, refusal: .unexpectedStatus(200)),
                    category: .protocolViolation, retryable: false,
                    contains: [host, "HTTP 200 OK", "101 Switching Protocols", "the hostname"]),
        FailureCase(name: "tls",
                    failure: .tls(host: host, reason: "certificate verify failed\nCf-Access-Client-Secret: \(Planted.secret) token=\(Planted.jwt)"),
                    category: .transport, retryable: false,
                    contains: [host, "certificate verify failed", "Check the system clock and the CA certificates"]),
        FailureCase(name: "dns", failure: .dns(host: host), category: .transport, retryable: true,
                    contains: [host, "check the hostname and your network (DNS)"]),
        FailureCase(name: "connectionRefused", failure: .connectionRefused(address: "198.51.100.7:443"),
                    category: .transport, retryable: true, contains: ["198.51.100.7:443", "is the edge address right?"]),
        FailureCase(name: "networkUnavailable",
                    failure: .networkUnavailable(detail: "ENETUNREACH via https://proxy/?token=\(Planted.word)"),
                    category: .transport, retryable: true, contains: ["Network unavailable:", "check your network"]),
        FailureCase(name: "timedOut", failure: .timedOut(host: host, seconds: 15), category: .transport, retryable: true,
                    contains: [host, "within 15 s", "check your network"]),
        FailureCase(name: "protocolViolation", failure: .protocolViolation("text frame received"),
                    category: .protocolViolation, retryable: false, contains: ["text frame received", "the hostname"]),
        FailureCase(name: "configuration", failure: .configuration(ConfigurationError("the listen address is empty: give one")),
                    category: .configuration, retryable: false, contains: ["the listen address is empty: give one"]),
        FailureCase(name: "internalError", failure: .internalError("state \(Planted.jwt)"),
                    category: .internal, retryable: false, contains: ["Internal error: state", "please report it"]),
        FailureCase(name: "invalidState", failure: .invalidState("write after close"),
                    category: .invalidState, retryable: false, contains: ["write after close"]),
    ]

    @Test("factories", arguments: cases)
    func factory(_ c: FailureCase) {
        let failure = c.failure
        #expect(failure.category == c.category)
        #expect(failure.isRetryable == c.retryable)
        #expect(failure.description == failure.message)
        for piece in c.contains {
            #expect(failure.message.contains(piece), "\(failure.message) lacks \(piece)")
        }
        for text in [failure.message, failure.detail, failure.debugDescription] {
            #expect(!text.contains("\n") && !text.contains("\r"), "not one line: \(text)")
            for secret in Planted.all {
                #expect(!text.contains(secret), "\(text) holds \(secret)")
            }
        }
    }

    @Test func accessRejectedMessages() {
        let url = Self.loginURL
        #expect(TunnelFailure.accessRejected(host: Self.host, credential: .serviceToken, loginURL: url).message
            == "Cloudflare Access rejected the service token for ssh.example.com (redirected to login): check the service token's client ID and secret")
        #expect(TunnelFailure.accessRejected(host: Self.host, credential: .accessToken, loginURL: url).message
            == "Cloudflare Access rejected the access token for ssh.example.com (redirected to login): log in again with `cf-access-tcp login ssh.example.com`")
        #expect(TunnelFailure.accessRejected(host: Self.host, credential: .none, loginURL: url).message
            == "ssh.example.com needs a Cloudflare Access login: run `cf-access-tcp login ssh.example.com`, or use a service token")
    }

    @Test func loginURLDetailKeepsHostAndPathOnly() {
        let failure = TunnelFailure.accessRejected(host: Self.host, credential: .serviceToken, loginURL: Self.loginURL)
        #expect(failure.detail == "Access login redirect to https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com")
        #expect(TunnelFailure.accessRejected(host: Self.host, credential: .none, loginURL: nil).detail == "")
    }

    @Test func refusedLoginDelegatesToAccessRejected() {
        #expect(TunnelFailure.refused(host: Self.host, refusal: .accessLoginRequired(loginURL: Self.loginURL))
            == TunnelFailure.accessRejected(host: Self.host, credential: .none, loginURL: Self.loginURL))
    }

    @Test func documentedMessages() {
        #expect(TunnelFailure.refused(host: Self.host, refusal: .forbidden).message
            == "Cloudflare Access denied ssh.example.com (HTTP 403 Forbidden): your identity or service token is not allowed by the application's policy")
        #expect(TunnelFailure.refused(host: Self.host, refusal: .badGateway(status: 502)).message
            == "The Cloudflare edge for ssh.example.com answered HTTP 502: the origin or its tunnel is down; try again later")
        #expect(TunnelFailure.dns(host: Self.host).message
            == "Cannot resolve ssh.example.com: check the hostname and your network (DNS)")
        #expect(TunnelFailure.connectionRefused(address: "192.0.2.1:443").message
            == "Connection refused by 192.0.2.1:443: is the edge address right?")
        #expect(TunnelFailure.tls(host: Self.host, reason: "unable to get local issuer certificate.").message
            == "TLS with ssh.example.com failed: unable to get local issuer certificate. Check the system clock and the CA certificates")
        let timeout = TunnelFailure.timedOut(host: Self.host, seconds: 15)
        #expect(timeout.message.hasPrefix("Connection timed out. No answer from ssh.example.com within 15 s"))
        #expect(TunnelFailure.networkUnavailable(detail: "ENETUNREACH").message.hasPrefix("Network unavailable: "))
        #expect(TunnelFailure.networkUnavailable(detail: "ENETUNREACH").detail == "ENETUNREACH")
        #expect(TunnelFailure.dns(host: Self.host).detail.contains("network unavailable"))
    }

    @Test func redirectDetailShowsLocationWithoutQuery() {
        let failure = TunnelFailure.refused(host: Self.host, refusal: .redirect(status: 301, location: Self.loginURL))
        #expect(failure.detail == "Location: https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com")
    }

    @Test func publicInitializerScrubs() {
        let failure = TunnelFailure(category: .transport, isRetryable: true,
                                    message: "edge said\nAuthorization: Bearer \(Planted.jwt)",
                                    detail: "cookie CF_Authorization=\(Planted.word)")
        #expect(failure.message == "edge said Authorization: [redacted]")
        #expect(failure.detail == "cookie CF_Authorization=[redacted]")
    }

    @Test func hostIsKeptOnOneLine() {
        let failure = TunnelFailure.dns(host: "evil.example\r\nInjected: yes")
        #expect(!failure.message.contains("\n"))
        #expect(!failure.message.contains("\r"))
    }
}

@Suite("Redaction")
struct RedactionTests {
    @Test("url keeps scheme, host and path", arguments: [
        ("https://user:pw@team.cloudflareaccess.com/cdn-cgi/access/login/app?kid=1&token=x#frag",
         "https://team.cloudflareaccess.com/cdn-cgi/access/login/app"),
        ("/cdn-cgi/access/login?redirect_url=%2F", "/cdn-cgi/access/login"),
        ("https://host", "https://host"),
        ("  https://host/p \n", "https://host/p"),
    ])
    func url(_ raw: String, _ expected: String) {
        #expect(Redaction.url(raw) == expected)
    }

    @Test("scrub", arguments: [
        ("plain message about ssh.example.com", "plain message about ssh.example.com"),
        ("line1\nline2\r\n\tline3", "line1 line2 line3"),
        ("GET https://h/p?token=abc failed", "GET https://h/p?[redacted] failed"),
        ("proxy https://me:pw@proxy:3128/ down", "proxy https://[redacted]@proxy:3128/ down"),
        ("Authorization: Bearer abc.def User-Agent: x", "Authorization: [redacted] User-Agent: x"),
        ("Cf-Access-Client-Secret: one two", "Cf-Access-Client-Secret: [redacted]"),
        ("bearer abc next", "bearer [redacted] next"),
        ("jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln here", "jwt [redacted] here"),
        ("secret=abc123&id=5", "secret=[redacted]&id=5"),
        ("cookie CF_Authorization=abc; path=/", "cookie CF_Authorization=[redacted]; path=/"),
        ("key 0123456789abcdef0123456789abcdef01 end", "key [redacted] end"),
        ("name very-long-but-plain-label-without-any-digits-at-all.example ok",
         "name very-long-but-plain-label-without-any-digits-at-all.example ok"),
    ])
    func scrub(_ raw: String, _ expected: String) {
        #expect(Redaction.scrub(raw) == expected)
    }
}

/// Issue 11.14: no flags in the library's messages.
@Suite("TunnelFailure subjects")
struct TunnelFailureSubjectTests {
    static let host = "ssh.example.com"

    @Test("library messages name settings in words, never a command-line flag; the subject says which setting (11.14)")
    func noFlagsInLibraryMessages() {
        let failures: [(TunnelFailure, FailureSubject?)] = [
            (.accessRejected(host: Self.host, credential: .serviceToken, loginURL: nil), .serviceToken),
            (.accessRejected(host: Self.host, credential: .none, loginURL: nil), .serviceToken),
            (.accessRejected(host: Self.host, credential: .accessToken, loginURL: nil), nil),
            (.refused(host: Self.host, refusal: .redirect(status: 301, location: nil)), .hostname),
            (.refused(host: Self.host, refusal: .unauthorized), .serviceToken),
            (.refused(host: Self.host, refusal: .notFound), .hostname),
            (.refused(host: Self.host, refusal: .unexpectedStatus(200)), .hostname),
            (.tls(host: Self.host, reason: "x"), .caFile),
            (.protocolViolation("x"), .hostname),
            (.metadataUnverified(host: Self.host, reason: "x"), .addressOverrides),
            (.tokenCache(path: "/p", reason: "x"), .tokenDirectory),
            (.configuration(ConfigurationError("x"), subject: .listenAddress), .listenAddress),
        ]
        for (failure, subject) in failures {
            #expect(!failure.message.contains("--"), "\(failure.message)")
            #expect(failure.subject == subject, "\(failure.message)")
        }
    }
}
