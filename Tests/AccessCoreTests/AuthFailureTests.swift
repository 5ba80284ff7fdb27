import AccessCore
import Testing

/// The login and app-discovery failures (PROTOCOL.md §2–§3): category, retry, one plain line
/// that says what to do, and no secret even when one is planted in the input.
@Suite("TunnelFailure (auth)")
struct AuthFailureTests {
    static let host = "ssh.example.com"
    static let metadataURL = "https://ssh.example.com/cdn-cgi/access/app?token=\(Planted.jwt)#\(Planted.secret)"

    static let cases: [FailureCase] = [
        FailureCase(name: "noAccessApplication", failure: .noAccessApplication(url: metadataURL),
                    category: .configuration, retryable: false,
                    contains: ["No Access application at https://ssh.example.com/cdn-cgi/access/app", "check the hostname"]),
        FailureCase(name: "metadataRejected", failure: .metadataRejected(host: host, problem: .audienceEmpty),
                    category: .authentication, retryable: false,
                    contains: [host, "it names no application audience (aud)", "check the hostname and the system clock"]),
        FailureCase(name: "metadataUnverified",
                    failure: .metadataUnverified(host: host, reason: "bad signature on \(Planted.jwt)"),
                    category: .authentication, retryable: false,
                    contains: [host, "could not be verified: bad signature", "did not come from Cloudflare Access"]),
        FailureCase(name: "keySetUnavailable",
                    failure: .keySetUnavailable(authDomain: "team.cloudflareaccess.com", reason: "HTTP 503"),
                    category: .transport, retryable: true,
                    contains: ["team.cloudflareaccess.com", "HTTP 503", "check the network and try again"]),
        FailureCase(name: "loginRequired", failure: .loginRequired(host: host),
                    category: .authentication, retryable: false,
                    contains: ["needs a Cloudflare Access login", "`cf-access-tcp login ssh.example.com`"]),
        FailureCase(name: "loginFailed", failure: .loginFailed(host: host, reason: "secret=\(Planted.word) lost"),
                    category: .authentication, retryable: false,
                    contains: ["Login to ssh.example.com failed", "try `cf-access-tcp login ssh.example.com` again"]),
        FailureCase(name: "loginTimedOut minutes", failure: .loginTimedOut(host: host, after: .seconds(300)),
                    category: .authentication, retryable: true,
                    contains: [host, "within 5 min", "finish the login"]),
        FailureCase(name: "loginTimedOut seconds", failure: .loginTimedOut(host: host, after: .seconds(45)),
                    category: .authentication, retryable: true, contains: [host, "within 45 s"]),
        FailureCase(name: "transferServiceFailed with detail",
                    failure: .transferServiceFailed(status: 502, detail: "upstream down"),
                    category: .transport, retryable: true,
                    contains: ["login service failed (HTTP 502): upstream down; try again later"]),
        FailureCase(name: "transferServiceFailed without detail",
                    failure: .transferServiceFailed(status: 500, detail: ""),
                    category: .transport, retryable: true, contains: ["login service failed (HTTP 500); try again later"]),
        FailureCase(name: "loginLockTimedOut",
                    failure: .loginLockTimedOut(path: "/root/.cloudflared/a-token.lock"),
                    category: .authentication, retryable: true,
                    contains: ["/root/.cloudflared/a-token.lock", "10 minutes", "finish or stop that login"]),
        FailureCase(name: "tokenCache",
                    failure: .tokenCache(path: "/root/.cloudflared", reason: "Permission denied"),
                    category: .configuration, retryable: false,
                    contains: ["/root/.cloudflared", "Permission denied", "another token directory"]),
        FailureCase(name: "loginCancelled", failure: .loginCancelled(host: host),
                    category: .authentication, retryable: false, contains: ["Login to ssh.example.com was cancelled"]),
    ]

    @Test("factories", arguments: cases)
    func factory(_ c: FailureCase) {
        TunnelFailureTests().factory(c)
    }

    @Test func detailsKeepTheTechnicalPart() {
        #expect(TunnelFailure.noAccessApplication(url: Self.metadataURL).detail == "no cf-access-metadata header in the answer")
        #expect(TunnelFailure.metadataRejected(host: Self.host, problem: .issuedAtMissing).detail
            == "it has no issue time (iat)")
        #expect(TunnelFailure.transferServiceFailed(status: 503, detail: "busy").detail == "HTTP 503")
        #expect(TunnelFailure.keySetUnavailable(authDomain: "t.cloudflareaccess.com", reason: "DNS").detail == "DNS")
        #expect(TunnelFailure.loginRequired(host: Self.host).detail == "")
    }

    @Test func exactMessages() {
        #expect(TunnelFailure.loginTimedOut(host: Self.host, after: .seconds(600)).message
            == "Login to ssh.example.com was not completed within 10 min: open the login URL and finish the login, then try again")
        #expect(TunnelFailure.metadataRejected(host: Self.host, problem: .wrongType("nomatch")).message
            == "The Access application metadata of ssh.example.com was refused: its type is \"nomatch\" instead of \"match\"; "
            + "check the hostname and the system clock")
    }
}
