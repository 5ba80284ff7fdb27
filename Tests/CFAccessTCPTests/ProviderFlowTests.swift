@testable import AccessTransport
import AccessTestSupport
import AccessCore
import CFAccessTCP
import Foundation
import Logging
import Testing

/// `AccessTokenProvider` end to end over a scripted edge: real RS256 (OpenSSL), real box
/// (libsodium, the vectors' key), real files and lock; only HTTP and time are fakes.
@Suite("Access token provider", .serialized)
struct ProviderFlowTests {
    static let origin = try! OriginURL.parse("ssh.example.com")
    static let now = Date(timeIntervalSince1970: AuthVectors.iat + 60)
    static let appFile = "-.example.com-ssh-\(AuthVectors.aud)-token"
    static let orgFile = "team.cloudflareaccess.com-org-token"

    struct Edge {
        var metadata: String? = AuthVectors.metadata
        var jwks = AuthVectors.jwks
        var transfer: @Sendable (Int) -> Result<HTTPResponse, TunnelFailure> = { _ in
            response(200, [("service-public-key", AuthVectors.servicePublicKeyURLUnpadded)], body: AuthVectors.sealedStandardBase64)
        }
    }

    static func scripted(_ edge: Edge) -> ScriptedHTTP {
        let polls = LockedBox(0)
        return ScriptedHTTP { request in
            if request.method == "HEAD" && request.url == "https://ssh.example.com/" {
                #expect(request.headers.contains { $0.name == "cf-access-metadata-request" && $0.value == "true" })
                return response(302, edge.metadata.map { [("cf-access-metadata", $0)] } ?? [])
            }
            if request.url == "https://team.cloudflareaccess.com/cdn-cgi/access/certs" {
                return response(200, body: edge.jwks)
            }
            if request.url.hasPrefix("https://login.cloudflareaccess.org/transfer/") {
                let n = polls.withLock { value -> Int in
                    value += 1
                    return value
                }
                return edge.transfer(n)
            }
            return response(404)
        }
    }

    struct Setup {
        let temp = TemporaryDirectory()
        let log = MemoryLog()
        let clock: FakeClock
        let presenter = RecordingPresenter()
        let http: ScriptedHTTP
        let provider: AccessTokenProvider
        var store: FileTokenStore { FileTokenStore(directory: temp.path) }

        init(_ edge: Edge = Edge(), polls: Int = 10, now: Date = ProviderFlowTests.now) {
            clock = FakeClock(now)
            http = ProviderFlowTests.scripted(edge)
            let configuration = AccessLoginConfiguration(tokenDirectory: temp.path, maximumPolls: polls)
            provider = AccessTokenProvider(configuration: configuration, logger: log.logger, http: http,
                                           box: VectorKeyBox(), browser: NoBrowser(), clock: clock, presenter: presenter)
        }

        /// No log line holds a token.
        func expectNoSecretsLogged() {
            for line in log.lines {
                #expect(!line.contains("eyJ"), "a log line holds a JWT: \(line)")
            }
        }
    }

    @Test func transferFlowSavesBothTokensThenUsesTheCache() async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        let token = try await setup.provider.appToken(for: Self.origin, interactive: true)
        #expect(token == AuthVectors.appToken)
        #expect(setup.temp.mode(of: Self.appFile) == 0o600)
        #expect(setup.temp.mode(of: Self.orgFile) == 0o600)
        #expect(setup.temp.mode(of: "team.cloudflareaccess.com-jwks") == 0o600)
        #expect(try String(contentsOfFile: setup.temp.path + "/" + Self.appFile, encoding: .utf8) == AuthVectors.appToken)
        // No lock or URL file is left behind.
        #expect(!setup.store.fileNames().contains { $0.hasSuffix(".lock") || $0.hasSuffix(".url") })
        // The login URL shown is §3's, with the ephemeral key as token.
        let shown = try #require(setup.presenter.shown.first)
        let key = LoginURL.queryEscape(AuthVectors.clientPublicKey)
        #expect(shown == LoginURL.build(app: Self.origin, publicKey: AuthVectors.clientPublicKey, appAUD: AuthVectors.aud))
        #expect(setup.http.requests.contains { $0.url == "https://login.cloudflareaccess.org/transfer/" + key })

