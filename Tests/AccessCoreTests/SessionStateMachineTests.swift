import AccessCore
import Testing

/// The session's decisions, driven step by step without I/O.
@Suite("session state machine")
struct SessionStateMachineTests {
    typealias Machine = SessionStateMachine
    let refused = TunnelFailure.connectionRefused(address: "127.0.0.1:1")          // retryable
    let rejected = TunnelFailure.accessRejected(host: "h", credential: .serviceToken, loginURL: nil)
    let badCA = TunnelFailure.tls(host: "h", reason: "unable to get local issuer certificate") // not retryable

    private func published(_ actions: [Machine.Action]) -> [ConnectionState] {
        actions.compactMap { if case .publish(let s) = $0 { return s } else { return nil } }
    }

    @Test("success: idle → authenticating → connecting → connected")
    func success() throws {
        var m = Machine()
        #expect(m.state == .idle)
        let start = try m.connect(.init(primary: .serviceToken))
        #expect(start == [.startDeadline, .publish(.authenticating), .authenticate(.serviceToken, refresh: false)])
        #expect(m.handle(.authenticated) == [.publish(.connecting), .dial(.serviceToken)])
        #expect(m.handle(.dialSucceeded) == [.openLocal])
        #expect(m.handle(.localReady(port: 4022)) == [.cancelDeadline, .publish(.connected(localPort: 4022))])
        #expect(m.state == .connected(localPort: 4022))
    }

