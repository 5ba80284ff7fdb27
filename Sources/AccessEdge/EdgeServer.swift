import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// Everything `serve` needs.
struct EdgeServerConfiguration: Sendable {
    var listen: HostPort
    var certificatePath: String
    var keyPath: String
    var policy: AccessPolicy
    var tunnel: TunnelSettings
    /// Largest WebSocket frame accepted from a client.
    var maxFrameSize: Int = 1 << 24
    /// Listeners of their own for single hosts (`--site`), each with its own certificate.
    var sites: [EdgeSite] = []
}

/// A listener that serves one host only, with a certificate for that host only (`--site`), so
/// a client that sends a request, or its SNI, to the wrong address is refused (421 or a
/// certificate that does not match) instead of served.
struct EdgeSite: Sendable {
    var host: String
    var listen: HostPort
    var certificatePath: String
    var keyPath: String
}

/// Socket tuning shared by the edge's client connections and its target connections.
enum SocketTuning {
    /// Writability flips off above 1 MiB queued and back on below 256 KiB.
    static let waterMarks = ChannelOptions.Types.WriteBufferWaterMark(low: 256 * 1024, high: 1024 * 1024)
    /// Reads grow up to 256 KiB for bulk transfers.
    static var receiveAllocator: AdaptiveRecvByteBufferAllocator {
        AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 16 * 1024, maximum: 256 * 1024)
    }
}

/// The Access edge emulator: TLS, HTTP/1.1, WebSocket upgrade with Access-style checks, a
/// TCP tunnel per accepted WebSocket, and Cloudflare's login endpoints (`AuthRoutes`) on the
/// same listener.
final class EdgeServer: Sendable {
    let stats: EdgeStats
    private let configuration: EdgeServerConfiguration
    private let group: any EventLoopGroup
    /// Every tunnel's WebSocket channel, for the admin call `drop-tunnels`.
    private let tunnels = OpenTunnels()

    /// `stats` must be the one the configuration's `AccessAuthority` counts into.
    init(configuration: EdgeServerConfiguration, stats: EdgeStats, group: any EventLoopGroup) {
        self.configuration = configuration
        self.stats = stats
        self.group = group
    }

    /// Binds the listener; the returned channel's `localAddress` has the real port.
    func start() throws -> Channel {
        let tls = try Self.makeTLSContext(certificatePath: configuration.certificatePath,
                                          keyPath: configuration.keyPath)
        return try bind(configuration.listen, tls: tls, siteHost: nil)
    }

    /// Binds every `--site` listener; returns each host with its channel.
    func startSites() throws -> [(host: String, channel: Channel)] {
        try configuration.sites.map { site in
            let tls = try Self.makeTLSContext(certificatePath: site.certificatePath, keyPath: site.keyPath)
            return (site.host, try bind(site.listen, tls: tls, siteHost: site.host))
        }
    }

