internal import CCFShim
internal import CCFOpenSSL
#if canImport(Glibc)
import Glibc
#endif
import AccessCore
import Dispatch
import FoundationEssentials
import Logging

/// The event loop that carries every bridged connection of one configuration.
///
/// One thread waits in `epoll_wait` on the loop's epoll set; other threads hand it work through a
/// locked command queue and an eventfd in the same set, drained when it is readable. Each bridge
/// pairs a local socket with one WebSocket to the edge, all of it on this thread and in that
/// epoll set: the bridge opens the TCP connection, does the proxy `CONNECT`, TLS (on this loop's
/// own `SSL_CTX`) and the HTTP upgrade itself, then carries the bytes. The deadlines of every
/// bridge share one timerfd in the same epoll set.
package final class CarrierLoop: @unchecked Sendable {
    /// Tunable sizes of the data path.
    package struct Tuning: Sendable {
        /// Largest WebSocket frame we send (and largest read of the local socket), in bytes.
        package var chunkSize = 256 << 10
        /// Queue size at which the producing side is paused.
        package var highWatermark = 1 << 20
        /// Queue size at which a paused producer resumes.
        package var lowWatermark = 256 << 10
        /// How long a spare connection waits for the next local connection: once a connection has
        /// delivered the edge's first bytes, the loop dials one more connection to the edge (TCP
        /// and TLS, no request) when it holds none, and the next connection it is given takes it
        /// over and needs only the upgrade's round trip. Nil: no spare (one connection, stdio mode).
        package var spareLifetime: Duration?
        /// Creates the defaults.
        package init() {}
    }

    private enum Command {
        /// `output`: a `LocalPair`'s output (`fd` is its input), or -1 when `fd` is a socket.
        case bridge(id: Int, fd: Int32, output: Int32, names: LocalNames, route: EdgeRoute, handshake: Handshake)
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

    /// The eventfd other threads wake the loop with; guarded by `wakeLock`, the service thread
    /// closes it when it ends.
    private var wakeFD: Int32 = -1
    private let wakeLock = PThreadMutex()
    /// The TLS client context of every connection of this loop (CA, resumption, verify policy).
    private(set) var tls: TLSClientContext!
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
    /// The frame payloads one pass over `rxBuffer` found, for one `sendmsg()` to the local socket.
    let localBatch = SendBatch()
    /// Masking keys and upgrade keys (the service thread only).
    var random = RandomPool()
    /// The epoll set of every bridge's sockets, the timer and the wake-up eventfd.
    private var epollFD: Int32 = -1
    private var epollEvents: UnsafeMutablePointer<epoll_event>
    private let epollBatch = 256
    /// The one timer of every bridge's deadlines (in the epoll set), armed to the earliest of them.
    private var timerFD: Int32 = -1
    private var deadlines = DeadlineHeap()
    private var armedDeadline: UInt64?
    /// The epoll tags of the timer and of the wake-up eventfd (bridge tags are `id << 2 | side`,
    /// ids count from 1).
    private static let timerTag = UInt64.max
    private static let wakeTag = UInt64.max - 1

    private let commands = LockedBox<[Command]>([])
    /// Bridge ids, shared by the loops of one pool so that an id names one connection of all.
    private let ids: LockedBox<Int>
    /// Bridges handed to this loop and not yet ended, for the pool's choice of the least busy loop.
    private let load = LockedBox(0)
    private let resolver = AddressResolver()
    private var bridges: [Int: Bridge] = [:]
    /// The spare connection, dialling or parked (also in `bridges`, under an id of its own range).
    private var spare: Bridge?
    /// Where the next spare goes, once the loop has nothing else to do (set when a connection has
    /// delivered its first bytes).
    private var spareWanted: EdgeRoute?
    /// The spare's TLS is open (it is parked), for the pool's choice of a loop from other threads:
    /// a connection given to this loop would need only its upgrade's round trip.
    private let spareReady = LockedBox(false)
    private var sparesMade = 0
    /// How long a spare stays parked, in nanoseconds (0: no spare).
    let spareLifetimeNanoseconds: UInt64
    /// Spares' ids: far above any connection's, so that tags and timers never mix them up.
    private static let spareIDBase = 1 << 48
    private var stopping = false
    private let finished = DispatchSemaphore(value: 0)
    /// The service thread, once started.
    private var serviceThread: JoinableThread?
    private let threadStarted = LockedBox(false)

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
        spareLifetimeNanoseconds = tuning.spareLifetime.map { UInt64(max(0, $0.secondsValue) * 1e9) } ?? 0
        self.onEvent = onEvent
        self.defaultHandshake = Handshake(request: configuration.request, credential: configuration.credential)
        pinned = AddressOverride.route(host: configuration.dialHost, port: configuration.dialPort,
                                       resolve: configuration.resolveOverrides)
        txBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + tuning.chunkSize, alignment: 16)
        rxBuffer = .allocate(byteCount: rxCapacity, alignment: 16)
        controlBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + 128, alignment: 16)
        epollEvents = .allocate(capacity: epollBatch)
    }

    deinit {
        // Only when the service thread never ran: it closes them itself.
        for fd in [epollFD, timerFD, wakeFD] where fd >= 0 { Glibc.close(fd) }
        txBuffer.deallocate()
        rxBuffer.deallocate()
        controlBuffer.deallocate()
        epollEvents.deallocate()
    }

    /// Creates the TLS context (or takes `sharedTLS`, another loop's of the same configuration)
    /// and the epoll set, and starts the service thread.
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
        // Everything the loop waits for is in one epoll set: the bridges' sockets, the timer of
        // their deadlines, and the eventfd that other threads wake it with.
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else {
            if let exhausted = FileDescriptors.exhausted() { throw exhausted }
            throw SystemError.current("epoll_create1()").tunnelFailure
        }
        epollFD = ep
        let timer = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard timer >= 0 else { throw SystemError.current("timerfd_create()").tunnelFailure }
        timerFD = timer
        watch(fd: timer, tag: Self.timerTag, events: EPOLLIN.rawValue)
        let wake = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard wake >= 0 else { throw SystemError.current("eventfd()").tunnelFailure }
        wakeFD = wake
        watch(fd: wake, tag: Self.wakeTag, events: EPOLLIN.rawValue)

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
        var stopDeadline: DispatchTime?
        while true {
            var timeout: Int32 = -1
            if stopping {
                // Let the Close frames go out, but never wait long for peers.
                if bridges.isEmpty { break }
                if let deadline = stopDeadline {
                    if DispatchTime.now() >= deadline { break }
                } else {
                    stopDeadline = .now() + 2
                }
                timeout = 100
            }
            let n = Int(epoll_wait(epollFD, epollEvents, Int32(epollBatch), timeout))
            if n < 0 {
                if errno == EINTR { continue }
                logger.error("\(SystemError.current("epoll_wait()"))")
                break
            }
            serve(events: n)
            // A spare waits until nothing is ready: what the new connection's peer sent first
            // goes out before it.
            while spareWanted != nil {
                let more = Int(epoll_wait(epollFD, epollEvents, Int32(epollBatch), 0))
                if more <= 0 {
                    dialWantedSpare()
                    break
                }
                serve(events: more)
            }
        }
        wakeLock.lock()
        Glibc.close(wakeFD)
        wakeFD = -1
        wakeLock.unlock()
        // Every connection still open is closed when `shutdown()` returns, so the ports are free.
        // Local sockets are ours.
        for bridge in bridges.values { bridge.abandon() }
        bridges.removeAll()
        Glibc.close(epollFD)
        epollFD = -1
        Glibc.close(timerFD)
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

    /// `bridge(…)` for a bridge already counted by `countBridge()`. `pairOutput`: the output of a
    /// `LocalPair` whose input is `fd` (-1: `fd` is a socket).
    func bridgeCounted(socket fd: Int32, pairOutput: Int32 = -1, names: LocalNames = .socket, request: UpgradeRequest?,
                       credential: CredentialKind?, handBackOnRefusal: Bool, handBackWhenRetryable: Bool, attempt: Int) -> Int {
        var handshake = request.map { Handshake(request: $0, credential: credential ?? configuration.credential) }
            ?? defaultHandshake
        handshake.handBackOnRefusal = handBackOnRefusal
        handshake.handBackWhenRetryable = handBackWhenRetryable
        handshake.attempt = attempt
        let id = ids.withLock { n -> Int in n += 1; return n }
        switch route() {
        case .success(let route):
            post(.bridge(id: id, fd: fd, output: pairOutput, names: names, route: route, handshake: handshake))
        case .failure(let failure):
            load.withLock { $0 -= 1 }
            logger.debug("connection \(id) failed: \(failure.detail)")
            if pairOutput >= 0 {
                Glibc.close(pairOutput)
                Glibc.close(fd)
                onEvent(.failed(id: id, failure))
            } else if handBackWhenRetryable, failure.isRetryable, failure.category == .transport {
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
        // Until the thread is done: a wake-up that raced its start is simply repeated.
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
        wakeLock.lock()
        if wakeFD >= 0 {
            var one: UInt64 = 1
            _ = Glibc.write(wakeFD, &one, MemoryLayout<UInt64>.size)
        }
        wakeLock.unlock()
    }

    /// Runs on the service thread when the wake-up eventfd is readable.
    private func drainCommands() {
        var count: UInt64 = 0
        _ = Glibc.read(wakeFD, &count, MemoryLayout<UInt64>.size)
        let pending = commands.withLock { q -> [Command] in defer { q.removeAll() }; return q }
        for command in pending {
            switch command {
            case .bridge(let id, let fd, let output, let names, let route, let handshake):
                startBridge(id: id, fd: fd, output: output, names: names, route: route, handshake: handshake)
            case .closeAll:
                for bridge in bridges.values { bridge.closeBoth() }
            case .stop:
                stopping = true
            }
        }
    }

    private func startBridge(id: Int, fd: Int32, output: Int32, names: LocalNames, route: EdgeRoute, handshake: Handshake) {
        if let spare {
            self.spare = nil
            spareReady.withLock { $0 = false }
            if spare.route == route {
                bridges.removeValue(forKey: spare.id)
                spare.rekey(to: id)
                bridges[id] = spare
                spare.adopt(localFD: fd, output: output, names: names, handshake: handshake)
                return
            }
            // The edge's address changed (DNS): the spare goes to the old one.
            spare.closeSpare()
        }
        let bridge = Bridge(id: id, localFD: fd, outputFD: output, localNames: names, loop: self, handshake: handshake)
        bridges[id] = bridge
        bridge.dial(route: route)
    }

    /// A connection through `route` carries bytes: a spare follows when the loop is idle.
    func wantsSpare(route: EdgeRoute) {
        if spareLifetimeNanoseconds > 0, spare == nil, !stopping { spareWanted = route }
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

    /// The spare's TLS is open: the next connection needs only its upgrade's round trip.
    func spareParked(_ bridge: Bridge) {
        if spare === bridge { spareReady.withLock { $0 = true } }
    }

    /// Whether this loop holds a spare whose TLS is open (a hint: it may be taken or dropped the
    /// moment after).
    var hasParkedSpare: Bool { spareReady.withLock { $0 } }

    /// A spare was dropped (expired, closed by the edge, or the loop stops).
    func spareGone(_ bridge: Bridge) {
        bridges.removeValue(forKey: bridge.id)
        if spare === bridge {
            spare = nil
            spareReady.withLock { $0 = false }
        }
        timerOwnerLeft(bridge.id)
    }

    /// How long a spare stays parked, in words ("30 s").
    var spareLifetimeText: String {
        let nanoseconds = spareLifetimeNanoseconds
        if nanoseconds % 1_000_000_000 == 0 { return "\(nanoseconds / 1_000_000_000) s" }
        return "\(nanoseconds / 1_000_000) ms"
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

    /// Serves the `count` events `epoll_wait` returned (level-triggered: what is left is
    /// announced again).
    private func serve(events count: Int) {
        for i in 0..<count {
            let tag = epollEvents[i].data.u64
            let events = epollEvents[i].events
            switch tag {
            case Self.timerTag:
                serviceTimer()
            case Self.wakeTag:
                drainCommands()
            default:
                guard let bridge = bridges[Int(tag >> 2)], let side = Bridge.Side(rawValue: tag & 3) else { continue }
                bridge.onEvent(side, events: events)
            }
        }
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
