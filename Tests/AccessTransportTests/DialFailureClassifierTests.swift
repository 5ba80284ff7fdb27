@testable import AccessTransport
import AccessCore
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// How a failed dial is told (issues 12.6, 13.5, 19.2): each stage's problem turned into a failure.
@Suite("DialFailureClassifier")
struct DialFailureClassifierTests {
    static let host = "ssh.example.com"
    static let address = "127.0.0.1:8443"

    private func classify(_ problem: DialProblem, proxy: String? = nil,
                          credential: CredentialKind = .serviceToken) -> TunnelFailure {
        DialFailureClassifier.classify(problem, .init(host: Self.host, address: Self.address, credential: credential,
                                                       proxy: proxy, timeoutSeconds: 15))
    }

    @Test("an answer whose first bytes cannot start HTTP/ is named with them")
    func notHTTP() {
        let failure = classify(.notHTTP(first: Array("SSH-2.0".utf8)))
        #expect(failure.kind == .protocolViolation)
        #expect(failure.message.contains("answered the WebSocket upgrade with \"SSH-2.0…\", which is not HTTP"), "\(failure.message)")
        // Control characters and spaces are shown as a dot, so the line stays one line.
        #expect(classify(.notHTTP(first: Array("a b\r\n\u{1}".utf8))).message.contains("\"a·b···…\""))
    }

    @Test("an HTTP answer other than 101 is a refusal: a login redirect names the credential offered")
    func refusals() {
        let login = "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=1"
        #expect(classify(.refused(status: 302, location: login)).kind == .accessRejected)
        #expect(classify(.refused(status: 302, location: login)).subject == .serviceToken)
        #expect(classify(.refused(status: 302, location: login), credential: .none).kind == .loginRequired)
        #expect(classify(.refused(status: 302, location: "https://elsewhere.example/")).kind == .unexpectedRedirect)
        #expect(classify(.refused(status: 403, location: nil)).kind == .accessDenied)
        #expect(classify(.refused(status: 404, location: nil)).kind == .notFound)
        #expect(classify(.refused(status: 502, location: nil)).kind == .originUnavailable)
        #expect(classify(.refused(status: 200, location: nil)).kind == .unexpectedStatus)
    }

    @Test("through a proxy: its refusal of CONNECT, a broken answer, or its refusal of the TCP connection, names the proxy")
    func proxy() {
        let refusedConnect = classify(.proxyRefused(status: 403, reason: "Access violation"), proxy: "proxy.example:3128")
        #expect(refusedConnect.kind == .proxyRefused)
        #expect(refusedConnect.message.contains("The proxy proxy.example:3128 refused to connect to \(Self.address)"))
        #expect(refusedConnect.detail == "proxy.example:3128: HTTP 403 Access violation")
        #expect(!refusedConnect.isRetryable)
        #expect(classify(.proxyBroken("it closed the connection"), proxy: "p:1").detail == "p:1: it closed the connection")
        let refusedTCP = classify(.tcpConnect(SystemError(ECONNREFUSED)), proxy: "proxy.example:3128")
        #expect(refusedTCP.kind == .connectionRefused)
        #expect(refusedTCP.message.contains("HTTPS_PROXY"))
        let unreachable = classify(.tcpConnect(SystemError(EHOSTUNREACH)), proxy: "proxy.example:3128")
        #expect(unreachable.kind == .networkUnavailable)
        #expect(unreachable.message.contains("Cannot reach the proxy proxy.example:3128 (No route to host)"))
        // Without a proxy a refusal is the edge's.
        #expect(classify(.tcpConnect(SystemError(ECONNREFUSED))).message.contains(Self.address))
    }

    @Test("a failed TCP connect is told by its errno: refused, no route, timed out, out of descriptors")
    func tcpConnect() {
        #expect(classify(.tcpConnect(SystemError(ECONNREFUSED))).kind == .connectionRefused)
        let noRoute = classify(.tcpConnect(SystemError(ENETUNREACH)))
        #expect(noRoute.kind == .networkUnavailable)
        #expect(noRoute.detail == "\(Self.address): Network is unreachable")
        #expect(classify(.tcpConnect(SystemError(ETIMEDOUT))).kind == .timedOut)
        #expect(classify(.tcpConnect(SystemError(EMFILE, operation: "socket()"))).kind == .outOfFileDescriptors)
    }

    @Test("a stream that ended before a whole answer, or during TLS, is a lost connection, pointing at the hostname")
    func closed() {
        for problem in [DialProblem.closedBeforeAnswer("TLS closed"), .closedDuringTLS("Connection reset by peer")] {
            let failure = classify(problem)
            #expect(failure.kind == .connectionLost)
            #expect(failure.subject == .hostname)
            #expect(failure.isRetryable)
        }
        #expect(classify(.closedDuringTLS("closed by the peer")).message.contains("during the TLS handshake"))
    }

    @Test("a broken 101 or an unreadable head is the edge's protocol violation")
    func brokenUpgrade() {
        let accept = classify(.brokenAnswer("a wrong Sec-WebSocket-Accept in the 101 answer"))
        #expect(accept.kind == .protocolViolation)
        #expect(accept.message.contains("with a wrong Sec-WebSocket-Accept"))
        let endless = classify(.unreadableAnswer("larger than 64 KiB"))
        #expect(endless.kind == .protocolViolation)
        #expect(endless.message.contains("a response head that cannot be parsed (larger than 64 KiB)"), "\(endless.message)")
    }

    @Test("TLS: OpenSSL's reason; a timeout names the seconds")
    func tlsAndTimeout() {
        #expect(classify(.tls("certificate has expired")).message.contains("TLS with \(Self.host) failed: certificate has expired"))
        #expect(classify(.tls("certificate has expired")).kind == .tls)
        let timeout = classify(.timedOut)
        #expect(timeout.kind == .timedOut)
        #expect(timeout.message.contains("within 15 s"))
    }

    @Test("the accept value of RFC 6455's example key (§1.3)")
    func acceptValue() {
        #expect(Digest.webSocketAccept(key: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }
}
