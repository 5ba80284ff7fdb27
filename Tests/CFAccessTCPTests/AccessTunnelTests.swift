import AccessTestSupport
import AccessCore
import AccessTransport
import CFAccessTCP
import Foundation
import Logging
import Testing

// MARK: Scripted doubles

let token = try! ServiceToken(clientID: "id", clientSecret: "secret")
let refused = TunnelFailure.connectionRefused(address: "127.0.0.1:1")
let rejected = TunnelFailure.accessRejected(host: "ssh.example.com", credential: .serviceToken, loginURL: nil)
let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

private func makeTunnel(_ transport: ScriptedTransport, clock: ManualClock, retry: RetryPolicy = .standard) -> AccessTunnel {
    AccessTunnel(options: .init(connectTimeout: .seconds(15), retry: retry), logger: quiet, transport: transport, clock: clock)
}

// MARK: Sequences

@Suite("AccessTunnel state sequences (scripted transport, manual clock)")
struct AccessTunnelTests {
    @Test("success: idle, authenticating, connecting, connected(port)")
    func success() async throws {
        let transport = ScriptedTransport([.succeed])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        let recorder = StateRecorder(tunnel)
        let port = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        #expect(port == 40_000)
        let states = await recorder.wait { $0.last == .connected(localPort: 40_000) }
        #expect(states == [.idle, .authenticating, .connecting, .connected(localPort: 40_000)])
        #expect(transport.probes.first?.request.value(forHeader: "Cf-Access-Client-Id") == "id")
        #expect(transport.servedLimits == [.singleConnection])
        // A late subscriber sees the current state first.
        var iterator = tunnel.state.makeAsyncIterator()
        #expect(await iterator.next() == .connected(localPort: 40_000))
    }

