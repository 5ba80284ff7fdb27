import AccessCore
import Testing

/// Issue 13.6: every failure carries a stable kind that callers switch on instead of matching
/// message text, and equality ignores the wording.
@Suite("TunnelFailure.Kind")
struct TunnelFailureKindTests {
    static let host = "ssh.example.com"

    static let cases: [(TunnelFailure, TunnelFailure.Kind)] = [
        (.accessRejected(host: host, credential: .serviceToken, loginURL: nil), .accessRejected),
        (.accessRejected(host: host, credential: .accessToken, loginURL: "https://t.cloudflareaccess.com/x"), .accessRejected),
        (.accessRejected(host: host, credential: .none, loginURL: nil), .loginRequired),
        (.refused(host: host, refusal: .accessLoginRequired(loginURL: "https://t.cloudflareaccess.com/cdn-cgi/access/login/x")), .loginRequired),
        (.refused(host: host, refusal: .redirect(status: 302, location: "https://elsewhere.example/")), .unexpectedRedirect),
        (.refused(host: host, refusal: .unauthorized), .accessRejected),
        (.refused(host: host, refusal: .forbidden), .accessDenied),
        (.refused(host: host, refusal: .notFound), .notFound),
        (.refused(host: host, refusal: .badGateway(status: 502)), .originUnavailable),
        (.refused(host: host, refusal: .unexpectedStatus(429)), .rateLimited),
        (.refused(host: host, refusal: .unexpectedStatus(418)), .unexpectedStatus),
        (.tls(host: host, reason: "certificate verify failed"), .tls),
        (.dns(host: host), .dns),
        (.connectionRefused(address: "127.0.0.1:1"), .connectionRefused),
        (.networkUnavailable(detail: "no route"), .networkUnavailable),
        (.timedOut(host: host, seconds: 15), .timedOut),
        (.protocolViolation("a text frame"), .protocolViolation),
        (.configuration(ConfigurationError("bad flag")), .configuration),
        (.outOfFileDescriptors(limit: 1024, what: "accept"), .outOfFileDescriptors),
        (.internalError("oops"), .internal),
        (.invalidState("closed"), .invalidState),
        (.noAccessApplication(url: "https://\(host)"), .noAccessApplication),
        (.metadataRejected(host: host, problem: .audienceEmpty), .metadataInvalid),
        (.metadataUnverified(host: host, reason: "bad signature"), .metadataInvalid),
        (.keySetUnavailable(authDomain: "t.cloudflareaccess.com", reason: "HTTP 500"), .keySetUnavailable),
        (.loginRequired(host: host), .loginRequired),
        (.loginFailed(host: host, reason: "no token"), .loginFailed),
        (.loginTimedOut(host: host, after: .seconds(300)), .loginTimedOut),
        (.transferServiceFailed(status: 503, detail: ""), .transferServiceFailed),
        (.loginLockTimedOut(path: "/tmp/lock"), .loginLockTimedOut),
        (.tokenCache(path: "/tmp/tokens", reason: "Permission denied"), .tokenCache),
        (.loginCancelled(host: host), .loginCancelled),
        (TunnelEnd.reset(detail: "ECONNRESET").failure(host: host)!, .connectionLost),
        (TunnelEnd.keepaliveTimeout(after: .seconds(30)).failure(host: host)!, .connectionLost),
        (TunnelEnd.writeFailed(detail: "EPIPE").failure(host: host)!, .connectionLost),
        (TunnelEnd.protocolViolation(detail: "reserved bits").failure(host: host)!, .protocolViolation),
        (TunnelEnd.localIOFailed(detail: "stdout closed").failure(host: host)!, .localIO),
        (TunnelFailure(category: .transport, isRetryable: true, message: "made by a caller"), .unspecified),
    ]

    @Test("each factory gives its kind, and the kind's category is the failure's")
    func factoryKinds() {
        for (failure, kind) in Self.cases {
            #expect(failure.kind == kind, "\(failure.debugDescription)")
            #expect(failure.debugDescription.contains(kind.name))
        }
    }

    @Test("a kind belongs to one category wherever it is made")
    func kindHasOneCategory() {
        var seen: [TunnelFailure.Kind: TunnelFailure.Category] = [:]
        for (failure, kind) in Self.cases where kind != .unspecified {
            if let category = seen[kind] { #expect(category == failure.category, "\(kind)") }
            seen[kind] = failure.category
        }
    }

    @Test("kind names are unique, stable and printable")
    func names() {
        let names = TunnelFailure.Kind.all.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(TunnelFailure.Kind.dns.name == "dns")
        #expect(TunnelFailure.Kind.accessRejected.description == "access-rejected")
        #expect(TunnelFailure.Kind.connectionLost.name == "connection-lost")
        // Lower-case words joined by hyphens: fit for logs and metrics labels.
        for name in names {
            #expect(!name.isEmpty && name.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || $0 == "-" }, "\(name)")
        }
        // Every kind a factory makes is listed.
        for (_, kind) in Self.cases { #expect(TunnelFailure.Kind.all.contains(kind)) }
    }

    @Test("equality is by kind and detail, not by the wording of the message")
    func equality() {
        let a = TunnelFailure(category: .transport, isRetryable: true, message: "one wording", detail: "d", kind: .dns)
        let b = TunnelFailure(category: .transport, isRetryable: true, message: "another wording", detail: "d", kind: .dns)
        let c = TunnelFailure(category: .transport, isRetryable: true, message: "one wording", detail: "other", kind: .dns)
        let d = TunnelFailure(category: .transport, isRetryable: true, message: "one wording", detail: "d", kind: .tls)
        #expect(a == b)
        #expect(a != c)
        #expect(a != d)
        // Hosts are in the detail: the same kind for two hosts is two failures.
        #expect(TunnelFailure.dns(host: "a.example") != TunnelFailure.dns(host: "b.example"))
        #expect(TunnelFailure.loginFailed(host: "a.example", reason: "x") != TunnelFailure.loginFailed(host: "b.example", reason: "x"))
        #expect(TunnelFailure.refused(host: "a.example", refusal: .forbidden)
            != TunnelFailure.refused(host: "b.example", refusal: .forbidden))
        // Without a kind, the message is all that tells two failures apart.
        let e = TunnelFailure(category: .authentication, isRetryable: false, message: "login cancelled")
        let f = TunnelFailure(category: .authentication, isRetryable: false, message: "login refused")
        #expect(e != f)
        #expect(e == TunnelFailure(category: .authentication, isRetryable: false, message: "login cancelled"))
    }

    @Test("a caller switches on the kind")
    func switchable() {
        func advice(_ failure: TunnelFailure) -> String {
            switch failure.kind {
            case .accessRejected, .loginRequired: return "log in"
            case .dns, .connectionRefused, .networkUnavailable, .timedOut: return "check the network"
            default: return "other"
            }
        }
        #expect(advice(.loginRequired(host: Self.host)) == "log in")
        #expect(advice(.dns(host: Self.host)) == "check the network")
        #expect(advice(.internalError("x")) == "other")
    }
}
