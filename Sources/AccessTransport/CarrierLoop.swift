internal import CCFWebSockets
internal import CCFShim
internal import CCFOpenSSL
#if canImport(Glibc)
import Glibc
#endif
import AccessCore
import Dispatch
import FoundationEssentials
import Logging

/// The libwebsockets event loop that carries every bridged connection of one configuration.
///
/// One thread owns the `lws_context` and runs `lws_service`; other threads hand it work through a
/// locked command queue and `lws_cancel_service`, drained on `LWS_CALLBACK_EVENT_WAIT_CANCELLED`.
/// Each bridge pairs a local socket with one WebSocket to the edge, all of it on this thread and
/// in one epoll set (which libwebsockets' loop watches): the bridge opens the TCP connection, does
/// the proxy `CONNECT`, TLS (on this loop's own `SSL_CTX`) and the HTTP upgrade itself, then
/// carries the bytes. The deadlines of every bridge share one timerfd in the same epoll set.
package final class CarrierLoop: @unchecked Sendable {
    /// Tunable sizes of the data path.
    package struct Tuning: Sendable {
        /// Largest WebSocket frame we send (and largest read of the local socket), in bytes.
        package var chunkSize = 256 << 10
        /// Queue size at which the producing side is paused.
        package var highWatermark = 1 << 20
        /// Queue size at which a paused producer resumes.
        package var lowWatermark = 256 << 10
        /// How long a spare connection waits for the next local connection: once a connection's
        /// WebSocket opens, the loop dials one more connection to the edge (TCP and TLS, no
        /// request) when it holds none, and the next connection it is given takes it over and
        /// needs only the upgrade's round trip. Nil: no spare (one connection, stdio mode).
        package var spareLifetime: Duration?
        /// Creates the defaults.
        package init() {}
    }

    private enum Command {
        case bridge(id: Int, fd: Int32, route: EdgeRoute, handshake: Handshake)
        case closeAll
        case stop
    }

    let configuration: CarrierConfiguration
    let logger: Logger
    let tuning: Tuning
    let onEvent: @Sendable (BridgeEvent) -> Void
    /// The upgrade headers of connections bridged without their own request, built once.
    let defaultHandshake: Handshake
    /// Where a `--connect-to`/`--resolve` pin sends every dial of this configuration, looked up once.
    private let pinned: (address: String, port: Int)?

    /// Guarded by `contextLock` for the threads that wake the loop; the service thread destroys it.
    private var context: OpaquePointer?
    private let contextLock = PThreadMutex()
    private(set) var vhost: OpaquePointer?
    /// The TLS client context of every connection of this loop (CA, resumption, verify policy).
    private(set) var tls: TLSClientContext!
    private let protocols: UnsafeMutablePointer<lws_protocols>
    private let protocolNames: [UnsafeMutablePointer<CChar>]
    /// Shared buffers of the data path (one service thread): room for a frame header, then one
    /// chunk read from a local socket; decrypted bytes read from a TLS stream; a control frame.
    let txBuffer: UnsafeMutableRawPointer
    let rxBuffer: UnsafeMutableRawPointer
    let rxCapacity = 256 << 10
    let controlBuffer: UnsafeMutableRawPointer
    /// Where this loop's bridges' TLS records are made before one `send()` takes them (room for
    /// a whole 256 KiB frame's records).
    let cipherScratch = LoopBuffer(capacity: 512 << 10)
    /// Where this loop's bridges receive the edge's records, up to 256 KiB per `recv()`.
    let recordScratch = LoopBuffer(capacity: 256 << 10)
    /// Masking keys and upgrade keys (the service thread only).
    var random = RandomPool()
    /// The epoll set of every established bridge's two sockets; itself watched by libwebsockets.
    private var epollFD: Int32 = -1
    private var epollEvents: UnsafeMutablePointer<epoll_event>
    private let epollBatch = 256
    /// The one timer of every bridge's deadlines (in the epoll set), armed to the earliest of them.
    private var timerFD: Int32 = -1
    private var deadlines = DeadlineHeap()
    private var armedDeadline: UInt64?
    /// The epoll tag of the timer (bridge tags are `id << 1 | side`, ids count from 1).
    private static let timerTag = UInt64.max

    private let commands = LockedBox<[Command]>([])
    /// Bridge ids, shared by the loops of one pool so that an id names one connection of all.
    private let ids: LockedBox<Int>
    /// Bridges handed to this loop and not yet ended, for the pool's choice of the least busy loop.
    private let load = LockedBox(0)
    private let resolver = AddressResolver()
    private var bridges: [Int: Bridge] = [:]
    /// The spare connection, dialling or parked (also in `bridges`, under an id of its own range).
    private var spare: Bridge?
    /// Where the next spare goes, once the loop has nothing else to do (set when a WebSocket opens).
    private var spareWanted: EdgeRoute?
    private var sparesMade = 0
    /// Spares' ids: far above any connection's, so that tags and timers never mix them up.
    private static let spareIDBase = 1 << 48
    private var stopping = false
    private let finished = DispatchSemaphore(value: 0)
    /// The service thread, once started.
    private var serviceThread: JoinableThread?
    private let threadStarted = LockedBox(false)

    /// The protocol of the epoll set, adopted as a raw file.
    static let rawProtocolName = "cfat-raw"

    /// Creates the loop; call `start()` before bridging.
    package convenience init(configuration: CarrierConfiguration, logger: Logger, tuning: Tuning = Tuning(),
                            onEvent: @escaping @Sendable (BridgeEvent) -> Void) {
        self.init(configuration: configuration, logger: logger, tuning: tuning, ids: LockedBox(0), onEvent: onEvent)
    }

    /// A loop of a pool: its bridge ids come from `ids`, shared with the pool's other loops.
    init(configuration: CarrierConfiguration, logger: Logger, tuning: Tuning, ids: LockedBox<Int>,
         onEvent: @escaping @Sendable (BridgeEvent) -> Void) {
        self.ids = ids
        self.configuration = configuration
        self.logger = logger
        self.tuning = tuning
        self.onEvent = onEvent
        self.defaultHandshake = Handshake(request: configuration.request, credential: configuration.credential)
        pinned = AddressOverride.route(host: configuration.dialHost, port: configuration.dialPort,
                                       resolve: configuration.resolveOverrides)
        txBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + tuning.chunkSize, alignment: 16)
        rxBuffer = .allocate(byteCount: rxCapacity, alignment: 16)
        controlBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + 128, alignment: 16)
        epollEvents = .allocate(capacity: epollBatch)
        protocolNames = [strdup(Self.rawProtocolName)!]
        protocols = .allocate(capacity: 2)
        protocols.initialize(repeating: lws_protocols(), count: 2)
        protocols[0].name = UnsafePointer(protocolNames[0])
        protocols[0].callback = carrierCallback
        // libwebsockets never reads the epoll set itself: no buffer of its own.
        protocols[0].rx_buffer_size = 128
    }

    deinit {
        if let context { lws_context_destroy(context) }   // only when the service thread never ran
        protocols.deinitialize(count: 2)
        protocols.deallocate()
        protocolNames.forEach { free($0) }
        txBuffer.deallocate()
        rxBuffer.deallocate()
        controlBuffer.deallocate()
        epollEvents.deallocate()
    }

    /// Creates the TLS context (or takes `sharedTLS`, another loop's of the same configuration)
    /// and the libwebsockets context, and starts the service thread.
    package func start() throws(TunnelFailure) {
        try start(sharing: nil)
    }

    func start(sharing sharedTLS: TLSClientContext?) throws(TunnelFailure) {
        if let sharedTLS {
            tls = sharedTLS
        } else {
            tls = try TLSClientContext(caFile: configuration.caFile,
                                       acceptsUnverified: configuration.connectTo?.skipVerification == true)
        }
        var info = lws_context_creation_info()
        // No LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT: libwebsockets does no TLS for us, so it takes no
        // process-wide OpenSSL state (ex-data indexes) either.
        info.options = UInt64(LWS_SERVER_OPTION_EXPLICIT_VHOSTS)
        info.port = CONTEXT_PORT_NO_LISTEN
        info.user = Unmanaged.passUnretained(self).toOpaque()
        HostProcess.quietenLibWebSocketsNotices()
        guard let ctx = HostProcess.keepingSIGPIPE({ lws_create_context(&info) }) else {
            if let exhausted = FileDescriptors.exhausted() { throw exhausted }
            throw TunnelFailure.internalError("libwebsockets could not create its context")
        }
        context = ctx

        let made: OpaquePointer? = "cfat-client".withCString { name in
            var v = lws_context_creation_info()
            v.port = CONTEXT_PORT_NO_LISTEN
            v.protocols = UnsafePointer(protocols)
            v.vhost_name = name
            return lws_create_vhost(ctx, &v)
        }
        guard let made else {
            throw TunnelFailure.internalError("libwebsockets could not create its vhost")
        }
        vhost = made

        // The data path's sockets are watched by one epoll set, which the lws loop watches.
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else {
            throw SystemError.current("epoll_create1()").tunnelFailure
        }
        var desc = lws_adopt_desc_t()
        desc.vh = made
        desc.type = LWS_ADOPT_RAW_FILE_DESC
        desc.fd.filefd = ep
        let adopted: OpaquePointer? = Self.rawProtocolName.withCString { name in
            desc.vh_prot_name = name
            return lws_adopt_descriptor_vhost_via_info(&desc)
        }
        guard adopted != nil else {
            Glibc.close(ep)
            throw TunnelFailure.internalError("libwebsockets could not watch the data path's epoll set")
        }
        epollFD = ep
        let timer = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard timer >= 0 else { throw SystemError.current("timerfd_create()").tunnelFailure }
        timerFD = timer
        watch(fd: timer, tag: Self.timerTag, events: EPOLLIN.rawValue)

        threadStarted.withLock { $0 = true }
        serviceThread = JoinableThread.start(name: "cfat carrier", stackSize: 1 << 20) { [self] in
            // A write to a socket whose peer is gone raises SIGPIPE in the writing thread. OpenSSL
            // writes without MSG_NOSIGNAL, so this thread blocks the signal (the write then fails
            // with EPIPE) instead of the library changing the process's disposition.
            HostProcess.blockSIGPIPEInThisThread()
            self.serviceLoop()
        }
    }

    private func serviceLoop() {
        guard let ctx = context else { finished.signal(); return }
        var stopDeadline: DispatchTime?
        while true {
            if stopping {
                // Let the Close frames go out, but never wait long for peers.
                if bridges.isEmpty { break }
                if let deadline = stopDeadline {
                    if DispatchTime.now() >= deadline { break }
                } else {
                    stopDeadline = .now() + 2
                }
            }
            if lws_service(ctx, 0) < 0 { break }
        }
        contextLock.lock()
        context = nil
        contextLock.unlock()
        // Destroying the context closes every remaining socket: when `shutdown()` returns, no
        // connection of this loop is open and the ports are free. Local sockets are ours.
        lws_context_destroy(ctx)
        epollFD = -1   // closed by libwebsockets with the context
        for bridge in bridges.values { bridge.abandon() }
        bridges.removeAll()
        if timerFD >= 0 { Glibc.close(timerFD) }
        timerFD = -1
        finished.signal()
    }

    /// Bridges a connected local socket to a new WebSocket. Resolves the edge address first (on the
    /// calling thread, cached), so a DNS failure is reported precisely and never blocks the loop.
    /// The loop owns `fd` from here on and closes it.
    ///
    /// `request` (with the `credential` it carries) replaces the configuration's upgrade headers for
    /// this connection only, e.g. with a fresher app token; its origin must be the configuration's.
    /// With `handBackOnRefusal`, an Access refusal of the credential gives the untouched socket
    /// back (``BridgeEvent/refused(id:socket:_:)``) instead of closing it; with
    /// `handBackWhenRetryable`, so does a retryable failure of the dial
    /// (``BridgeEvent/retryable(id:socket:attempt:_:)``, with `attempt`, this dial's number).
    @discardableResult
    package func bridge(socket fd: Int32, request: UpgradeRequest? = nil, credential: CredentialKind? = nil,
                       handBackOnRefusal: Bool = false, handBackWhenRetryable: Bool = false, attempt: Int = 1) -> Int {
        countBridge()
        return bridgeCounted(socket: fd, request: request, credential: credential, handBackOnRefusal: handBackOnRefusal,
                             handBackWhenRetryable: handBackWhenRetryable, attempt: attempt)
    }

    /// Counts one more bridge of this loop before it is handed over (the pool counts while it
    /// chooses, so that two connections at once see each other).
    func countBridge() { load.withLock { $0 += 1 } }

    /// `bridge(…)` for a bridge already counted by `countBridge()`.
    func bridgeCounted(socket fd: Int32, request: UpgradeRequest?, credential: CredentialKind?,
                       handBackOnRefusal: Bool, handBackWhenRetryable: Bool, attempt: Int) -> Int {
        var handshake = request.map { Handshake(request: $0, credential: credential ?? configuration.credential) }
            ?? defaultHandshake
        handshake.handBackOnRefusal = handBackOnRefusal
        handshake.handBackWhenRetryable = handBackWhenRetryable
        handshake.attempt = attempt
        let id = ids.withLock { n -> Int in n += 1; return n }
        switch route() {
        case .success(let route):
            post(.bridge(id: id, fd: fd, route: route, handshake: handshake))
        case .failure(let failure):
            load.withLock { $0 -= 1 }
            logger.debug("connection \(id) failed: \(failure.detail)")
            if handBackWhenRetryable, failure.isRetryable, failure.category == .transport {
                onEvent(.retryable(id: id, socket: fd, attempt: attempt, failure))
            } else {
                FileDescriptors.closeUnserved(fd)
                onEvent(.failed(id: id, failure))
            }
        }
        return id
    }

    /// Where a new connection goes: the edge's address (a `--connect-to`/`--resolve` pin, else the
    /// name resolved here), or the proxy's, which is then asked for the edge with `CONNECT`.
    private func route() -> Result<EdgeRoute, TunnelFailure> {
        let host = configuration.dialHost
        let port = configuration.dialPort
        if let proxy = configuration.proxy {
            // The proxy resolves the edge's name (a proxied network may have no DNS of its own).
            let target = HostText.withPort(pinned?.address ?? host, pinned?.port ?? port)
            return resolver.resolve(host: proxy.host, port: proxy.port).map {
                EdgeRoute(address: $0, port: proxy.port, tunnelTarget: target)
            }
        }
        if let pinned { return .success(EdgeRoute(address: pinned.address, port: pinned.port)) }
        return resolver.resolve(host: host, port: port).map { EdgeRoute(address: $0, port: port) }
    }

    /// Closes every bridged connection (each WebSocket with a Close frame) and stops the loop.
    /// Returns once the service thread has ended.
    package func shutdown() {
        guard threadStarted.withLock({ $0 }) else { return }
        post(.closeAll)
        post(.stop)
        // lws_service may sleep until its next timer: keep waking it until the thread is done.
        while finished.wait(timeout: .now() + .milliseconds(200)) == .timedOut {
            wake()
        }
        // Until the thread is gone, OpenSSL's per-thread cleanup included: a process that exits
        // right after must not race it.
        serviceThread?.join()
        threadStarted.withLock { $0 = false }
    }

    private func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        wake()
    }

    private func wake() {
        contextLock.lock()
        if let context { lws_cancel_service(context) }
        contextLock.unlock()
    }

    /// Runs on the service thread for every EVENT_WAIT_CANCELLED (once per protocol: idempotent).
    fileprivate func drainCommands() {
        let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
        for command in pending {
            switch command {
            case .bridge(let id, let fd, let route, let handshake):
                startBridge(id: id, fd: fd, route: route, handshake: handshake)
            case .closeAll:
                for bridge in bridges.values { bridge.closeBoth() }
            case .stop:
                stopping = true
            }
        }
    }

    private func startBridge(id: Int, fd: Int32, route: EdgeRoute, handshake: Handshake) {
        if let spare {
            self.spare = nil
            if spare.route == route {
                bridges.removeValue(forKey: spare.id)
                spare.rekey(to: id)
                bridges[id] = spare
                spare.adopt(localFD: fd, handshake: handshake)
                return
            }
            // The edge's address changed (DNS): the spare goes to the old one.
            spare.discardSpare(closeNotify: spare.dialStage == .parked)
        }
        let bridge = Bridge(id: id, localFD: fd, loop: self, handshake: handshake)
        bridges[id] = bridge
        bridge.dial(route: route)
    }

    /// A connection through `route` carries bytes: a spare follows when the loop is idle.
    func wantsSpare(route: EdgeRoute) {
        if tuning.spareLifetime != nil, spare == nil, !stopping { spareWanted = route }
    }

    /// Dials the spare asked for, if any (the loop has served everything that was ready).
    private func dialWantedSpare() {
        guard let route = spareWanted else { return }
        spareWanted = nil
        guard spare == nil, !stopping else { return }
        sparesMade += 1
        let made = Bridge(id: Self.spareIDBase + sparesMade, localFD: -1, loop: self, handshake: defaultHandshake)
        made.isSpare = true
        spare = made
        bridges[made.id] = made
        made.dial(route: route)
    }

    /// A spare was dropped (expired, closed by the edge, or the loop stops).
    func spareGone(_ bridge: Bridge) {
        bridges.removeValue(forKey: bridge.id)
        if spare === bridge { spare = nil }
        timerOwnerLeft(bridge.id)
    }

    /// How long a spare stays parked, in words ("30 s").
    var spareLifetimeText: String {
        let nanoseconds = spareLifetimeNanoseconds
        if nanoseconds % 1_000_000_000 == 0 { return "\(nanoseconds / 1_000_000_000) s" }
        return "\(nanoseconds / 1_000_000) ms"
    }

    /// How long a spare stays parked, in nanoseconds.
    var spareLifetimeNanoseconds: UInt64 {
        guard let lifetime = tuning.spareLifetime else { return 0 }
        let (seconds, attoseconds) = lifetime.components
        return UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000)
    }

    /// Called by a bridge once both of its sides are gone.
    func forget(_ bridge: Bridge) {
        if bridges.removeValue(forKey: bridge.id) != nil { load.withLock { $0 -= 1 } }
        timerOwnerLeft(bridge.id)
    }

    /// The bridge `id` is gone: when the timer waits for its deadline, it waits for the next live
    /// one instead (no wake-up for a bridge that is no more).
    private func timerOwnerLeft(_ id: Int) {
        guard deadlines.first?.id == id else { return }
        dropStaleDeadlines()
        armTimer(deadlines.first?.deadline)
    }

    /// Drops the entries at the heap's head that no longer stand for a bridge's deadline (the
    /// bridge is gone, or asked for another deadline since).
    private func dropStaleDeadlines() {
        while let next = deadlines.first {
            if let bridge = bridges[next.id], bridge.timerGeneration == next.generation { return }
            deadlines.removeFirst()
        }
    }

    /// Bridges handed to this loop that have not ended.
    var activeBridges: Int { load.withLock { $0 } }

    // MARK: Deadlines

    /// Calls `bridge.onTimer()` at `deadline` (monotonic nanoseconds) unless the bridge asked again
    /// since (a newer `generation`) or is gone.
    func schedule(bridge id: Int, generation: Int, at deadline: UInt64) {
        deadlines.push(DeadlineHeap.Entry(deadline: deadline, id: id, generation: generation))
        if armedDeadline.map({ deadline < $0 }) ?? true { armTimer(deadline) }
    }

    private func armTimer(_ deadline: UInt64?) {
        armedDeadline = deadline
        var spec = itimerspec()
        if let deadline {
            // Absolute CLOCK_MONOTONIC time, as `Bridge.now()` reads it; 0 would disarm.
            let at = max(deadline, 1)
            spec.it_value.tv_sec = Int(at / 1_000_000_000)
            spec.it_value.tv_nsec = Int(at % 1_000_000_000)
        }
        _ = timerfd_settime(timerFD, Int32(TFD_TIMER_ABSTIME), &spec, nil)
    }

    /// The timer fired: every due deadline is served, then the timer is armed for the next.
    private func serviceTimer() {
        var expirations: UInt64 = 0
        _ = read(timerFD, &expirations, MemoryLayout<UInt64>.size)
        let now = Bridge.now()
        while let next = deadlines.first, next.deadline <= now {
            deadlines.removeFirst()
            if let bridge = bridges[next.id], bridge.timerGeneration == next.generation { bridge.onTimer() }
        }
        dropStaleDeadlines()
        armTimer(deadlines.first?.deadline)
    }

    // MARK: The data path's epoll set

    func watch(fd: Int32, tag: UInt64, events: UInt32) {
        var event = epoll_event(events: events, data: epoll_data_t(u64: tag))
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            logger.error("\(SystemError.current("epoll_ctl(ADD, \(fd))"))")
        }
    }

    func modify(fd: Int32, tag: UInt64, events: UInt32) {
        var event = epoll_event(events: events, data: epoll_data_t(u64: tag))
        _ = epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event)
    }

    func unwatch(fd: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, &event)
    }

    /// The epoll set is readable: serve every ready socket (level-triggered), then dial the spare
    /// asked for, if any.
    fileprivate func serviceEpoll() {
        guard epollFD >= 0 else { return }
        while true {
            let n = Int(epoll_wait(epollFD, epollEvents, Int32(epollBatch), 0))
            if n <= 0 {
                dialWantedSpare()
                return
            }
            for i in 0..<n {
                let tag = epollEvents[i].data.u64
                let events = epollEvents[i].events
                if tag == Self.timerTag {
                    serviceTimer()
                    continue
                }
                guard let bridge = bridges[Int(tag >> 1)] else { continue }
                bridge.onEvent(tag & 1 == 0 ? .local : .edge, events: events)
            }
            // A spare waits until nothing is ready: what the new connection's peer sent first
            // goes out before it.
            if n < epollBatch, spareWanted == nil { return }
        }
    }
}

