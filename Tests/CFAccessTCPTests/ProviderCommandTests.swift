@testable import AccessTransport
import AccessTestSupport
import AccessCore
import CFAccessTCP
import Foundation
import Logging
import Testing

/// What the `token`, `logout` and `login` subcommands ask of `AccessTokenProvider`, and how
/// discovery fails, over a scripted edge (real RS256, files and lock; HTTP and time faked).
@Suite("Access token provider: commands and discovery failures", .serialized)
struct ProviderCommandTests {
    static let origin = ProviderFlowTests.origin
    static let appFile = ProviderFlowTests.appFile
    static let orgFile = ProviderFlowTests.orgFile
    static let jwksFile = "team.cloudflareaccess.com-jwks"
    static let loginLocation = "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com?kid=1&redirect_url=%2F"

    /// A provider over `answer` for every request that the default scripted edge does not handle
    /// (`nil`: use the default edge's answer).
    struct Rig {
        let temp = TemporaryDirectory()
        let log = MemoryLog()
        let presenter = WaitRecordingPresenter()
        let http: ScriptedHTTP
        let provider: AccessTokenProvider
        var store: FileTokenStore { FileTokenStore(directory: temp.path) }

        init(edge: ProviderFlowTests.Edge = .init(), clock: any WallClock = FakeClock(ProviderFlowTests.now),
             lock: (any LoginLock)? = nil, lockWait: Duration = .seconds(600),
             override: @escaping @Sendable (HTTPRequest) -> Result<HTTPResponse, TunnelFailure>? = { _ in nil }) {
            let fallback = ProviderFlowTests.scripted(edge)
            http = ScriptedHTTP { request in override(request) ?? fallback.answerClosure(request) }
            let configuration = AccessLoginConfiguration(tokenDirectory: temp.path, lockMaximumWait: lockWait)
            provider = AccessTokenProvider(configuration: configuration, logger: log.logger, http: http,
                                           box: VectorKeyBox(), store: nil, lock: lock, browser: NoBrowser(),
                                           clock: clock, presenter: presenter)
        }
    }

    /// The failure `body` throws, or nil.
    static func failure(_ body: () async throws(TunnelFailure) -> Void) async -> TunnelFailure? {
        do {
            try await body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: token / application info

    @Test func cachedAppTokenIsNilUntilATokenIsCachedAndNeverLogsIn() async throws {
        let rig = Rig()
        defer { rig.temp.remove() }
        #expect(try await rig.provider.cachedAppToken(for: Self.origin) == nil)
        #expect(rig.presenter.shown.isEmpty && !rig.http.requests.contains { $0.url.contains("/transfer/") })
        try rig.store.write(Self.appFile, text: AuthVectors.appToken)
        #expect(try await rig.provider.cachedAppToken(for: Self.origin) == AuthVectors.appToken)
        #expect(try await rig.provider.applicationInfo(for: Self.origin)
            == AppInfo(authDomain: "team.cloudflareaccess.com", appAUD: AuthVectors.aud, appHostname: "*.example.com/ssh"))
        #expect(rig.http.requests.filter { $0.method == "HEAD" }.count == 1, "the application is discovered once")
    }

    // MARK: login (with the edge's token check)

    @Test func loginReturnsATokenTheEdgeAccepts() async throws {
        let rig = Rig()
        defer { rig.temp.remove() }
        let token = try await rig.provider.login(for: Self.origin)
        #expect(token == AuthVectors.appToken)
        let check = try #require(rig.http.requests.first { $0.url.hasSuffix("?cloudflared_token_check=true") })
        #expect(check.method == "GET" && check.url == "https://ssh.example.com/?cloudflared_token_check=true")
        #expect(check.headers.contains { $0.name.lowercased() == "cf-access-token" && $0.value == AuthVectors.appToken })
    }

    @Test func loginGivesUpWhenTheEdgeRefusesTheNewTokenTwice() async throws {
        let rig = Rig { request in
            if request.url.hasSuffix("?cloudflared_token_check=true") { return response(302, [("Location", Self.loginLocation)]) }
            // The org-token exchange (a HEAD without the metadata request header) gets nowhere.
            if request.method == "HEAD" && !request.headers.contains(where: { $0.name == "cf-access-metadata-request" }) {
                return response(403)
            }
            return nil
        }
        defer { rig.temp.remove() }
        let failure = await Self.failure { () async throws(TunnelFailure) in _ = try await rig.provider.login(for: Self.origin) }
        #expect(failure?.message == "Login to ssh.example.com failed: Cloudflare Access refused the new token as well; "
            + "try `cf-access-tcp login ssh.example.com` again")
        #expect(rig.http.requests.filter { $0.url.hasSuffix("?cloudflared_token_check=true") }.count == 2)
        #expect(rig.presenter.shown.count == 2, "one new login per refused token")
        #expect(rig.store.read(Self.appFile) == .missing, "a refused token is not kept")
        #expect(rig.log.lines.contains { $0.hasPrefix("info the edge refused the app token") })
    }