    private func bind(_ address: HostPort, tls: NIOSSLContext, siteHost: String?) throws -> Channel {
        try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: SocketTuning.waterMarks)
            .childChannelOption(.recvAllocator, value: SocketTuning.receiveAllocator)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.configureConnection(channel, tls: tls, siteHost: siteHost)
                }
            }
            .bind(host: address.host, port: address.port)
            .wait()
    }

    /// TLS 1.2+ with the given PEM certificate chain and key, ALPN `http/1.1`.
    static func makeTLSContext(certificatePath: String, keyPath: String) throws -> NIOSSLContext {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
        } catch {
            throw EdgeError("cannot read certificate \(certificatePath): \(error)")
        }
        guard !chain.isEmpty else { throw EdgeError("no certificate in \(certificatePath)") }
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw EdgeError("cannot read private key \(keyPath): \(error)")
        }
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                           privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["http/1.1"]
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw EdgeError("TLS setup failed (does the key match the certificate?): \(error)")
        }
    }

    // MARK: Per connection

    private func configureConnection(_ channel: Channel, tls: NIOSSLContext, siteHost: String?) throws {
        let state = NIOLoopBound(ConnectionState(siteHost: siteHost), eventLoop: channel.eventLoop)
        let upgrader = TunnelUpgrader(
            handshake: NIOWebSocketServerUpgrader(
                maxFrameSize: configuration.maxFrameSize,
                automaticErrorHandling: false,
                shouldUpgrade: { channel, head in
                    self.shouldUpgrade(channel: channel, head: head, state: state)
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeFailedFuture(EdgeError("the tunnel upgrader builds the pipeline"))
                }
            ),
            startTunnel: { channel in
                self.startTunnel(channel: channel, state: state)
            }
        )
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(NIOSSLServerHandler(context: tls))
        try pipeline.configureHTTPServerPipeline(
            withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
                // Out of the way before the WebSocket codec is appended behind it.
                _ = context.pipeline.syncOperations.removeHandler(name: EdgeHTTPHandler.handlerName)
            })
        )
        let routes = AuthRoutes(policy: configuration.policy, stats: stats, log: configuration.tunnel.log,
                                tunnels: tunnels)
        try pipeline.addHandler(EdgeHTTPHandler(state: state.value, routes: routes),
                                name: EdgeHTTPHandler.handlerName)
        channel.closeFuture.whenComplete { _ in
            // A target dialled for an upgrade that never completed.
            state.value.pendingTarget?.close(promise: nil)
            state.value.pendingTarget = nil
        }
    }

    /// Runs the Access checks; on success dials the target before agreeing to the 101.
    private func shouldUpgrade(channel: Channel, head: HTTPRequestHead,
                               state: NIOLoopBound<ConnectionState>) -> EventLoopFuture<HTTPHeaders?> {
        stats.recordUpgradeRequest(headerNames: head.headers.map { $0.name.lowercased() },
                                   userAgent: head.headers.first(name: "User-Agent") ?? "")
        let log = configuration.tunnel.log
        if let misdirected = state.value.misdirected(head) {
            state.value.pendingRejection = misdirected
            stats.upgradeRejected()
            log.info("upgrade \(head.uri) refused: 421 (this site serves \(state.value.siteHost ?? ""))")
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        switch configuration.policy.decide(head) {
        case .reject(let response):
            state.value.pendingRejection = response
            stats.upgradeRejected()
            log.info("upgrade \(head.uri) refused: \(response.status.code)")
            return channel.eventLoop.makeSucceededFuture(nil)
        case .accept(let target):
            return Self.dial(target, on: channel.eventLoop).map { targetChannel -> HTTPHeaders? in
                guard channel.isActive else {
                    targetChannel.close(promise: nil)
                    state.value.pendingRejection = .text(.serviceUnavailable, "client went away")
                    self.stats.upgradeRejected()
                    return nil
                }
                state.value.pendingTarget = targetChannel
                self.stats.upgradeAccepted()
                channel.closeFuture.whenComplete { _ in self.stats.tunnelEnded() }
                log.info("upgrade \(head.uri) accepted: tunnel to \(target)")
                return HTTPHeaders()
            }.recover { error -> HTTPHeaders? in
                state.value.pendingRejection = AccessPolicy.badGateway(target: target, error: error)
                self.stats.upgradeRejected()
                log.info("upgrade \(head.uri): target \(target) unreachable: \(AccessPolicy.briefReason(error))")
                return nil
            }
        }
    }

    /// After the 101: joins the WebSocket with the target dialled in `shouldUpgrade`.
    private func startTunnel(channel: Channel, state: NIOLoopBound<ConnectionState>) -> EventLoopFuture<Void> {
        channel.eventLoop.makeCompletedFuture {
            guard let target = state.value.pendingTarget else {
                channel.close(promise: nil)
                throw EdgeError("upgrade completed without a dialled target")
            }
            state.value.pendingTarget = nil
            try Tunnel.join(webSocket: channel, target: target, maxFrameSize: configuration.maxFrameSize,
                            stats: stats, settings: configuration.tunnel)
            tunnels.add(channel)
        }
    }

    /// Connects to a TCP target on `eventLoop` (the WebSocket's loop), with reads off until
    /// the tunnel is joined. An address literal is connected to as it is; only a name goes through
    /// NIO's resolver, which runs `getaddrinfo` on another thread and comes back to the loop (two
    /// thread hand-overs in every new tunnel's wait for its 101).
    static func dial(_ target: HostPort, on eventLoop: any EventLoop) -> EventLoopFuture<Channel> {
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(.seconds(10))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.autoRead, value: false)
            .channelOption(.writeBufferWaterMark, value: SocketTuning.waterMarks)
            .channelOption(.recvAllocator, value: SocketTuning.receiveAllocator)
        if let literal = try? SocketAddress(ipAddress: target.host, port: target.port) {
            return bootstrap.connect(to: literal)
        }
        return bootstrap.connect(host: target.host, port: target.port)
    }
}

/// The WebSocket upgrade of a tunnel.
///
/// NIOWebSocket's upgrader does the handshake: the request checks, `Sec-WebSocket-Accept` and
/// our `shouldUpgrade`. The pipeline after the 101 is built here instead of by it: its frame
/// encoder for what the edge sends, and no frame decoder, because the tunnel's WebSocket half
/// reads the client's frames itself (`ClientFrameReader`, payload streamed to the target).
private struct TunnelUpgrader: HTTPServerProtocolUpgrader, Sendable {
    /// Only its handshake is used; its `upgradePipelineHandler` is never called.
    let handshake: NIOWebSocketServerUpgrader
    /// Adds the tunnel behind the encoder.
    let startTunnel: @Sendable (Channel) -> EventLoopFuture<Void>

    var supportedProtocol: String { handshake.supportedProtocol }
    var requiredUpgradeHeaders: [String] { handshake.requiredUpgradeHeaders }

    func buildUpgradeResponse(channel: Channel, upgradeRequest: HTTPRequestHead,
                              initialResponseHeaders: HTTPHeaders) -> EventLoopFuture<HTTPHeaders> {
        handshake.buildUpgradeResponse(channel: channel, upgradeRequest: upgradeRequest,
                                       initialResponseHeaders: initialResponseHeaders)
    }

    func upgrade(context: ChannelHandlerContext, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<Void> {
        let channel = context.channel
        do {
            try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return startTunnel(channel)
    }
}

/// A one-line, user-facing error.
struct EdgeError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}
