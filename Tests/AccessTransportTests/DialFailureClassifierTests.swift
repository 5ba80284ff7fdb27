@testable import AccessTransport
import AccessCore
import Testing

/// What libwebsockets reports about a failed dial, turned into a failure (issue 13.5): each rule
/// of `DialFailureClassifier`, in the order it applies.
@Suite("DialFailureClassifier")
struct DialFailureClassifierTests {
    static let host = "ssh.example.com"
    static let address = "127.0.0.1:8443"

    private func classify(status: Int = 0, location: String? = nil, message: String = "", tlsReason: String? = nil,
                          recentLog: [String] = [], proxy: String? = nil,
                          credential: CredentialKind = .serviceToken, notHTTPStart: String? = nil) -> TunnelFailure {
        DialFailureClassifier.classify(host: Self.host, address: Self.address, credential: credential, status: status,
                                       location: location, message: message, tlsReason: tlsReason,
                                       recentLog: recentLog, timeoutSeconds: 15, proxy: proxy, notHTTPStart: notHTTPStart)
    }

    @Test("an answer whose first bytes cannot start HTTP/ is named with them, whatever libwebsockets said")
    func notHTTP() {
        let failure = classify(message: "read failed", notHTTPStart: "SSH-2.0")
        #expect(failure.kind == .protocolViolation)
        #expect(failure.message.contains("answered the WebSocket upgrade with \"SSH-2.0…\", which is not HTTP"), "\(failure.message)")
        // Control characters and spaces are shown as a dot, so the line stays one line.
        #expect(classify(notHTTPStart: "a b\r\n\u{1}").message.contains("\"a·b···…\""))
    }

    @Test("an HTTP answer other than 101 is a refusal: a login redirect names the credential offered")
    func refusals() {
        let login = "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=1"
        #expect(classify(status: 302, location: login).kind == .accessRejected)
        #expect(classify(status: 302, location: login).subject == .serviceToken)
        #expect(classify(status: 302, location: login, credential: .none).kind == .loginRequired)
        #expect(classify(status: 302, location: "https://elsewhere.example/").kind == .unexpectedRedirect)
        #expect(classify(status: 403).kind == .accessDenied)
        #expect(classify(status: 404).kind == .notFound)
        #expect(classify(status: 502).kind == .originUnavailable)
        #expect(classify(status: 200).kind == .unexpectedStatus)
    }

    @Test("through a proxy: its refusal of CONNECT, or of the TCP connection, names the proxy")
    func proxy() {
        let refusedConnect = classify(message: "proxy connection failed", proxy: "proxy.example:3128")
        #expect(refusedConnect.kind == .proxyRefused)
        #expect(refusedConnect.message.contains("proxy.example:3128"))
        #expect(!refusedConnect.isRetryable)
        let refusedTCP = classify(message: "connect failed", proxy: "proxy.example:3128")
        #expect(refusedTCP.kind == .connectionRefused)
        #expect(refusedTCP.message.contains("HTTPS_PROXY"))
        // Without a proxy the same words are the edge's refusal.
        #expect(classify(message: "connect failed").message.contains(Self.address))
    }

    @Test("a stream that ended before a whole answer is a lost connection, pointing at the hostname")
    func readFailed() {
        let failure = classify(message: "read failed")
        #expect(failure.kind == .connectionLost)
        #expect(failure.subject == .hostname)
        #expect(failure.isRetryable)
    }

    @Test("libwebsockets' words for a broken 101 are the edge's protocol violation", arguments: [
        ("hs: accept hash mismatch", "a wrong Sec-WebSocket-Accept"),
        ("problems parsing header", "cannot be parsed"),
        ("hs: missing upgrade", "a broken upgrade answer (missing upgrade)"),
    ])
    func brokenUpgrade(_ message: String, _ expected: String) {
        let failure = classify(message: message)
        #expect(failure.kind == .protocolViolation)
        #expect(failure.message.contains(expected), "\(failure.message)")
        // "not 101" is a status, handled as a refusal, not a broken answer.
        #expect(DialFailureClassifier.brokenUpgradeAnswer("hs: ws upgrade response not 101") == nil)
    }

    @Test("TLS: OpenSSL's verify reason first, else the newest TLS line of the log without its prefix")
    func tls() {
        #expect(classify(message: "tls failed", tlsReason: "certificate has expired").message
            .contains("TLS with \(Self.host) failed: certificate has expired"))
        let logged = classify(message: "ssl handshake failed",
                              recentLog: ["[2026/11/24 10:00:00:0000] N: unrelated",
                                          "[2026/11/24 10:00:00:0001] E: SSL error: certificate verify failed"])
        #expect(logged.kind == .tls)
        #expect(logged.detail == "SSL error: certificate verify failed", "\(logged.detail)")
        let bare = classify(message: "ssl handshake failed")
        #expect(bare.detail == "ssl handshake failed")
    }

    @Test("socket words: timeout, refusal, no route, DNS, and anything else", arguments: [
        ("connect timed out", TunnelFailure.Kind.timedOut),
        ("timeout waiting", TunnelFailure.Kind.timedOut),
        ("connection refused", TunnelFailure.Kind.connectionRefused),
        ("unable to connect", TunnelFailure.Kind.connectionRefused),
        ("network unreachable", TunnelFailure.Kind.networkUnavailable),
        ("no route to host", TunnelFailure.Kind.networkUnavailable),
        ("getaddrinfo failed", TunnelFailure.Kind.dns),
        ("dns lookup failed", TunnelFailure.Kind.dns),
        ("something new", TunnelFailure.Kind.networkUnavailable),
    ])
    func socketWords(_ message: String, _ kind: TunnelFailure.Kind) {
        #expect(classify(message: message).kind == kind, "\(message)")
    }

    @Test("no status and no words at all is our bug, said as such")
    func nothingKnown() {
        let failure = classify()
        #expect(failure.kind == .internal)
        #expect(failure.message.contains("without a reason"))
    }
}
