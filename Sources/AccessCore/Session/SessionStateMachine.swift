/// The session's decisions as a value: events in, actions out, no I/O.
///
/// The shell (the session actor) performs each action and feeds back what happened as an event.
/// Transitions are deterministic; an event that makes no sense in the current state changes
/// nothing and asks for nothing, so a late callback (a dial finishing after `disconnect`) is
/// harmless.
package struct SessionStateMachine: Sendable, Equatable {
    /// Which credential an attempt uses.
    package enum Credential: Sendable, Equatable {
        /// The service token headers (or none, for a method without a credential).
        case serviceToken
        /// What the OAuth flow holds without a request or a person — a stored app token — or
        /// else nothing: the first dial of an OAuth session, which learns whether the origin
        /// wants Access at all (issue 17.7, as cloudflared dials first).
        case stored
        /// An OAuth app token (from the cache or a login).
        case oauth
    }

    /// What the session was asked to use.
    package struct Plan: Sendable, Equatable {
        /// The first credential to try.
        package let primary: Credential
        /// Try OAuth when Access rejects the first credential (off unless asked for, or the
        /// first credential is `.stored`).
        package let fallbackToOAuth: Bool
        /// Retries of retryable failures.
        package let retry: RetryPolicy
        /// A listener's first dial only checks the edge: when the edge cannot be reached (a
        /// retryable transport failure: DNS, refused, timed out, the edge down), the listener
        /// opens anyway and each local connection dials for itself (issue 26.1). A refused
        /// credential, a certificate or a configuration still fails the start.
        package let listensWhenEdgeUnreachable: Bool

        /// Creates a plan.
        package init(primary: Credential, fallbackToOAuth: Bool = false, retry: RetryPolicy = .standard,
                     listensWhenEdgeUnreachable: Bool = false) {
            self.primary = primary
            self.fallbackToOAuth = fallbackToOAuth && primary != .oauth
            self.retry = retry
            self.listensWhenEdgeUnreachable = listensWhenEdgeUnreachable
        }
    }

    /// Something that happened.
    package enum Event: Sendable, Equatable {
        /// `connect` was called.
        case connectRequested(Plan)
        /// The credential is at hand.
        case authenticated
        /// The `.stored` credential was looked up: `found` says whether a stored token goes with
        /// the dial (if Access refuses it, the login that follows replaces it).
        case storedTokenLookedUp(found: Bool)
        /// Getting the credential failed.
        case authenticationFailed(TunnelFailure)
        /// The WebSocket upgrade succeeded.
        case dialSucceeded
        /// The WebSocket could not be opened.
        case dialFailed(TunnelFailure)
        /// The local side is ready on this port (0 = a port-less stream).
        case localReady(port: UInt16)
        /// The local side could not be set up.
        case localFailed(TunnelFailure)
        /// The connect deadline passed while authenticating (service token) or connecting.
        case deadlinePassed(TunnelFailure)
        /// A scheduled retry is due.
        case retryDue
        /// `disconnect` was called.
        case disconnectRequested
        /// The connected tunnel ended by itself: `nil` for a clean end (a Close from either
        /// side), else the failure that ended it (reset, protocol violation, keepalive…).
        case connectionLost(TunnelFailure?)
    }

    /// What the shell must do, in order.
    package enum Action: Sendable, Equatable {
        /// Get a credential; `refresh` drops a cached OAuth token first (Access rejected it).
        case authenticate(Credential, refresh: Bool)
        /// Open the WebSocket with the current credential.
        case dial(Credential)
        /// Set up the local side (listener or stream).
        case openLocal
        /// Say that the edge cannot be reached yet (why), and that the listener opens anyway:
        /// `.openLocal` follows.
        case reportEdgeUnreachable(TunnelFailure)
        /// Start (or restart) the connect deadline (seconds come from the shell's configuration).
        case startDeadline
        /// Stop the connect deadline.
        case cancelDeadline
        /// Wait, then deliver `.retryDue`.
        case scheduleRetry(after: Duration, attempt: Int)
        /// Close the listener, every bridged connection and anything in flight.
        case tearDown
        /// Publish this state to subscribers.
        case publish(ConnectionState)
    }

    /// Why `connect` was refused.
    package enum Refusal: Error, Sendable, Equatable {
        /// A session is already in progress or up.
        case invalidState(ConnectionState)
    }

    /// The current state.
    package private(set) var state: ConnectionState = .idle
    private var plan = Plan(primary: .serviceToken, retry: .never)
    private var credential: Credential = .serviceToken
    private var attempt = 1
    private var fellBack = false
    private var refreshedOAuth = false
    private var storedTokenPresented = false
    /// `.openLocal` was asked for in this attempt: a late dial result asks for nothing more.
    private var localRequested = false

    /// A machine in `.idle`.
    package init() {}

    /// Starts a session. Throws, changing nothing, unless the state is terminal.
    package mutating func connect(_ plan: Plan) throws(Refusal) -> [Action] {
        guard state.isTerminal else { throw .invalidState(state) }
        return handle(.connectRequested(plan))
    }

    /// Feeds one event; returns the actions to perform, in order.
    package mutating func handle(_ event: Event) -> [Action] {
        switch (state, event) {
        case (let current, .connectRequested(let newPlan)):
            guard current.isTerminal else { return [] }
            plan = newPlan
            credential = newPlan.primary
            attempt = 1
            fellBack = false
            refreshedOAuth = false
            storedTokenPresented = false
            return authenticate(refresh: false)

        case (.authenticating, .storedTokenLookedUp(let found)) where credential == .stored:
            storedTokenPresented = found
            return move(to: .connecting) + [.dial(credential)]

        case (.authenticating, .authenticated):
            // An OAuth login may wait on a person: the connect deadline starts once it is done.
            return (credential == .oauth ? [.startDeadline] : []) + move(to: .connecting) + [.dial(credential)]

        case (.authenticating, .authenticationFailed(let failure)):
            return fail(failure)

        case (.connecting, .dialSucceeded):
            return openLocal()

        case (.connecting, .dialFailed(let failure)) where listensWhenEdgeUnreachable(failure),
             (.connecting, .deadlinePassed(let failure)) where listensWhenEdgeUnreachable(failure):
            guard !localRequested else { return [] }
            return [.reportEdgeUnreachable(failure)] + openLocal()

        case (.connecting, .dialFailed(let failure)):
            if failure.category == .authentication {
                if credential != .oauth, plan.fallbackToOAuth, !fellBack {
                    // A stored token Access refused is stale: the login replaces it, once.
                    let refresh = credential == .stored && storedTokenPresented
                    fellBack = true
                    credential = .oauth
                    refreshedOAuth = refresh
                    return authenticate(refresh: refresh)
                }
                if credential == .oauth, !refreshedOAuth {
                    // The edge redirected again: the stored app token is stale. Drop it, log in once more.
                    refreshedOAuth = true
                    return authenticate(refresh: true)
                }
            }
            return fail(failure)

        case (.connecting, .localReady(let port)):
            return [.cancelDeadline] + move(to: .connected(localPort: port))

        case (.connecting, .localFailed(let failure)):
            return fail(failure)

        case (.authenticating, .deadlinePassed(let failure)) where credential != .oauth,
             (.connecting, .deadlinePassed(let failure)):
            return fail(failure)

        case (.reconnecting, .retryDue):
            return authenticate(refresh: false)

        case (.idle, .disconnectRequested), (.disconnected, .disconnectRequested):
            return []

        case (.connected, .connectionLost(let failure)):
            return [.tearDown] + move(to: failure.map { .failed($0) } ?? .disconnected)

        case (.failed, .disconnectRequested):
            return move(to: .disconnected)

        case (_, .disconnectRequested):
            return [.cancelDeadline, .tearDown] + move(to: .disconnected)

        default:
            // Late or stray events (a dial finishing after disconnect, a retry after failure…).
            return []
        }
    }

    /// Moves to `.authenticating` with the current credential. A service token is at hand at once,
    /// so the connect deadline starts now; an OAuth login may wait on a person in a browser (it
    /// bounds its own wait), so the deadline stops until the token is there.
    private mutating func authenticate(refresh: Bool) -> [Action] {
        localRequested = false
        let deadline: Action = credential == .oauth ? .cancelDeadline : .startDeadline
        return [deadline] + move(to: .authenticating) + [.authenticate(credential, refresh: refresh)]
    }

    private mutating func openLocal() -> [Action] {
        guard !localRequested else { return [] }
        localRequested = true
        return [.openLocal]
    }

    /// Whether this failure of a listener's first dial lets the listener open all the same.
    private func listensWhenEdgeUnreachable(_ failure: TunnelFailure) -> Bool {
        plan.listensWhenEdgeUnreachable && failure.category == .transport && failure.isRetryable
    }

    private mutating func fail(_ failure: TunnelFailure) -> [Action] {
        if failure.isRetryable, let delay = plan.retry.delay(beforeAttempt: attempt + 1) {
            attempt += 1
            return [.cancelDeadline, .tearDown] + move(to: .reconnecting(attempt: attempt))
                + [.scheduleRetry(after: delay, attempt: attempt)]
        }
        return [.cancelDeadline, .tearDown] + move(to: .failed(failure))
    }

    private mutating func move(to next: ConnectionState) -> [Action] {
        state = next
        return [.publish(next)]
    }
}
