internal import CCFWebSockets
internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif
import AccessCore
import Foundation
import Logging

/// The libwebsockets event loop that carries every bridged connection of one configuration.
///
/// One thread owns the `lws_context` and runs `lws_service`; other threads hand it work through a
/// locked command queue and `lws_cancel_service`, drained on `LWS_CALLBACK_EVENT_WAIT_CANCELLED`.
/// Each bridge pairs a local socket (adopted as a raw socket) with one WebSocket client connection.
package final class CarrierLoop: @unchecked Sendable {
    /// Tunable sizes of the data path.
    package struct Tuning: Sendable {
        /// Largest WebSocket frame we send (and largest read of the local socket), in bytes.
        package var chunkSize = 256 << 10
        /// Queue size at which the producing side is paused.
        package var highWatermark = 1 << 20
        /// Queue size at which a paused producer resumes.
        package var lowWatermark = 256 << 10
        /// Creates the defaults.
        package init() {}
    }

    private enum Command {
        case bridge(id: Int, fd: Int32, address: String, handshake: Handshake)
        case closeAll
        case stop
    }

    let configuration: CarrierConfiguration
    let logger: Logger
    let tuning: Tuning
    let onEvent: @Sendable (BridgeEvent) -> Void
    /// The upgrade headers of connections bridged without their own request, built once.
    let defaultHandshake: Handshake

    /// Guarded by `contextLock` for the threads that wake the loop; the service thread destroys it.
    private var context: OpaquePointer?
    private let contextLock = NSLock()
    private(set) var vhost: OpaquePointer?
    private let protocols: UnsafeMutablePointer<lws_protocols>
    private let protocolNames: [UnsafeMutablePointer<CChar>]
    /// Shared buffers of the data path (one service thread): room for a frame header, then one
    /// chunk read from a local socket; decrypted bytes read from a TLS stream; a control frame.
    let txBuffer: UnsafeMutableRawPointer
    let rxBuffer: UnsafeMutableRawPointer
    let rxCapacity = 256 << 10
    let controlBuffer: UnsafeMutableRawPointer
    /// The epoll set of every established bridge's two sockets; itself watched by libwebsockets.
    private var epollFD: Int32 = -1
    private var epollEvents: UnsafeMutablePointer<epoll_event>
    private let epollBatch = 256

    private let commands = LockedBox<[Command]>([])
    private let ids = LockedBox(0)
    private let resolver = AddressResolver()
    private var bridges: [Int: Bridge] = [:]
    private var stopping = false
    private let finished = DispatchSemaphore(value: 0)
    private let threadStarted = LockedBox(false)

    static let webSocketProtocolName = "cfat-ws"
    /// libwebsockets' per-thread buffer, which holds the whole upgrade request.
    static let requestBufferSize = 64 << 10
    static let rawProtocolName = "cfat-raw"

    /// Creates the loop; call `start()` before bridging.
    package init(configuration: CarrierConfiguration, logger: Logger, tuning: Tuning = Tuning(),
                onEvent: @escaping @Sendable (BridgeEvent) -> Void) {
        self.configuration = configuration
        self.logger = logger
        self.tuning = tuning
        self.onEvent = onEvent
        self.defaultHandshake = Handshake(request: configuration.request, credential: configuration.credential)
        txBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + tuning.chunkSize, alignment: 16)
        rxBuffer = .allocate(byteCount: rxCapacity, alignment: 16)
        controlBuffer = .allocate(byteCount: WebSocketFrames.maxClientHeader + 128, alignment: 16)
        epollEvents = .allocate(capacity: epollBatch)
        protocolNames = [strdup(Self.webSocketProtocolName)!, strdup(Self.rawProtocolName)!]
        protocols = .allocate(capacity: 3)
        protocols.initialize(repeating: lws_protocols(), count: 3)
        for i in 0..<2 {
            protocols[i].name = UnsafePointer(protocolNames[i])
            protocols[i].callback = carrierCallback
            // libwebsockets parses only the upgrade response: the frames are ours. It still mallocs
            // a frame buffer of rx_buffer_size for every WebSocket, never used after the takeover,
            // so it is kept tiny (4 KiB of it was ~20% of an idle connection's memory).
            protocols[i].rx_buffer_size = 128
            // Without this, lws caps every socket write at rx_buffer_size: the upgrade request
            // (which may carry a long app token) would leave in 128-byte pieces.
            protocols[i].tx_packet_size = 16 << 10
        }
    }

    deinit {
        if let context { lws_context_destroy(context) }   // only when the service thread never ran
        protocols.deinitialize(count: 3)
        protocols.deallocate()
        protocolNames.forEach { free($0) }
        txBuffer.deallocate()
        rxBuffer.deallocate()
        controlBuffer.deallocate()
        epollEvents.deallocate()
    }

    /// Creates the libwebsockets context and starts the service thread.
    package func start() throws(TunnelFailure) {
        _ = OpenSSLSetup.initialised
        LWSLog.install(logger: logger)
        var info = lws_context_creation_info()
        info.options = UInt64(LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT)
        info.port = CONTEXT_PORT_NO_LISTEN
        info.user = Unmanaged.passUnretained(self).toOpaque()
        info.pt_serv_buf_size = UInt32(Self.requestBufferSize)
        info.timeout_secs = UInt32(max(1, configuration.handshakeTimeoutSeconds))
        info.connect_timeout_secs = UInt32(max(1, configuration.handshakeTimeoutSeconds))
        guard let ctx = lws_create_context(&info) else {
            if let exhausted = FileDescriptors.exhausted() { throw exhausted }
            throw TunnelFailure.internalError("libwebsockets could not create its context")
        }
        context = ctx

        let caFile = configuration.caFile ?? CarrierConfiguration.systemCABundle
        let proxyHost = configuration.proxy?.host
        let made: OpaquePointer? = caFile.withCString { ca in
            "cfat-client".withCString { name in
                withOptionalCString(proxyHost) { proxy in
                    var v = lws_context_creation_info()
                    v.port = CONTEXT_PORT_NO_LISTEN
                    v.protocols = UnsafePointer(protocols)
                    v.vhost_name = name
                    // libwebsockets also loads OpenSSL's default places (SSL_CERT_FILE and
                    // SSL_CERT_DIR when set, as for curl and Go; issue 17.3) unless told not to:
                    // with --ca-file, that file alone is trusted.
                    v.options = UInt64(LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT)
                        | (configuration.caFile == nil ? 0 : UInt64(LWS_SERVER_OPTION_DISABLE_OS_CA_CERTS))
                    v.client_ssl_ca_filepath = ca
                    if let proxy, let settings = configuration.proxy {
                        // Every dial of this vhost goes through the proxy with CONNECT host:port.
                        v.http_proxy_address = proxy
                        v.http_proxy_port = UInt32(settings.port)
                    }
                    return lws_create_vhost(ctx, &v)
                }
            }
        }
        guard let made else {
            throw TunnelFailure.configuration(ConfigurationError(
                "cannot load the CA certificates from \(caFile): give a readable PEM file of CA certificates"), subject: .caFile)
        }
        vhost = made

        // The data path's sockets are watched by one epoll set, which the lws loop watches.
        let ep = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard ep >= 0 else {
            let code = errno
            if code == EMFILE || code == ENFILE {
                throw TunnelFailure.outOfFileDescriptors(limit: FileDescriptors.limit, what: "epoll_create1(): \(String(cString: strerror(code)))")
            }
            throw TunnelFailure.internalError("epoll_create1(): \(String(cString: strerror(code)))")
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

        let thread = Thread { [self] in self.serviceLoop() }
        thread.name = "cf-access-tcp carrier"
        thread.stackSize = 1 << 20
        threadStarted.withLock { $0 = true }
        thread.start()
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
        finished.signal()
    }

    /// Bridges a connected local socket to a new WebSocket. Resolves the edge address first (on the
    /// calling thread, cached), so a DNS failure is reported precisely and never blocks the loop.
    /// The loop owns `fd` from here on and closes it.
    ///
    /// `request` (with the `credential` it carries) replaces the configuration's upgrade headers for
    /// this connection only, e.g. with a fresher app token; its origin must be the configuration's.
    /// With `handBackOnRefusal`, an Access refusal of the credential gives the untouched socket
    /// back (``BridgeEvent/refused(id:socket:_:)``) instead of closing it.
    @discardableResult
    package func bridge(socket fd: Int32, request: UpgradeRequest? = nil, credential: CredentialKind? = nil,
                       handBackOnRefusal: Bool = false) -> Int {
        var handshake = request.map { Handshake(request: $0, credential: credential ?? configuration.credential) }
            ?? defaultHandshake
        handshake.handBackOnRefusal = handBackOnRefusal
        let id = ids.withLock { n -> Int in n += 1; return n }
        let host = configuration.dialHost
        let port = configuration.dialPort
        let resolved: Result<String, TunnelFailure>
        if let pinned = AddressOverride.route(host: host, port: port, resolve: configuration.resolveOverrides) {
            resolved = .success(pinned.address)
        } else if configuration.proxy != nil {
            // The proxy resolves the name (a proxied network may have no DNS of its own).
            resolved = .success(host)
        } else {
            resolved = resolver.resolve(host: host, port: port)
        }
        switch resolved {
        case .success(let address):
            post(.bridge(id: id, fd: fd, address: address, handshake: handshake))
        case .failure(let failure):
            logger.debug("connection \(id) failed: \(failure.detail)")
            Glibc.close(fd)
            onEvent(.failed(id: id, failure))
        }
        return id
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
            case .bridge(let id, let fd, let address, let handshake):
                startBridge(id: id, fd: fd, address: address, handshake: handshake)
            case .closeAll:
                for bridge in bridges.values { bridge.closeBoth() }
            case .stop:
                stopping = true
            }
        }
    }

    private func startBridge(id: Int, fd: Int32, address: String, handshake: Handshake) {
        let bridge = Bridge(id: id, localFD: fd, loop: self, handshake: handshake)
        bridges[id] = bridge
        bridge.dial(address: address)
        if bridge.isFinished { forget(bridge) }
    }

    /// Called by a bridge once both of its sides are gone.
    func forget(_ bridge: Bridge) {
        bridges.removeValue(forKey: bridge.id)
    }

    var lwsContext: OpaquePointer? { context }

    // MARK: The data path's epoll set

    func watch(fd: Int32, tag: UInt64, events: UInt32) {
        var event = epoll_event(events: events, data: epoll_data_t(u64: tag))
        if epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) != 0 {
            logger.error("epoll_ctl(ADD, \(fd)): \(String(cString: strerror(errno)))")
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

    /// The epoll set is readable: serve every ready socket (level-triggered).
    fileprivate func serviceEpoll() {
        guard epollFD >= 0 else { return }
        while true {
            let n = Int(epoll_wait(epollFD, epollEvents, Int32(epollBatch), 0))
            if n <= 0 { return }
            for i in 0..<n {
                let tag = epollEvents[i].data.u64
                let events = epollEvents[i].events
                guard let bridge = bridges[Int(tag >> 1)] else { continue }
                bridge.onEvent(tag & 1 == 0 ? .local : .edge, events: events)
            }
            if n < epollBatch { return }
        }
    }
}