        let before = setup.http.requests.count
        let again = try await setup.provider.appToken(for: Self.origin, interactive: true)
        #expect(again == AuthVectors.appToken)
        #expect(setup.http.requests.count == before, "the cached token and AppInfo need no request")
        setup.expectNoSecretsLogged()
    }

    @Test func concurrentCallersShareOneLogin() async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        let provider = setup.provider
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<5 {
                group.addTask { try await provider.appToken(for: Self.origin, interactive: true) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(tokens.count == 5 && Set(tokens) == [AuthVectors.appToken])
        #expect(setup.presenter.shown.count == 1, "one login for five callers")
    }

    @Test func tokenWrittenByCloudflaredNamingIsUsed() async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        // cloudflared's rule: <AppHostname>-<AppAUD>-token with / and * replaced by -.
        let name = "*.example.com/ssh-\(AuthVectors.aud)-token".replacingOccurrences(of: "*", with: "-")
            .replacingOccurrences(of: "/", with: "-")
        try setup.store.write(name, text: AuthVectors.appTokenArrayAud)
        let token = try await setup.provider.appToken(for: Self.origin, interactive: false)
        #expect(token == AuthVectors.appTokenArrayAud)
        #expect(!setup.http.requests.contains { $0.url.contains("/transfer/") })
    }

    @Test(arguments: [
        ("garbage", "not a valid token"),
        (AuthVectors.metadata, "no expiry"),
        (AuthVectors.orgToken, "another application"),
    ])
    func badCacheFilesAreDeletedWithAnInfoLine(content: String, reason: String) async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        try setup.store.write(Self.appFile, text: content)
        await #expect(throws: TunnelFailure.self) { try await setup.provider.appToken(for: Self.origin, interactive: false) }
        #expect(setup.store.read(Self.appFile) == .missing)
        #expect(setup.log.lines.contains { $0.hasPrefix("info deleting the cached token file") && $0.contains(reason) })
        setup.expectNoSecretsLogged()
    }

    @Test func expiredCacheFileIsDeletedAndAnExpiredAnswerRefused() async throws {
        // At exp of the vectors' app token (the metadata is still within its 24 h).
        let setup = Setup(now: Date(timeIntervalSince1970: AuthVectors.iat + 3600))
        defer { setup.temp.remove() }
        try setup.store.write(Self.appFile, text: AuthVectors.appToken)
        await #expect(throws: TunnelFailure.self) { try await setup.provider.appToken(for: Self.origin, interactive: true) }
        #expect(setup.log.lines.contains { $0.contains("deleting the cached token file") && $0.contains("expired") })
        // The transfer answers with that same, expired token: refused, nothing cached.
        #expect(setup.store.read(Self.appFile) == .missing)
        setup.expectNoSecretsLogged()
    }

    @Test func worldReadableCacheFileIsIgnoredWithAWarning() async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        try setup.store.write(Self.appFile, text: AuthVectors.appToken)
        chmod(setup.temp.path + "/" + Self.appFile, 0o644)
        let token = try await setup.provider.appToken(for: Self.origin, interactive: true)
        #expect(token == AuthVectors.appToken)
        #expect(setup.presenter.shown.count == 1, "the untrusted file was not used: a login ran")
        #expect(setup.log.lines.contains { $0.hasPrefix("warning ignoring the cached token file") })
        #expect(setup.temp.mode(of: Self.appFile) == 0o600)
    }

    static func failure(_ edge: Edge, polls: Int = 10) async -> (TunnelFailure?, Setup) {
        let setup = Setup(edge, polls: polls)
        do {
            _ = try await setup.provider.appToken(for: origin, interactive: true)
            return (nil, setup)
        } catch {
            return (error, setup)
        }
    }

    @Test(arguments: [
        ("no metadata", "No Access application at https://ssh.example.com/"),
        ("other key", "signature does not match"),
        ("tampered", "was refused"),
        ("unknown kid", "unknown key"),
    ])
    func discoveryFailures(kind: String, messagePart: String) async throws {
        var edge = Edge()
        switch kind {
        case "no metadata": edge.metadata = nil
        case "other key": edge.metadata = AuthVectors.metadataSignedByOtherKey
        case "tampered": edge.metadata = AuthVectors.metadataTampered
        default: edge.metadata = AuthVectors.metadataUnknownKid
        }
        let (error, setup) = await Self.failure(edge)
        defer { setup.temp.remove() }
        let failure = try #require(error)
        #expect(failure.message.contains(messagePart), "\(failure.message)")
        #expect(!setup.store.fileNames().contains { $0.hasSuffix("-token") || $0.hasSuffix(".lock") })
        #expect(!failure.message.contains("eyJ"))
    }

    @Test func transferServiceErrorIsReportedWithItsScrubbedBody() async throws {
        var edge = Edge()
        edge.transfer = { _ in response(500, body: "database down token=\(AuthVectors.appToken)") }
        let (error, setup) = await Self.failure(edge)
        defer { setup.temp.remove() }
        let failure = try #require(error)
        #expect(failure.message.contains("HTTP 500") && failure.message.contains("database down"))
        #expect(!failure.message.contains("eyJ"))
        #expect(!setup.store.fileNames().contains { $0.hasSuffix(".lock") || $0.hasSuffix(".url") || $0.hasSuffix("-token") })
    }

    @Test func transferNeverAnsweringIsBounded() async throws {
        var edge = Edge()
        edge.transfer = { _ in response(404) }
        let (error, setup) = await Self.failure(edge, polls: 3)
        defer { setup.temp.remove() }
        let failure = try #require(error)
        #expect(failure.message.contains("was not completed"))
        #expect(setup.http.requests.filter { $0.url.contains("/transfer/") }.count == 3)
    }

    @Test func transferAnsweringForAnotherKeyIsRefused() async throws {
        var edge = Edge()
        // Sealed for our key but claimed from another sender: authentication fails.
        edge.transfer = { _ in
            response(200, [("service-public-key", AuthVectors.clientPublicKey)], body: AuthVectors.sealedStandardBase64)
        }
        let (error, setup) = await Self.failure(edge)
        defer { setup.temp.remove() }
        #expect(try #require(error).message.contains("could not be decrypted"))
        #expect(!setup.store.fileNames().contains { $0.hasSuffix("-token") })
    }

    @Test func badBase64AndTruncatedNonceAreRefused() async throws {
        for body in ["%%%not base64", "AAAAAAAAAAAAAAAA"] {
            var edge = Edge()
            edge.transfer = { _ in response(200, [("service-public-key", AuthVectors.servicePublicKeyURL)], body: body) }
            let (error, setup) = await Self.failure(edge)
            defer { setup.temp.remove() }
            let message = try #require(error).message
            #expect(message.contains("not base64") || message.contains("shorter than a nonce"), "\(message)")
        }
    }

    @Test func orgTokenExchangeAvoidsTheBrowser() async throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let log = MemoryLog()
        let presenter = RecordingPresenter()
        try FileTokenStore(directory: temp.path).write(Self.orgFile, text: AuthVectors.orgToken)
        let base = Self.scripted(Edge())
        let http = ScriptedHTTP { request in
            switch request.url {
            case "https://ssh.example.com/" where request.headers.isEmpty:
                return response(302, [("Location", "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com")])
            case "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com":
                #expect(request.cookies.contains { $0.name == "CF_Authorization" && $0.value == AuthVectors.orgToken })
                return response(302, [("Location", "https://ssh.example.com/cdn-cgi/access/authorized"),
                                      ("Set-Cookie", "CF_AppSession=s1; Path=/")])
            case "https://ssh.example.com/cdn-cgi/access/authorized":
                #expect(request.cookies.contains { $0.name == "CF_AppSession" && $0.value == "s1" })
                return response(302, [("Location", "/"), ("Set-Cookie", "CF_Authorization=\(AuthVectors.appToken); Path=/")])
            default:
                return base.answerClosure(request)
            }
        }
        let provider = AccessTokenProvider(configuration: AccessLoginConfiguration(tokenDirectory: temp.path),
                                           logger: log.logger, http: http, box: VectorKeyBox(), browser: NoBrowser(),
                                           clock: FakeClock(Self.now), presenter: presenter)
        let token = try await provider.appToken(for: Self.origin, interactive: true)
        #expect(token == AuthVectors.appToken)
        #expect(presenter.shown.isEmpty, "no browser login")
        #expect(temp.mode(of: Self.appFile) == 0o600)
        for line in log.lines { #expect(!line.contains("eyJ")) }
    }

    @Test func invalidateDeletesTheAppToken() async throws {
        let setup = Setup()
        defer { setup.temp.remove() }
        _ = try await setup.provider.appToken(for: Self.origin, interactive: true)
        await setup.provider.invalidate(for: Self.origin)
        #expect(setup.store.read(Self.appFile) == .missing)
        #expect(setup.store.read(Self.orgFile) != .missing)
    }
}
