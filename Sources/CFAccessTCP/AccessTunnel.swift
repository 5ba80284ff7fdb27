import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// A tunnel to one Access-protected host, for apps that embed it: connect (a local port) or
/// open a stream (no port), watch the state, disconnect.
///
/// ```swift
/// let token = try ServiceToken(clientID: id, clientSecret: secret)
/// try await withAccessTunnel(options: AccessTunnel.Options(connectTimeout: .seconds(10))) { tunnel in
///     let port = try await tunnel.connect(hostname: "ssh.example.com", method: .serviceToken(token))
///     // point an SSH client at 127.0.0.1:port
/// }   // disconnected here, whatever happened inside
/// ```
///
/// Cancelling the task that awaits ``connect(hostname:method:)`` or
/// ``openStream(hostname:method:)`` stops them, a login included. The session's decisions live
/// in a state machine of the package's core (a value, no I/O); this actor performs its actions
/// and feeds back what happened.
public actor AccessTunnel {
    /// What a session needs besides the hostname and credential. Every option has a default and
    /// can be set in the initialiser; ``validate()`` checks the ranges (``connect(hostname:method:)``
    /// calls it first).
    public struct Options: Sendable {
        /// Dial another address than the hostname (tests, private edges).
        public var connectTo: ConnectTarget?
        /// A PEM file of CA certificates to trust instead of the system store.
        public var caFile: String?
        /// Extra upgrade headers.
        public var extraHeaders: [HeaderField]
        /// `Cf-Access-Jump-Destination` (bastion mode): the `host:port` the edge should reach.
        public var destination: String?
        /// The local address of ``AccessTunnel/connect(hostname:method:)``'s listener; port 0
        /// asks the system for a free one.
        public var listenAddress: ListenAddress
        /// Time allowed for authenticating with a credential at hand and opening the WebSocket
        /// (a login in a browser has its own bounds). Between 1 s and 10 min.
        public var connectTimeout: Duration
        /// Retries of retryable failures (the network, the edge): of `connect`'s dial, and of each
        /// dial of a listener's connections, which wait meanwhile.
        public var retry: RetryPolicy
        /// Limits of the local listener.
        public var limits: ListenerLimits
        /// Silence after which an idle tunnel is pinged (`.zero`: never). At most 24 h; whole
        /// seconds (a fraction counts as a second more).
        public var keepaliveInterval: Duration
        /// `HOST:PORT:ADDR` overrides for the WebSocket dial, like curl's `--resolve`.
        public var resolveOverrides: [ResolveOverride]
        /// An HTTP proxy for the WebSocket dial (the tool reads `HTTPS_PROXY` and `NO_PROXY` into it).
        public var proxy: ProxySettings?
        /// How long a tunnel keeps delivering the edge's bytes after the local side finished
        /// sending (half-close), unless the edge closes first; `.zero` closes at once. At most 1 h.
        public var halfCloseLinger: Duration
        /// A listener whose first dial finds the edge unreachable (DNS, refused, timed out, the
        /// edge or origin down) listens all the same, says so once, and each local connection dials
        /// the edge for itself, as cloudflared's listener does; false fails `connect` instead. A
        /// refused credential, a bad certificate or a wrong setting fails `connect` either way.
        public var listensWhenEdgeUnreachable: Bool
        /// Pinned public keys of the edge (curl's `sha256//` pins): a dial succeeds only when the
        /// edge's leaf certificate or another certificate of its chain carries one of them, on
        /// top of the usual certificate checks. Empty: no pinning. The login's HTTPS requests to
        /// the same host are pinned too (``AccessLoginConfiguration/pins``).
        public var pins: [PublicKeyPin]
        /// A listening socket handed over (systemd socket activation) to accept on instead of
        /// binding ``listenAddress``; nil: bind it.
        public var listeningSocket: ListeningSocket?

        /// The library's defaults: 127.0.0.1 on a free port, 15 s to connect, retries after
        /// 1/5/15 s, one connection, keepalive every 30 s, a 5 s half-close linger, and a
        /// listener that fails `connect` when the edge cannot be reached.
        public init(connectTo: ConnectTarget? = nil, caFile: String? = nil, extraHeaders: [HeaderField] = [],
                    destination: String? = nil, listenAddress: ListenAddress = .loopbackAnyPort,
                    connectTimeout: Duration = .seconds(15), retry: RetryPolicy = .standard,
                    limits: ListenerLimits = .singleConnection, keepaliveInterval: Duration = .seconds(30),
                    resolveOverrides: [ResolveOverride] = [], proxy: ProxySettings? = nil,
                    halfCloseLinger: Duration = .seconds(5), listensWhenEdgeUnreachable: Bool = false,
                    pins: [PublicKeyPin] = [], listeningSocket: ListeningSocket? = nil) {
            self.connectTo = connectTo
            self.caFile = caFile
            self.extraHeaders = extraHeaders
            self.destination = destination
            self.listenAddress = listenAddress
            self.connectTimeout = connectTimeout
            self.retry = retry
            self.limits = limits
            self.keepaliveInterval = keepaliveInterval
            self.resolveOverrides = resolveOverrides
            self.proxy = proxy
            self.halfCloseLinger = halfCloseLinger
            self.listensWhenEdgeUnreachable = listensWhenEdgeUnreachable
            self.pins = pins
            self.listeningSocket = listeningSocket
        }
    }

    /// A listener; a stream (a socket for the caller); or a stream whose local side is the
    /// caller's `LocalPair`, served by the carrier itself.
    private enum Mode: Equatable { case listener, stream(joining: LocalPair?) }

    private let options: Options
    private let logger: Logger
    private let transport: any TunnelTransport
    private let clock: any WallClock
    private let states: StateBroadcaster
    private var machine = SessionStateMachine()

    private var origin: OriginURL?
    private var method: AuthenticationMethod = .none
    private var mode: Mode = .listener
    private var appToken: String?
    private var serving: (any ServingTunnel)?
    private var stream: TunnelStream?
    private var pendingStream: (TunnelStream, any ServingTunnel)?
    /// The running listener's service token, replaceable (``replaceServiceToken(_:)``).
    private var serviceTokenAuthorizer: ServiceTokenAuthorizer?
    private var work: [Task<Void, Never>] = []
    private var deadline: Task<Void, Never>?
    private var generation = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []
    /// The OAuth flow's work while it runs (a login may be waiting on a person): cancelled and
    /// awaited by a teardown, so that `disconnect()` returns with the login over.
    private var loginWork: (generation: Int, task: Task<Void, Never>)?
    /// Why a connect in progress was stopped (`disconnect()` or the caller's cancellation).
    private var stopped: TunnelFailure?
    /// Counts `connect`/`openStream` calls (retries within one call do not count).
    private var connectCalls = 0
    /// Why the last connected tunnel ended by itself (nil while it runs or after `disconnect`).
    public private(set) var lastEnd: TunnelEnd?

    /// Creates a session in `.idle`.
    /// - Parameters:
    ///   - options: everything but the hostname and the credential.
    ///   - logger: where the session logs (a failed connection of the listener at warning level;
    ///     no secret at any level).
    ///   - clock: waits for retries and the connect deadline (default: real time).
    public init(options: Options = Options(), logger: Logger = Logger(label: "cf-access-tcp"),
                clock: any WallClock = SystemWallClock()) {
        self.init(options: options, logger: logger,
                  transport: LiveTunnelTransport(logger: logger) { message in logger.warning("\(message)") }, clock: clock)
    }

    /// A session on another transport: the tool's (which reports failed connections on
    /// stderr), or a test's scripted double.
    package init(options: Options = Options(), logger: Logger, transport: any TunnelTransport,
                 clock: any WallClock = SystemWallClock()) {
        self.options = options
        self.logger = logger
        self.transport = transport
        self.clock = clock
        self.states = StateBroadcaster(initial: .idle)
    }

    /// The session's states: the current one first, then every change. Each access gives a new
    /// stream; it finishes when the session is released.
    public nonisolated var state: AsyncStream<ConnectionState> { states.subscribe() }

    /// The current state.
    public nonisolated var currentState: ConnectionState { states.current }

    /// Authenticates, proves the edge accepts the credential, binds the local listener and
    /// returns its port.
    ///
    /// Cancelling the calling task stops the connect (the dial, a login in progress with its
    /// polls and lock) and throws kind `.loginCancelled` during a login, `.cancelled` otherwise;
    /// the session is then `.disconnected`. ``disconnect()`` from another task does the same.
    ///
    /// - Throws: ``TunnelFailure`` (category `.invalidState` if a session is already in progress
    ///   or up; the state then does not change).
    public func connect(hostname: String, method: AuthenticationMethod) async throws(TunnelFailure) -> UInt16 {
        try await start(hostname: hostname, method: method, mode: .listener)
        guard case .connected(let port) = machine.state, let _ = serving else {
            throw failureOfCurrentState()
        }
        return port
    }

    /// Opens the tunnel as a byte stream with no TCP port at all: async reads and writes for
    /// Swift, or the descriptor for libssh2 and SwiftNIO (``TunnelStream``). The session is
    /// `.connected(localPort: 0)` until `disconnect()` or the tunnel ends.
    ///
    /// Cancellation and `disconnect()` stop it as they stop ``connect(hostname:method:)``.
    public func openStream(hostname: String, method: AuthenticationMethod) async throws(TunnelFailure) -> TunnelStream {
        try await start(hostname: hostname, method: method, mode: .stream(joining: nil))
        guard case .connected = machine.state, let stream else { throw failureOfCurrentState() }
        return stream
    }

    /// Opens the tunnel as ``openStream(hostname:method:)`` does, with `pair`'s two descriptors
    /// as its local side (stdin and stdout in ProxyCommand mode): the carrier reads and writes
    /// them itself, with no socket between. Every dial works on duplicates of them, closed when
    /// the tunnel ends; so that the far ends see that end, point the caller's own at
    /// `/dev/null` once this returns. The stream returned has no descriptor; its ``TunnelStream/ended``
    /// says how the tunnel ended. `LocalPair.canServe(input:output:)` must hold.
    package func openStream(hostname: String, method: AuthenticationMethod, joining pair: LocalPair) async throws(TunnelFailure) -> TunnelStream {
        try await start(hostname: hostname, method: method, mode: .stream(joining: pair))
        guard case .connected = machine.state, let stream else { throw failureOfCurrentState() }
        return stream
    }

    /// Replaces the service token of a session that uses one (a secret rotated on disk): the
    /// listener's new connections, and any later dial, carry `token`; open connections keep the
    /// one they opened with. Returns whether the session uses a service token (else nothing
    /// changes).
    @discardableResult
    public func replaceServiceToken(_ token: ServiceToken) -> Bool {
        switch method {
        case .serviceToken: method = .serviceToken(token)
        case .serviceTokenWithOAuthFallback(_, let flow): method = .serviceTokenWithOAuthFallback(token, flow)
        case .oauth, .accessToken, .none: return false
        }
        serviceTokenAuthorizer?.replace(with: token)
        return true
    }

    /// Closes the listener and every bridged connection (each WebSocket with a Close frame) and
    /// returns once they are closed and the port is free. A connect in progress stops: a login
    /// ends (its polls stop, its login lock is released before this returns) and the connect
    /// throws kind `.loginCancelled`, or `.cancelled` during a dial. Idempotent.
    public func disconnect() async {
        noteStop()
        let login = loginWork?.task
        await perform(machine.handle(.disconnectRequested))
        if let login {
            // The teardown cancelled it: it unwinds (its poll aborted, its lock released) before
            // disconnect returns; bounded, in case an app's flow ignores cancellation.
            let done = OneShot<Void>()
            Task { await login.value; done.signal() }
            if await done.value(within: 10) == nil {
                logger.warning("the OAuth flow did not stop within 10 s of its cancellation")
            }
        }
        wakeWaiters()
    }

    /// The caller's task was cancelled while connect or openStream call number `call` ran.
    private func cancelConnect(call: Int) async {
        guard call == connectCalls, !machine.state.isTerminal, !isConnected else { return }
        logger.debug("connect cancelled by its task")
        await disconnect()
    }

    /// Notes why a connect in progress stops: a login was running, or a dial.
    private func noteStop() {
        guard !machine.state.isTerminal, !isConnected, let origin else { return }
        let loginRunning = machine.state == .authenticating && loginWork?.generation == generation
        stopped = loginRunning ? .loginCancelled(host: origin.host) : .cancelled("connecting to \(origin.host)")
    }

    // MARK: Driving the machine

    private func start(hostname: String, method: AuthenticationMethod, mode: Mode) async throws(TunnelFailure) {
        do {
            try options.validate()
        } catch {
            throw TunnelFailure.configuration(ConfigurationError("The tunnel's options are out of range: \(error)"))
        }
        let origin: OriginURL
        do {
            origin = try OriginURL.parse(hostname)
        } catch {
            throw TunnelFailure.configuration(error)
        }
        let plan = SessionStateMachine.Plan(primary: method.plan.primary, fallbackToOAuth: method.plan.fallback,
                                            retry: options.retry,
                                            listensWhenEdgeUnreachable: mode == .listener && options.listensWhenEdgeUnreachable)
        let actions: [SessionStateMachine.Action]
        do {
            actions = try machine.connect(plan)
        } catch {
            throw TunnelFailure.invalidState("connect was called while the tunnel is \(currentState); disconnect first")
        }
        self.origin = origin
        self.method = method
        self.mode = mode
        self.appToken = nil
        self.stream = nil
        self.lastEnd = nil
        self.stopped = nil
        generation += 1
        connectCalls += 1
        let call = connectCalls
        await withTaskCancellationHandler {
            await perform(actions)
            // Wait until the machine settles: connected, failed or disconnected.
            while !(machine.state.isTerminal || isConnected) {
                await withCheckedContinuation { waiters.append($0) }
            }
        } onCancel: {
            Task { await self.cancelConnect(call: call) }
        }
    }

    private var isConnected: Bool {
        if case .connected = machine.state { return true }
        return false
    }

    private func failureOfCurrentState() -> TunnelFailure {
        switch machine.state {
        case .failed(let failure): return failure
        case .disconnected: return stopped ?? TunnelFailure.cancelled("the connect was stopped by disconnect()")
        default: return TunnelFailure.internalError("the tunnel ended in state \(machine.state)")
        }
    }

    private func feed(_ event: SessionStateMachine.Event, generation: Int) async {
        guard generation == self.generation else { return }   // from an attempt that no longer matters
        await perform(machine.handle(event))
        wakeWaiters()
    }

    private func wakeWaiters() {
        let pending = waiters
        waiters = []
        pending.forEach { $0.resume() }
    }

    private func perform(_ actions: [SessionStateMachine.Action]) async {
        for action in actions {
            switch action {
            case .publish(let state):
                logger.debug("tunnel state: \(state)")
                states.publish(state)
            case .startDeadline:
                startDeadline()
            case .cancelDeadline:
                deadline?.cancel()
                deadline = nil
            case .authenticate(let credential, let refresh):
                authenticate(credential, refresh: refresh)
            case .dial(let credential):
                dial(credential)
            case .openLocal:
                openLocal()
            case .reportEdgeUnreachable(let failure):
                logger.warning("the edge is not reachable yet (\(failure.message)); listening all the same: each local connection dials the edge when it comes")
            case .scheduleRetry(let delay, let attempt):
                logger.info("retrying in \(delay) (attempt \(attempt))")
                let generation = self.generation
                let clock = self.clock
                work.append(Task {
                    guard await clock.sleep(for: delay) else { return }
                    await self.feed(.retryDue, generation: generation)
                })
            case .tearDown:
                await tearDown()
            }
        }
    }

    private func startDeadline() {
        deadline?.cancel()
        let generation = self.generation
        let clock = self.clock
        let timeout = options.connectTimeout
        let host = origin?.host ?? "the edge"
        deadline = Task {
            guard await clock.sleep(for: timeout) else { return }
            await self.feed(.deadlinePassed(.timedOut(host: host, seconds: timeout.wholeSecondsRoundedUp)), generation: generation)
        }
    }

    private func authenticate(_ credential: SessionStateMachine.Credential, refresh: Bool) {
        let generation = self.generation
        if credential == .stored {
            // The first dial of an OAuth session goes out with what the flow has stored, or with
            // nothing: only the Access login redirect starts discovery and a login (issue 17.7).
            let flow = oauthFlow
            guard let origin else { return }
            work.append(Task {
                let token = await flow?.storedAppToken(for: origin)
                await self.storedTokenLookedUp(token, generation: generation)
            })
            return
        }
        guard credential == .oauth else {
            work.append(Task { await self.feed(.authenticated, generation: generation) })
            return
        }
        guard let flow = oauthFlow else {
            work.append(Task {
                await self.feed(.authenticationFailed(.internalError("OAuth was chosen without a flow")), generation: generation)
            })
            return
        }
        guard let origin else { return }
        let task = Task {
            do throws(TunnelFailure) {
                let token = try await flow.appToken(for: origin, refresh: refresh)
                await self.tokenArrived(token, generation: generation)
            } catch {
                await self.feed(.authenticationFailed(error), generation: generation)
            }
        }
        loginWork = (generation, task)
        work.append(task)
    }

    /// Where OAuth tokens come from: the method's flow, or the fixed token.
    private var oauthFlow: (any OAuthFlow)? {
        if case .accessToken(let token) = method { return FixedTokenFlow(token: token) }
        return method.flow
    }

    private func storedTokenLookedUp(_ token: String?, generation: Int) async {
        guard generation == self.generation else { return }
        appToken = token
        logger.debug(token == nil ? "dialling without a credential first" : "dialling with the stored app token first")
        await feed(.storedTokenLookedUp(found: token != nil), generation: generation)
    }

    private func tokenArrived(_ token: String?, generation: Int) async {
        guard generation == self.generation else { return }
        appToken = token
        await feed(.authenticated, generation: generation)
    }

    private func carrierConfiguration(_ credential: SessionStateMachine.Credential) throws(TunnelFailure) -> CarrierConfiguration {
        guard let origin else { throw TunnelFailure.internalError("no origin") }
        let serviceToken = credential == .serviceToken ? method.serviceToken : nil
        let accessToken = credential == .serviceToken ? nil : appToken
        let request = try Self.upgradeRequest(origin: origin, options: options,
                                              serviceToken: serviceToken, accessToken: accessToken)
        let kind: CredentialKind = serviceToken != nil ? .serviceToken : (accessToken != nil ? .accessToken : .none)
        var configuration = CarrierConfiguration(
            request: request, connectTo: options.connectTo, caFile: options.caFile, credential: kind,
            handshakeTimeoutSeconds: max(1, options.connectTimeout.wholeSecondsRoundedUp),
            keepaliveSeconds: options.keepaliveInterval.wholeSecondsRoundedUp,
            resolveOverrides: options.resolveOverrides, proxy: options.proxy)
            .withHalfCloseLinger(options.halfCloseLinger.secondsValue)
        configuration.pins = options.pins
        return configuration
    }

    /// The upgrade request for `origin` with the session's options and one credential.
    private static func upgradeRequest(origin: OriginURL, options: Options, serviceToken: ServiceToken?,
                                       accessToken: String?) throws(TunnelFailure) -> UpgradeRequest {
        do throws(ConfigurationError) {
            return try RequestBuilder.upgradeRequest(
                origin: origin, userAgent: Version.userAgent, serviceToken: serviceToken, accessToken: accessToken,
                destination: options.destination, extraHeaders: options.extraHeaders)
        } catch {
            throw TunnelFailure.configuration(error)
        }
    }

    private func dial(_ credential: SessionStateMachine.Credential) {
        let generation = self.generation
        let configuration: CarrierConfiguration
        do {
            configuration = try carrierConfiguration(credential)
        } catch {
            work.append(Task { await self.feed(.dialFailed(error), generation: generation) })
            return
        }
        let transport = self.transport
        switch mode {
        case .listener:
            work.append(Task {
                if let failure = await transport.probe(configuration) {
                    await self.feed(.dialFailed(failure), generation: generation)
                } else {
                    await self.feed(.dialSucceeded, generation: generation)
                }
            })
        case .stream(let pair):
            work.append(Task {
                do throws(TunnelFailure) {
                    let opened = try await transport.openStream(configuration, joining: pair)
                    await self.streamOpened(opened, generation: generation)
                } catch {
                    await self.feed(.dialFailed(error), generation: generation)
                }
            })
        }
    }

    private func streamOpened(_ opened: (TunnelStream, any ServingTunnel), generation: Int) async {
        guard generation == self.generation, machine.state == .connecting else {
            opened.0.close()
            await opened.1.close()
            return
        }
        pendingStream = opened
        await feed(.dialSucceeded, generation: generation)
    }

    private func openLocal() {
        let generation = self.generation
        switch mode {
        case .stream:
            guard let (stream, serving) = pendingStream else { return }
            pendingStream = nil
            self.stream = stream
            self.serving = serving
            work.append(Task {
                await self.feed(.localReady(port: 0), generation: generation)
                await self.watchEndAfterReady(of: serving, generation: generation)
            })
        case .listener:
            var configuration: CarrierConfiguration
            do {
                configuration = try carrierConfiguration(currentCredential)
            } catch {
                work.append(Task { await self.feed(.localFailed(error), generation: generation) })
                return
            }
            // Each connection's dial is retried as the session's is, while the connection waits.
            configuration.connectionRetry = options.retry
            let transport = self.transport
            let address: ListenPlace = options.listeningSocket.map { .socket($0) } ?? .address(options.listenAddress)
            let limits = options.limits
            let authorizer = connectionAuthorizer()
            work.append(Task {
                do throws(TunnelFailure) {
                    let serving = try await transport.serve(configuration, on: address, limits: limits,
                                                            authorizer: authorizer)
                    await self.listenerReady(serving, generation: generation)
                } catch {
                    await self.feed(.localFailed(error), generation: generation)
                }
            })
        }
    }

    /// With an OAuth token, every connection of the listener asks the flow for the current token
    /// (and refreshes it once if Access refuses it); with a service token every connection takes
    /// the current one (``replaceServiceToken(_:)``), never dialled again on a refusal.
    private func connectionAuthorizer() -> (any ConnectionAuthorizer)? {
        if currentCredential == .serviceToken, let token = method.serviceToken, let origin {
            let options = self.options
            let authorizer = ServiceTokenAuthorizer(token: token) { (token: ServiceToken) throws(TunnelFailure) in
                try Self.upgradeRequest(origin: origin, options: options, serviceToken: token, accessToken: nil)
            }
            serviceTokenAuthorizer = authorizer
            return authorizer
        }
        guard currentCredential == .oauth, let origin, let flow = oauthFlow else { return nil }
        let options = self.options
        return OAuthConnectionAuthorizer(flow: flow, origin: origin) { (token: String?) throws(TunnelFailure) in
            try Self.upgradeRequest(origin: origin, options: options, serviceToken: nil, accessToken: token)
        }
    }

    /// The credential the last dial used: OAuth once a token is at hand, else the service token.
    private var currentCredential: SessionStateMachine.Credential {
        appToken != nil ? .oauth : .serviceToken
    }

    private func listenerReady(_ serving: any ServingTunnel, generation: Int) async {
        guard generation == self.generation, machine.state == .connecting else {
            await serving.close()
            return
        }
        self.serving = serving
        await feed(.localReady(port: serving.port), generation: generation)
        watchEnd(of: serving, generation: generation)
    }

    /// Feeds `.connectionLost` once the tunnel ends by itself (the stream's WebSocket closed, or
    /// a single-connection listener's connection ended).
    private func watchEnd(of serving: any ServingTunnel, generation: Int) {
        let host = origin?.host ?? "the edge"
        work.append(Task {
            guard let end = await serving.ended() else { return }
            await self.tunnelEnded(end, host: host, generation: generation)
        })
    }

    private func watchEndAfterReady(of serving: any ServingTunnel, generation: Int) async {
        watchEnd(of: serving, generation: generation)
    }

    private func tunnelEnded(_ end: TunnelEnd, host: String, generation: Int) async {
        guard generation == self.generation, end != .shutdown else { return }
        logger.debug("tunnel ended: \(end)")
        lastEnd = end
        // The stream is the caller's now: what the edge sent before the end is still in it, to
        // be read (and the end's failure reported by its reads).
        stream = nil
        await feed(.connectionLost(end.failure(host: host)), generation: generation)
    }

    private func tearDown() async {
        deadline?.cancel()
        deadline = nil
        generation += 1
        work.forEach { $0.cancel() }
        work.removeAll()
        loginWork = nil
        if let (stream, serving) = pendingStream {
            pendingStream = nil
            stream.close()
            await serving.close()
        }
        stream?.close()
        stream = nil
        if let serving {
            self.serving = nil
            await serving.close()
        }
    }
}

/// Fans the state out to any number of subscribers, current state first.
final class StateBroadcaster: Sendable {
    private struct Subscribers {
        var value: ConnectionState
        var continuations: [UUID: AsyncStream<ConnectionState>.Continuation] = [:]
    }

    private let subscribers: LockedBox<Subscribers>

    init(initial: ConnectionState) { subscribers = LockedBox(Subscribers(value: initial)) }

    deinit { subscribers.withLock { $0.continuations.values.forEach { $0.finish() } } }

    var current: ConnectionState { subscribers.withLock { $0.value } }

    func publish(_ state: ConnectionState) {
        let targets = subscribers.withLock { s in
            s.value = state
            return Array(s.continuations.values)
        }
        targets.forEach { $0.yield(state) }
    }

    func subscribe() -> AsyncStream<ConnectionState> {
        AsyncStream(bufferingPolicy: .unbounded) { continuation in
            let id = UUID()
            // The current state goes first, under the lock, so no published state can come
            // before it.
            subscribers.withLock { s in
                continuation.yield(s.value)
                s.continuations[id] = continuation
            }
            continuation.onTermination = { [weak self] _ in
                self?.subscribers.withLock { $0.continuations[id] = nil }
            }
        }
    }
}