/// The one C entry point for every protocol of the carrier's vhost.
private func carrierCallback(_ wsi: OpaquePointer?, _ reason: lws_callback_reasons,
                             _ user: UnsafeMutableRawPointer?, _ input: UnsafeMutableRawPointer?,
                             _ len: Int) -> Int32 {
    guard let wsi else { return 0 }
    switch reason {
    case LWS_CALLBACK_RAW_RX_FILE:
        if lws_get_opaque_user_data(wsi) == nil, let raw = lws_context_user(lws_get_context(wsi)) {
            Unmanaged<CarrierLoop>.fromOpaque(raw).takeUnretainedValue().serviceEpoll()
        }
        return 0
    case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
        // The vhost's client SSL_CTX is `user`; the wsi is a stand-in (only its context is real).
        guard let sslContext = user.map(OpaquePointer.init), let raw = lws_context_user(lws_get_context(wsi)) else { return 0 }
        let loop = Unmanaged<CarrierLoop>.fromOpaque(raw).takeUnretainedValue()
        let logger = loop.logger
        let acceptsUnverified = loop.configuration.connectTo?.skipVerification == true
        if !TLSSessionCache.install(on: sslContext, acceptsUnverified: acceptsUnverified) {
            logger.warning("TLS session resumption is off: OpenSSL refused the session hooks")
        }
        if !TLSSessionCache.preferFastCiphers(on: sslContext) {
            logger.warning("OpenSSL refused our TLS 1.3 cipher order; using its default")
        }
        return 0
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if let raw = lws_context_user(lws_get_context(wsi)) {
            Unmanaged<CarrierLoop>.fromOpaque(raw).takeUnretainedValue().drainCommands()
        }
        return 0
    default:
        guard let raw = lws_get_opaque_user_data(wsi) else { return 0 }
        let bridge = Unmanaged<Bridge>.fromOpaque(raw).takeUnretainedValue()
        return bridge.handle(wsi: wsi, reason: reason, user: user, input: input, len: len)
    }
}

/// Calls `body` with a C string for `text`, or nil.
private func withOptionalCString<R>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}

/// One connection's upgrade headers, as NUL-terminated bytes for `lws_add_http_header_by_name`,
/// and the credential they carry (for the messages of an Access refusal).
struct Handshake: Sendable {
    let headers: [(name: [UInt8], value: [UInt8])]
    let redactedLines: [String]
    let credential: CredentialKind
    var handBackOnRefusal = false

    init(request: UpgradeRequest, credential: CredentialKind) {
        headers = request.headers.map { h in
            (Array((h.name + ":").utf8) + [0], Array(h.value.utf8) + [0])
        }
        redactedLines = request.redactedHeaderLines
        self.credential = credential
    }
}