    @Test("invalid state: connect while connected throws and changes nothing")
    func invalidState() async throws {
        let transport = ScriptedTransport([.succeed, .succeed])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        await #expect(throws: TunnelFailure.self) {
            _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        }
        do {
            _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        } catch {
            #expect(error.category == .invalidState)
        }
        #expect(tunnel.currentState == .connected(localPort: 40_000))
        #expect(transport.probes.count == 1)
    }

    @Test("fallback success: rejected service token, then OAuth token works")
    func fallbackSuccess() async throws {
        let transport = ScriptedTransport([.fail(rejected), .succeed])
        let flow = CountingFlow()
        let tunnel = makeTunnel(transport, clock: ManualClock())
        let recorder = StateRecorder(tunnel)
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceTokenWithOAuthFallback(token, flow))
        let states = await recorder.wait { $0.last == .connected(localPort: 40_000) }
        #expect(states == [.idle, .authenticating, .connecting, .authenticating, .connecting, .connected(localPort: 40_000)])
        #expect(transport.probes.last?.request.value(forHeader: "Cf-Access-Token") == "app.token.1")
        #expect(transport.probes.last?.request.value(forHeader: "Cf-Access-Client-Id") == nil)
    }

    @Test("fallback failure: OAuth fails too → failed with its message")
    func fallbackFailure() async throws {
        let loginFailed = TunnelFailure(category: .authentication, isRetryable: false, message: "The login was cancelled.")
        let transport = ScriptedTransport([.fail(rejected)])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        let recorder = StateRecorder(tunnel)
        await #expect(throws: loginFailed) {
            _ = try await tunnel.connect(hostname: "ssh.example.com",
                                         method: .serviceTokenWithOAuthFallback(token, CountingFlow(failure: loginFailed)))
        }
        let states = await recorder.wait { $0.last == .failed(loginFailed) }
        #expect(states == [.idle, .authenticating, .connecting, .authenticating, .failed(loginFailed)])
    }

    @Test("retry success: refused, wait 1 s (injected clock), then connected")
    func retrySuccess() async throws {
        let clock = ManualClock()
        let transport = ScriptedTransport([.fail(refused), .succeed])
        let tunnel = makeTunnel(transport, clock: clock)
        let recorder = StateRecorder(tunnel)
        let port = Task { try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token)) }
        _ = await recorder.wait { $0.last == .reconnecting(attempt: 2) }
        while !clock.pending.contains(1) { try await Task.sleep(nanoseconds: 1_000_000) }
        clock.advance(by: 1)
        #expect(try await port.value == 40_000)
        let states = await recorder.wait { $0.last == .connected(localPort: 40_000) }
        #expect(states == [.idle, .authenticating, .connecting, .reconnecting(attempt: 2), .authenticating, .connecting,
                           .connected(localPort: 40_000)])
    }

    @Test("retry exhaustion: 1 s, 5 s, 15 s, then failed with the last reason")
    func retryExhaustion() async throws {
        let clock = ManualClock()
        let transport = ScriptedTransport([.fail(refused), .fail(refused), .fail(refused), .fail(refused)])
        let tunnel = makeTunnel(transport, clock: clock)
        let recorder = StateRecorder(tunnel)
        let outcome = Task { try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token)) }
        for (attempt, delay) in [(2, 1.0), (3, 5.0), (4, 15.0)] {
            _ = await recorder.wait { $0.last == .reconnecting(attempt: attempt) }
            while !clock.pending.contains(delay) { try await Task.sleep(nanoseconds: 1_000_000) }
            clock.advance(by: delay)
        }
        await #expect(throws: refused) { _ = try await outcome.value }
        #expect(transport.probes.count == 4)
        #expect(tunnel.currentState == .failed(refused))
    }

    @Test("a non-retryable failure is not retried")
    func nonRetryable() async throws {
        let badCA = TunnelFailure.tls(host: "ssh.example.com", reason: "unable to get local issuer certificate")
        let transport = ScriptedTransport([.fail(badCA), .succeed])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        await #expect(throws: badCA) { _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token)) }
        #expect(transport.probes.count == 1)
    }

    @Test("timeout: a dial that never answers ends in Connection timed out.")
    func timeout() async throws {
        let clock = ManualClock()
        let transport = ScriptedTransport([.hang])
        let tunnel = makeTunnel(transport, clock: clock, retry: .never)
        let outcome = Task { try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token)) }
        while !clock.pending.contains(15) { try await Task.sleep(nanoseconds: 1_000_000) }
        clock.advance(by: 15)
        do {
            _ = try await outcome.value
            Issue.record("connect succeeded")
        } catch let error as TunnelFailure {
            #expect(error.message.hasPrefix("Connection timed out."))
        }
        if case .failed(let failure) = tunnel.currentState {
            #expect(failure.message.hasPrefix("Connection timed out."))
        } else {
            Issue.record("state is \(tunnel.currentState)")
        }
    }

    @Test("disconnect while connecting: disconnected, connect throws, nothing left open")
    func disconnectWhileConnecting() async throws {
        let transport = ScriptedTransport([.hang])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        let recorder = StateRecorder(tunnel)
        let outcome = Task { try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token)) }
        _ = await recorder.wait { $0.last == .connecting }
        await tunnel.disconnect()
        await #expect(throws: TunnelFailure.self) { _ = try await outcome.value }
        #expect(tunnel.currentState == .disconnected)
        #expect(transport.servedLimits.isEmpty)
    }

    @Test("disconnect while connected closes the listener before returning")
    func disconnectWhileConnected() async throws {
        let transport = ScriptedTransport([.succeed])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        #expect(transport.closedServings.withLock { $0 } == 0)
        await tunnel.disconnect()
        #expect(transport.closedServings.withLock { $0 } == 1)
        #expect(tunnel.currentState == .disconnected)
        await tunnel.disconnect()
        #expect(transport.closedServings.withLock { $0 } == 1)
    }

    @Test("a bad hostname is a configuration failure before anything happens")
    func badHostname() async throws {
        let transport = ScriptedTransport([])
        let tunnel = makeTunnel(transport, clock: ManualClock())
        do {
            _ = try await tunnel.connect(hostname: "", method: .none)
            Issue.record("connect succeeded")
        } catch {
            #expect(error.category == .configuration)
        }
        #expect(tunnel.currentState == .idle)
        #expect(transport.probes.isEmpty)
    }
}

let loginRedirect = TunnelFailure.accessRejected(host: "ssh.example.com", credential: .none,
                                                 loginURL: "https://team.cloudflareaccess.com/cdn-cgi/access/login/ssh.example.com")