/// The one C entry point of the carrier's vhost: its epoll set became readable, or another thread
/// woke the loop.
private func carrierCallback(_ wsi: OpaquePointer?, _ reason: lws_callback_reasons,
                             _ user: UnsafeMutableRawPointer?, _ input: UnsafeMutableRawPointer?,
                             _ len: Int) -> Int32 {
    guard let wsi else { return 0 }
    switch reason {
    case LWS_CALLBACK_RAW_RX_FILE:
        if let raw = lws_context_user(lws_get_context(wsi)) {
            Unmanaged<CarrierLoop>.fromOpaque(raw).takeUnretainedValue().serviceEpoll()
        }
        return 0
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if let raw = lws_context_user(lws_get_context(wsi)) {
            Unmanaged<CarrierLoop>.fromOpaque(raw).takeUnretainedValue().drainCommands()
        }
        return 0
    default:
        return 0
    }
}

/// One connection's upgrade request and the credential it carries (for the messages of an
/// Access refusal).
struct Handshake: Sendable {
    let request: UpgradeRequest
    let credential: CredentialKind
    var handBackOnRefusal = false
    /// Give the local socket back when the dial fails in a way worth retrying.
    var handBackWhenRetryable = false
    /// Which dial of its local connection this is (1: the first).
    var attempt = 1

    init(request: UpgradeRequest, credential: CredentialKind) {
        self.request = request
        self.credential = credential
    }

    /// The headers as they may be logged.
    var redactedLines: [String] { request.redactedHeaderLines }
}