    @Test("a listener whose first dial finds no edge listens all the same and says why (issue 26.1)")
    func listensWhenEdgeUnreachable() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard, listensWhenEdgeUnreachable: true))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(refused)) == [.reportEdgeUnreachable(refused), .openLocal])
        // A late report of the same attempt (the deadline, the dial) asks for nothing more.
        let timedOut = TunnelFailure.timedOut(host: "h", seconds: 15)
        #expect(m.handle(.deadlinePassed(timedOut)) == [])
        #expect(m.handle(.dialSucceeded) == [])
        #expect(m.handle(.localReady(port: 4022)) == [.cancelDeadline, .publish(.connected(localPort: 4022))])

        var byDeadline = Machine()
        _ = try byDeadline.connect(.init(primary: .serviceToken, listensWhenEdgeUnreachable: true))
        _ = byDeadline.handle(.authenticated)
        #expect(byDeadline.handle(.deadlinePassed(timedOut)) == [.reportEdgeUnreachable(timedOut), .openLocal])
    }

    @Test("a listener still fails its start on a refused credential, a bad certificate, or without the option",
          arguments: [0, 1, 2])
    func listenerStillFailsWhenNotUnreachable(_ which: Int) throws {
        var m = Machine()
        let failure = [rejected, badCA, refused][which]
        _ = try m.connect(.init(primary: .serviceToken, retry: .never, listensWhenEdgeUnreachable: which < 2))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(failure)) == [.cancelDeadline, .tearDown, .publish(.failed(failure))])
    }

    @Test("connect while not terminal throws invalidState and changes nothing",
          arguments: [0, 1, 2, 3])
    func invalidState(step: Int) throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        let events: [Machine.Event] = [.authenticated, .dialSucceeded, .localReady(port: 1)]
        for event in events.prefix(step) { _ = m.handle(event) }
        if step == 3 {
            // reconnecting is not terminal either
            m = Machine()
            _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
            _ = m.handle(.authenticationFailed(refused))
            #expect(m.state == .reconnecting(attempt: 2))
        }
        let before = m
        #expect(throws: Machine.Refusal.invalidState(m.state)) { _ = try m.connect(.init(primary: .oauth)) }
        #expect(m == before)
    }

    @Test("connect again after failed or disconnected starts afresh")
    func reconnectFromTerminal() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .never))
        _ = m.handle(.authenticationFailed(badCA))
        #expect(m.state == .failed(badCA))
        #expect(try m.connect(.init(primary: .oauth)).contains(.authenticate(.oauth, refresh: false)))
        _ = m.handle(.disconnectRequested)
        #expect(m.state == .disconnected)
        #expect(try m.connect(.init(primary: .serviceToken)).contains(.publish(.authenticating)))
    }

    @Test("OAuth dials first with what is stored; an origin without Access connects with no login (issue 17.7)")
    func storedFirstNoAccess() throws {
        var m = Machine()
        let start = try m.connect(.init(primary: .stored, fallbackToOAuth: true))
        #expect(start == [.startDeadline, .publish(.authenticating), .authenticate(.stored, refresh: false)])
        #expect(m.handle(.storedTokenLookedUp(found: false)) == [.publish(.connecting), .dial(.stored)])
        #expect(m.handle(.dialSucceeded) == [.openLocal])
        #expect(published(m.handle(.localReady(port: 7))) == [.connected(localPort: 7)])
    }

    @Test("the Access login redirect on the first dial starts the login; a refused stored token is replaced once")
    func storedFirstThenLogin() throws {
        // No stored token: the login's cache lookup may still find one (no refresh), and one
        // refresh is left for a token Access then refuses.
        var m = Machine()
        _ = try m.connect(.init(primary: .stored, fallbackToOAuth: true))
        _ = m.handle(.storedTokenLookedUp(found: false))
        #expect(m.handle(.dialFailed(rejected)) == [.cancelDeadline, .publish(.authenticating), .authenticate(.oauth, refresh: false)])
        #expect(m.handle(.authenticated) == [.startDeadline, .publish(.connecting), .dial(.oauth)])
        #expect(m.handle(.dialFailed(rejected)).contains(.authenticate(.oauth, refresh: true)))
        _ = m.handle(.authenticated)
        #expect(published(m.handle(.dialFailed(rejected))) == [.failed(rejected)])

        // A stored token was sent and refused: the login replaces it at once, and a fresh token
        // refused again is a failure (no second login).
        m = Machine()
        _ = try m.connect(.init(primary: .stored, fallbackToOAuth: true))
        _ = m.handle(.storedTokenLookedUp(found: true))
        #expect(m.handle(.dialFailed(rejected)).contains(.authenticate(.oauth, refresh: true)))
        _ = m.handle(.authenticated)
        #expect(published(m.handle(.dialFailed(rejected))) == [.failed(rejected)])

        // A network failure on the first dial is no reason to log in.
        m = Machine()
        _ = try m.connect(.init(primary: .stored, fallbackToOAuth: true, retry: .never))
        _ = m.handle(.storedTokenLookedUp(found: false))
        #expect(published(m.handle(.dialFailed(badCA))) == [.failed(badCA)])
        // The lookup event means nothing for another credential.
        m = Machine()
        _ = try m.connect(.init(primary: .serviceToken))
        #expect(m.handle(.storedTokenLookedUp(found: true)) == [])
    }

    @Test("fallback success: a rejected service token switches to OAuth once")
    func fallbackSuccess() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, fallbackToOAuth: true))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(rejected)) == [.cancelDeadline, .publish(.authenticating), .authenticate(.oauth, refresh: false)])
        #expect(m.handle(.authenticated) == [.startDeadline, .publish(.connecting), .dial(.oauth)])
        _ = m.handle(.dialSucceeded)
        _ = m.handle(.localReady(port: 7))
        #expect(m.state == .connected(localPort: 7))
    }

    @Test("fallback failure: OAuth failing too ends in failed with its reason")
    func fallbackFailure() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, fallbackToOAuth: true, retry: .standard))
        _ = m.handle(.authenticated)
        _ = m.handle(.dialFailed(rejected))
        let loginFailed = TunnelFailure(category: .authentication, isRetryable: false, message: "login cancelled")
        let actions = m.handle(.authenticationFailed(loginFailed))
        #expect(actions == [.cancelDeadline, .tearDown, .publish(.failed(loginFailed))])
    }

    @Test("no fallback unless asked: a rejected service token fails at once")
    func noSurpriseFallback() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, fallbackToOAuth: false))
        _ = m.handle(.authenticated)
        #expect(published(m.handle(.dialFailed(rejected))) == [.failed(rejected)])
    }

    @Test("OAuth redirected again: refresh the token once, then fail")
    func oauthRefreshOnce() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .oauth))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(rejected)) == [.cancelDeadline, .publish(.authenticating), .authenticate(.oauth, refresh: true)])
        _ = m.handle(.authenticated)
        #expect(published(m.handle(.dialFailed(rejected))) == [.failed(rejected)])
    }

    @Test("OAuth: the connect deadline stops while a person logs in and covers only the dial")
    func oauthDeadlineSkipsTheLogin() throws {
        var m = Machine()
        #expect(try m.connect(.init(primary: .oauth, retry: .standard))
                == [.cancelDeadline, .publish(.authenticating), .authenticate(.oauth, refresh: false)])
        #expect(m.handle(.authenticated) == [.startDeadline, .publish(.connecting), .dial(.oauth)])
        #expect(m.handle(.dialFailed(refused)) == [.cancelDeadline, .tearDown, .publish(.reconnecting(attempt: 2)),
                                                    .scheduleRetry(after: .seconds(1), attempt: 2)])
        #expect(m.handle(.retryDue) == [.cancelDeadline, .publish(.authenticating), .authenticate(.oauth, refresh: false)])
        // A deadline from an earlier phase, delivered late, cannot fail a login in progress.
        #expect(m.handle(.deadlinePassed(TunnelFailure.timedOut(host: "h", seconds: 15))) == [])
        #expect(m.state == .authenticating)
    }

    @Test("retry success: a retryable failure waits 1 s, then succeeds")
    func retrySuccess() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(refused)) == [.cancelDeadline, .tearDown, .publish(.reconnecting(attempt: 2)),
                                                    .scheduleRetry(after: .seconds(1), attempt: 2)])
        #expect(m.handle(.retryDue) == [.startDeadline, .publish(.authenticating), .authenticate(.serviceToken, refresh: false)])
        _ = m.handle(.authenticated)
        _ = m.handle(.dialSucceeded)
        _ = m.handle(.localReady(port: 9))
        #expect(m.state == .connected(localPort: 9))
    }

    @Test("retry exhaustion: 1 s, 5 s, 15 s, then failed")
    func retryExhaustion() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        var delays: [Duration] = []
        for _ in 0..<4 {
            _ = m.handle(.authenticated)
            for action in m.handle(.dialFailed(refused)) {
                if case .scheduleRetry(let seconds, _) = action { delays.append(seconds) }
            }
            _ = m.handle(.retryDue)
        }
        #expect(delays == [.seconds(1), .seconds(5), .seconds(15)])
        #expect(m.state == .failed(refused))
    }

    @Test("a non-retryable failure is not retried")
    func nonRetryable() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        _ = m.handle(.authenticated)
        #expect(m.handle(.dialFailed(badCA)) == [.cancelDeadline, .tearDown, .publish(.failed(badCA))])
    }

    @Test("timeout while connecting fails with Connection timed out.")
    func timeout() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .never))
        _ = m.handle(.authenticated)
        let timedOut = TunnelFailure.timedOut(host: "h", seconds: 15)
        #expect(m.handle(.deadlinePassed(timedOut)) == [.cancelDeadline, .tearDown, .publish(.failed(timedOut))])
        #expect(m.state.description.hasPrefix("failed(Connection timed out."))
        // The late dial answer changes nothing.
        #expect(m.handle(.dialSucceeded) == [])
    }

    @Test("disconnect while connecting, and late events after it")
    func disconnectWhileConnecting() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken))
        _ = m.handle(.authenticated)
        #expect(m.handle(.disconnectRequested) == [.cancelDeadline, .tearDown, .publish(.disconnected)])
        #expect(m.handle(.dialSucceeded) == [])
        #expect(m.handle(.localReady(port: 3)) == [])
        #expect(m.state == .disconnected)
    }

    @Test("disconnect while connected, while reconnecting; idempotent when idle or disconnected")
    func disconnectOtherStates() throws {
        var m = Machine()
        #expect(m.handle(.disconnectRequested) == [])
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        _ = m.handle(.authenticated)
        _ = m.handle(.dialSucceeded)
        _ = m.handle(.localReady(port: 5))
        #expect(m.handle(.disconnectRequested) == [.cancelDeadline, .tearDown, .publish(.disconnected)])
        #expect(m.handle(.disconnectRequested) == [])
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        _ = m.handle(.authenticationFailed(refused))
        #expect(m.handle(.disconnectRequested).contains(.tearDown))
        #expect(m.handle(.retryDue) == [])
        _ = try m.connect(.init(primary: .serviceToken, retry: .never))
        _ = m.handle(.authenticationFailed(badCA))
        #expect(m.handle(.disconnectRequested) == [.publish(.disconnected)])
    }

    @Test("local side failing ends in failed")
    func localFailure() throws {
        var m = Machine()
        _ = try m.connect(.init(primary: .serviceToken, retry: .standard))
        _ = m.handle(.authenticated)
        _ = m.handle(.dialSucceeded)
        let inUse = TunnelFailure.configuration(ConfigurationError("127.0.0.1:22 is already in use"))
        #expect(published(m.handle(.localFailed(inUse))) == [.failed(inUse)])
    }

    static let delayCases: [(RetryPolicy, [Int: Duration])] = [
        (RetryPolicy.standard, [2: .seconds(1), 3: .seconds(5), 4: .seconds(15)]),
        (RetryPolicy(maxAttempts: 6, delays: [.seconds(2)]), [2: .seconds(2), 3: .seconds(2), 6: .seconds(2)]),
        (RetryPolicy(maxAttempts: 2, delays: []), [2: Duration.zero]),
    ]

    @Test("retry policy delays", arguments: delayCases)
    func retryDelays(policy: RetryPolicy, expected: [Int: Duration]) {
        for (attempt, delay) in expected { #expect(policy.delay(beforeAttempt: attempt) == delay) }
        #expect(policy.delay(beforeAttempt: 1) == nil)
        #expect(policy.delay(beforeAttempt: policy.maxAttempts + 1) == nil)
        #expect(RetryPolicy(maxAttempts: 0, delays: [.seconds(-1)]).maxAttempts == 1)
        #expect(RetryPolicy(maxAttempts: 3, delays: [.seconds(-1)]).delays == [.zero])
        #expect(RetryPolicy.never.delay(beforeAttempt: 2) == nil)
    }

    @Test("state descriptions and terminality")
    func stateDescriptions() {
        let cases: [(ConnectionState, String, Bool)] = [
            (.idle, "idle", true), (.authenticating, "authenticating", false), (.connecting, "connecting", false),
            (.connected(localPort: 1), "connected(localPort: 1)", false),
            (.reconnecting(attempt: 2), "reconnecting(attempt: 2)", false), (.disconnected, "disconnected", true),
            (.failed(refused), "failed(\(refused.message))", true),
        ]
        for (state, text, terminal) in cases {
            #expect(state.description == text)
            #expect(state.isTerminal == terminal)
        }
    }
}