    // MARK: logout

    @Test func logoutOfAnAppRemovesOnlyItsToken() async throws {
        let rig = Rig()
        defer { rig.temp.remove() }
        for name in [Self.appFile, Self.orgFile, "other.example.com-aud2-token"] {
            try rig.store.write(name, text: AuthVectors.appToken)
        }
        let removed = await rig.provider.logout(origin: Self.origin)
        #expect(removed == [rig.store.path(of: Self.appFile)])
        #expect(Set(rig.store.fileNames()).isSuperset(of: [Self.orgFile, "other.example.com-aud2-token"]))
        #expect(await rig.provider.logout(origin: Self.origin).isEmpty, "nothing left to remove")
    }

    @Test func logoutOfEverythingKeepsTheKeySet() async throws {
        let rig = Rig()
        defer { rig.temp.remove() }
        for name in [Self.appFile, Self.orgFile, Self.jwksFile] { try rig.store.write(name, text: "x") }
        let removed = await rig.provider.logout(origin: nil)
        #expect(Set(removed) == Set([Self.appFile, Self.orgFile].map(rig.store.path(of:))))
        #expect(rig.store.fileNames() == [Self.jwksFile])
    }

    @Test func offlineLogoutRemovesTheHostsAppTokensButNotOrgTokens() async throws {
        let rig = Rig { _ in .failure(.dns(host: "ssh.example.com")) }
        defer { rig.temp.remove() }
        let names = ["ssh.example.com-aud1-token", "ssh.example.com-aud2-token", "ssh.example.com-org-token",
                     "ssh.example.com-aud1-token.lock", "other.example.com-aud1-token"]
        for name in names { try rig.store.write(name, text: "x") }
        let removed = await rig.provider.logout(origin: Self.origin)
        #expect(Set(removed) == Set(["ssh.example.com-aud1-token", "ssh.example.com-aud2-token"].map(rig.store.path(of:))))
        #expect(Set(rig.store.fileNames()) == ["ssh.example.com-org-token", "ssh.example.com-aud1-token.lock",
                                               "other.example.com-aud1-token"])
    }

    @Test func invalidateWithoutReachingTheAppSaysSoAndKeepsTheFile() async throws {
        let rig = Rig { _ in .failure(.dns(host: "ssh.example.com")) }
        defer { rig.temp.remove() }
        try rig.store.write(Self.appFile, text: AuthVectors.appToken)
        await rig.provider.invalidate(for: Self.origin)
        #expect(rig.store.read(Self.appFile) != .missing)
        #expect(rig.log.lines.contains { $0.hasPrefix("info cannot find the Access application to forget its token") })
    }

    // MARK: discovery failures (§2)

    /// The vectors' metadata payload under another header, unsigned.
    static func metadata(header: String) -> String {
        let payload = AuthVectors.metadata.split(separator: ".")[1]
        return Base64.encode(Array(header.utf8), alphabet: .url, padded: false) + "." + payload + ".c2ln"
    }

    @Test("metadata that cannot be verified", arguments: [
        ("not-a-jwt", "the metadata is not a JWT: it does not have three dot-separated parts"),
        (metadata(header: #"{"alg":"HS256","kid":"k1"}"#), "it is signed with \"HS256\", not RS256"),
        (metadata(header: #"{"alg":"RS256"}"#), "it names no signing key (kid)"),
        (metadata(header: #"{"alg":"RS256","kid":""}"#), "it names no signing key (kid)"),
    ])
    func unverifiableMetadata(_ metadata: String, _ reason: String) async throws {
        let rig = Rig(edge: .init(metadata: metadata))
        defer { rig.temp.remove() }
        let failure = await Self.failure { () async throws(TunnelFailure) in _ = try await rig.provider.cachedAppToken(for: Self.origin) }
        #expect(failure?.category == .authentication)
        #expect(failure?.detail == reason)
        #expect(failure?.message.hasPrefix("The Access application metadata of ssh.example.com could not be verified") == true)
    }

    @Test func keySetErrorsAreRetryableTransportFailures() async throws {
        let unavailable = Rig { request in request.url.hasSuffix("/cdn-cgi/access/certs") ? response(503, body: "busy") : nil }
        defer { unavailable.temp.remove() }
        let first = await Self.failure { () async throws(TunnelFailure) in _ = try await unavailable.provider.cachedAppToken(for: Self.origin) }
        #expect(first?.category == .transport && first?.isRetryable == true)
        #expect(first?.detail == "HTTP 503 from https://team.cloudflareaccess.com/cdn-cgi/access/certs")

        let garbled = Rig(edge: .init(jwks: "<html>"))
        defer { garbled.temp.remove() }
        let second = await Self.failure { () async throws(TunnelFailure) in _ = try await garbled.provider.cachedAppToken(for: Self.origin) }
        #expect(second?.detail == "the key set is not a JSON object with a \"keys\" array")
        #expect(garbled.store.read(Self.jwksFile) == .missing, "a bad key set is not cached")
    }

    @Test func anUnreadableCachedKeySetIsDeletedAndFetchedAgain() async throws {
        let rig = Rig()
        defer { rig.temp.remove() }
        try rig.store.write(Self.jwksFile, text: "{ not a key set")
        #expect(try await rig.provider.applicationInfo(for: Self.origin).appAUD == AuthVectors.aud)
        #expect(rig.log.lines.contains { $0.hasPrefix("info deleting an unreadable cached key set") })
        guard case .content(let text, _) = rig.store.read(Self.jwksFile) else {
            Issue.record("the fetched key set was not cached")
            return
        }
        #expect(text == AuthVectors.jwks)
    }

    // MARK: a login held by another process (§3 lock)

    @Test func aLoginHeldByAnotherProcessIsWaitedForAndItsTokenUsed() async throws {
        let lock = HeldLock(pid: 4242)
        let rig = Rig(lock: lock)
        defer { rig.temp.remove() }
        let store = rig.store
        try store.write(TokenCacheNaming.urlFileName(for: Self.appFile), text: "https://ssh.example.com/cdn-cgi/access/cli?x")
        // The other process finishes after our third look at the lock.
        lock.onAttempt = { attempt in
            if attempt == 3 { try? store.write(Self.appFile, text: AuthVectors.appToken) }
        }
        let token = try await rig.provider.appToken(for: Self.origin, interactive: true)
        #expect(token == AuthVectors.appToken)
        #expect(rig.presenter.others == [WaitRecordingPresenter.Other(pid: 4242, url: "https://ssh.example.com/cdn-cgi/access/cli?x")],
                "announced once, with the holder's URL")
        #expect(rig.presenter.shown.isEmpty, "no login of our own")
        #expect(!rig.http.requests.contains { $0.url.contains("/transfer/") })
    }

    @Test func aLockHeldTooLongFails() async throws {
        let clock = FakeClock(ProviderFlowTests.now, stepping: true)
        let rig = Rig(clock: clock, lock: HeldLock(pid: 4242), lockWait: .seconds(10))
        defer { rig.temp.remove() }
        let failure = await Self.failure { () async throws(TunnelFailure) in
            _ = try await rig.provider.appToken(for: Self.origin, interactive: true)
        }
        // The lock's path holds the AUD, a long hex run that messages redact.
        #expect(failure?.message.hasPrefix("Another cf-access-tcp or cloudflared login has held ") == true)
        #expect(failure?.message.hasSuffix(" for 10 minutes: finish or stop that login, then try again") == true)
        #expect(failure?.isRetryable == true)
        #expect(rig.presenter.others == [WaitRecordingPresenter.Other(pid: 4242, url: nil)], "announced once without a URL")
        #expect(clock.slept == 10, "polled every 2 s until the 10 s wait was over")
    }
}
