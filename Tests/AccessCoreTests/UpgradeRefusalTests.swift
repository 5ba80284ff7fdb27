import AccessCore
import Testing

/// A refused upgrade and how it must be classified.
struct RefusalCase: Sendable, CustomTestStringConvertible {
    let status: Int
    let location: String?
    let expected: UpgradeRefusal
    var testDescription: String { "\(status) \(location ?? "(no Location)")" }
}

@Suite("UpgradeRefusal.classify")
struct UpgradeRefusalTests {
    static let loginURL = "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=abc&redirect_url=%2F"

    static let cases: [RefusalCase] = [
        // Access login redirects: 302 and the login path, absolute or relative.
        RefusalCase(status: 302, location: loginURL, expected: .accessLoginRequired(loginURL: loginURL)),
        RefusalCase(status: 302, location: "/cdn-cgi/access/login?x",
                    expected: .accessLoginRequired(loginURL: "/cdn-cgi/access/login?x")),
        RefusalCase(status: 302, location: "/cdn-cgi/access/login/ssh.example.com",
                    expected: .accessLoginRequired(loginURL: "/cdn-cgi/access/login/ssh.example.com")),
        RefusalCase(status: 302, location: "//team.cloudflareaccess.com/cdn-cgi/access/login",
                    expected: .accessLoginRequired(loginURL: "//team.cloudflareaccess.com/cdn-cgi/access/login")),
        RefusalCase(status: 302, location: "HTTPS://ssh.example.com:8443/cdn-cgi/access/login#f",
                    expected: .accessLoginRequired(loginURL: "HTTPS://ssh.example.com:8443/cdn-cgi/access/login#f")),
        // Same path, other 3xx: a plain redirect.
        RefusalCase(status: 301, location: loginURL, expected: .redirect(status: 301, location: loginURL)),
        RefusalCase(status: 303, location: loginURL, expected: .redirect(status: 303, location: loginURL)),
        RefusalCase(status: 307, location: "/cdn-cgi/access/login",
                    expected: .redirect(status: 307, location: "/cdn-cgi/access/login")),
        RefusalCase(status: 308, location: nil, expected: .redirect(status: 308, location: nil)),
        // 302 elsewhere.
        RefusalCase(status: 302, location: "/login", expected: .redirect(status: 302, location: "/login")),
        RefusalCase(status: 302, location: "https://x/cdn-cgi/access/logout",
                    expected: .redirect(status: 302, location: "https://x/cdn-cgi/access/logout")),
        RefusalCase(status: 302, location: "https://x/other?next=/cdn-cgi/access/login",
                    expected: .redirect(status: 302, location: "https://x/other?next=/cdn-cgi/access/login")),
        RefusalCase(status: 302, location: "https://x/#/cdn-cgi/access/login",
                    expected: .redirect(status: 302, location: "https://x/#/cdn-cgi/access/login")),
        RefusalCase(status: 302, location: "https://cdn-cgi/access/login",
                    expected: .redirect(status: 302, location: "https://cdn-cgi/access/login")),
        RefusalCase(status: 302, location: "/prefix/cdn-cgi/access/login",
                    expected: .redirect(status: 302, location: "/prefix/cdn-cgi/access/login")),
        RefusalCase(status: 302, location: nil, expected: .redirect(status: 302, location: nil)),
        RefusalCase(status: 302, location: "", expected: .redirect(status: 302, location: "")),
        // Client and server errors.
        RefusalCase(status: 401, location: nil, expected: .unauthorized),
        RefusalCase(status: 403, location: nil, expected: .forbidden),
        RefusalCase(status: 404, location: nil, expected: .notFound),
        RefusalCase(status: 500, location: nil, expected: .badGateway(status: 500)),
        RefusalCase(status: 502, location: nil, expected: .badGateway(status: 502)),
        RefusalCase(status: 503, location: nil, expected: .badGateway(status: 503)),
        RefusalCase(status: 504, location: nil, expected: .badGateway(status: 504)),
        RefusalCase(status: 530, location: nil, expected: .badGateway(status: 530)),
        RefusalCase(status: 200, location: nil, expected: .unexpectedStatus(200)),
        RefusalCase(status: 400, location: nil, expected: .unexpectedStatus(400)),
        RefusalCase(status: 429, location: nil, expected: .unexpectedStatus(429)),
        RefusalCase(status: 101, location: nil, expected: .unexpectedStatus(101)),
        RefusalCase(status: 403, location: loginURL, expected: .forbidden),
    ]

    @Test("classification", arguments: cases)
    func classify(_ c: RefusalCase) {
        #expect(UpgradeRefusal.classify(status: c.status, location: c.location) == c.expected)
    }
}