/// Issue 13.3: the "connection lost" event.
@Suite("session state machine: connection lost")
struct SessionConnectionLostTests {
    private func connected() -> SessionStateMachine {
        var machine = SessionStateMachine()
        _ = try! machine.connect(.init(primary: .serviceToken, retry: .never))
        _ = machine.handle(.authenticated)
        _ = machine.handle(.dialSucceeded)
        _ = machine.handle(.localReady(port: 2222))
        return machine
    }

    @Test("a clean end of the connected tunnel tears down and moves to disconnected")
    func cleanEnd() {
        var machine = connected()
        #expect(machine.handle(.connectionLost(nil)) == [.tearDown, .publish(.disconnected)])
        #expect(machine.state == .disconnected)
    }

    @Test("a lost tunnel tears down and moves to failed with the reason")
    func lost() {
        var machine = connected()
        let failure = TunnelEnd.reset(detail: "Connection reset by peer").failure(host: "h.example")!
        #expect(machine.handle(.connectionLost(failure)) == [.tearDown, .publish(.failed(failure))])
        #expect(machine.state == .failed(failure))
    }

    @Test("connection lost is ignored unless connected")
    func ignoredElsewhere() {
        var machine = SessionStateMachine()
        #expect(machine.handle(.connectionLost(nil)) == [])
        _ = try! machine.connect(.init(primary: .serviceToken, retry: .never))
        #expect(machine.handle(.connectionLost(nil)) == [])
        #expect(machine.state == .authenticating)
    }
}