/// A flow that holds a stored token, and counts what it is asked.
final class StoredTokenFlow: OAuthFlow, @unchecked Sendable {
    let asked = LockedBox<[Bool]>([])
    let stored: String?
    init(stored: String?) { self.stored = stored }
    func storedAppToken(for origin: OriginURL) async -> String? { stored }
    func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        "fresh.token.\(asked.withLock { $0.append(refresh); return $0.count })"
    }
}

/// Issue 17.7: an OAuth session dials first — with a stored token, or with none — and looks the
/// application up and logs in only when the edge answers with the Access login redirect.
@Suite("OAuth dials first (scripted transport)")
struct DialFirstTests {
    @Test("an origin without Access: the bare dial connects, the flow is never asked, no authorizer")
    func noAccess() async throws {
        let transport = ScriptedTransport([.succeed])
        let flow = StoredTokenFlow(stored: nil)
        let tunnel = makeTunnel(transport, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .oauth(flow))
        #expect(flow.asked.withLock { $0 }.isEmpty)
        #expect(transport.probes.count == 1)
        #expect(transport.probes.first?.request.value(forHeader: "Cf-Access-Token") == nil)
        #expect(transport.probes.first?.credential == CredentialKind.none)
        #expect(transport.servedAuthorizers.first.map { $0 == nil } == true)
        await tunnel.disconnect()
    }

    @Test("the login redirect on the bare dial starts the login; its token is dialled next")
    func redirectThenLogin() async throws {
        let transport = ScriptedTransport([.fail(loginRedirect), .succeed])
        let flow = StoredTokenFlow(stored: nil)
        let tunnel = makeTunnel(transport, clock: ManualClock())
        let recorder = StateRecorder(tunnel)
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .oauth(flow))
        let states = await recorder.wait { $0.last == .connected(localPort: 40_000) }
        #expect(states == [.idle, .authenticating, .connecting, .authenticating, .connecting, .connected(localPort: 40_000)])
        #expect(flow.asked.withLock { $0 } == [false])
        #expect(transport.probes.map { $0.request.value(forHeader: "Cf-Access-Token") } == [nil, "fresh.token.1"])
        #expect(transport.servedAuthorizers.first.map { $0 != nil } == true)
        await tunnel.disconnect()
    }

    @Test("a stored token goes with the first dial; refused, the login replaces it (a refresh)")
    func storedTokenRefused() async throws {
        let accepted = ScriptedTransport([.succeed])
        let flow = StoredTokenFlow(stored: "stored.token")
        let tunnel = makeTunnel(accepted, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .oauth(flow))
        #expect(accepted.probes.first?.request.value(forHeader: "Cf-Access-Token") == "stored.token")
        #expect(flow.asked.withLock { $0 }.isEmpty, "a stored token Access accepts needs no lookup")
        await tunnel.disconnect()

        let refused = ScriptedTransport([.fail(loginRedirect), .succeed])
        let again = makeTunnel(refused, clock: ManualClock())
        _ = try await again.connect(hostname: "ssh.example.com", method: .oauth(flow))
        #expect(flow.asked.withLock { $0 } == [true])
        #expect(refused.probes.map { $0.request.value(forHeader: "Cf-Access-Token") } == ["stored.token", "fresh.token.1"])
        await again.disconnect()
    }

    @Test("a network failure on the bare dial is reported as it is: no login")
    func networkFailureNoLogin() async throws {
        let transport = ScriptedTransport([.fail(refused)])
        let flow = StoredTokenFlow(stored: nil)
        let tunnel = makeTunnel(transport, clock: ManualClock(), retry: .never)
        await #expect(throws: refused) { _ = try await tunnel.connect(hostname: "ssh.example.com", method: .oauth(flow)) }
        #expect(flow.asked.withLock { $0 }.isEmpty)
    }
}

/// A flow whose refreshes take a moment (so concurrent callers overlap) and are counted.
final class SlowRefreshFlow: OAuthFlow, @unchecked Sendable {
    let calls = LockedBox<[Bool]>([])
    private let generation = LockedBox(0)
    func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        calls.withLock { $0.append(refresh) }
        if refresh {
            try? await Task.sleep(nanoseconds: 50_000_000)
            return "app.token.\(generation.withLock { $0 += 1; return $0 })"
        }
        return "app.token.\(generation.withLock { $0 })"
    }
}

@Suite("listener connections and OAuth tokens (scripted transport)")
struct ConnectionAuthorizerTests {
    @Test("each connection asks the flow for the current token; refusals of one token share one refresh")
    func refusalsShareOneRefresh() async throws {
        // The first dial (no credential) meets the Access login redirect, the second carries the token.
        let transport = ScriptedTransport([.fail(loginRedirect), .succeed])
        let flow = SlowRefreshFlow()
        let tunnel = makeTunnel(transport, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .oauth(flow))
        let authorizer = try #require(transport.servedAuthorizers.last ?? nil)

        let (first, kind) = try await authorizer.request(rejected: nil)
        #expect(kind == .accessToken)
        #expect(first.value(forHeader: "Cf-Access-Token") == "app.token.0")
        #expect(first.value(forHeader: "Cf-Access-Client-Id") == nil)

        // Three connections refused with the same token at once: one refresh, one new token.
        async let a = authorizer.request(rejected: first)
        async let b = authorizer.request(rejected: first)
        async let c = authorizer.request(rejected: first)
        let fresh = try await [a.0, b.0, c.0].map { $0.value(forHeader: "Cf-Access-Token") }
        #expect(fresh == ["app.token.1", "app.token.1", "app.token.1"])
        #expect(flow.calls.withLock { $0.filter { $0 }.count } == 1)

        // A late refusal of the old token gets the replacement without another refresh; a
        // refusal of the replacement refreshes again.
        let late = try await authorizer.request(rejected: first)
        #expect(late.0.value(forHeader: "Cf-Access-Token") == "app.token.1")
        #expect(flow.calls.withLock { $0.filter { $0 }.count } == 1)
        let again = try await authorizer.request(rejected: late.0)
        #expect(again.0.value(forHeader: "Cf-Access-Token") == "app.token.2")
        #expect(flow.calls.withLock { $0.filter { $0 }.count } == 2)
        // New connections get the flow's current token.
        #expect(try await authorizer.request(rejected: nil).0.value(forHeader: "Cf-Access-Token") == "app.token.2")
        await tunnel.disconnect()
    }

    @Test("a service token: each connection carries the current one, replaceable while the listener runs, never redialled; a failing refresh reaches the connection")
    func serviceTokenAndFailure() async throws {
        let plain = ScriptedTransport([.succeed])
        let tunnel = makeTunnel(plain, clock: ManualClock())
        _ = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
        #expect(plain.servedAuthorizers.count == 1)
        let carried = try #require(plain.servedAuthorizers.first ?? nil)
        #expect(!carried.redialsOnRefusal)
        let (first, kind) = try await carried.request(rejected: nil)
        #expect(kind == .serviceToken)
        #expect(first.value(forHeader: "Cf-Access-Client-Secret") == token.clientSecret)
        let rotated = try ServiceToken(clientID: token.clientID, clientSecret: "rotated-secret-0123456789")
        #expect(await tunnel.replaceServiceToken(rotated))
        #expect(try await carried.request(rejected: nil).0.value(forHeader: "Cf-Access-Client-Secret") == rotated.clientSecret)
        await tunnel.disconnect()

        // A fixed access token cannot be refreshed: the refused connection gets the plain failure.
        let fixed = ScriptedTransport([.succeed])
        let fixedTunnel = makeTunnel(fixed, clock: ManualClock())
        _ = try await fixedTunnel.connect(hostname: "ssh.example.com", method: .accessToken("given.token"))
        let authorizer = try #require(fixed.servedAuthorizers.last ?? nil)
        let (request, _) = try await authorizer.request(rejected: nil)
        #expect(request.value(forHeader: "Cf-Access-Token") == "given.token")
        await #expect(throws: TunnelFailure.accessRejected(host: "ssh.example.com", credential: .accessToken, loginURL: nil)) {
            _ = try await authorizer.request(rejected: request)
        }
        await fixedTunnel.disconnect()
    }
}

