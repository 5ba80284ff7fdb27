import Dispatch
import NIOCore
import NIOHTTP1
import NIOWebSocket

/// State one client connection shares between the WebSocket upgrader callbacks and the
/// HTTP handler. Only touched on the connection's event loop.
final class ConnectionState {
    /// The dialled TCP target, between `shouldUpgrade` and the pipeline switch.
    var pendingTarget: Channel?
    /// The refusal `shouldUpgrade` decided on, for the HTTP handler to send.
    var pendingRejection: EdgeResponse?
    /// On a site listener (`--site`): the one host it serves; other hosts get 421.
    var siteHost: String?

    init(siteHost: String? = nil) { self.siteHost = siteHost }

    /// The 421 for a request to another host than this site's, or nil.
    func misdirected(_ head: HTTPRequestHead) -> EdgeResponse? {
        guard let siteHost else { return nil }
        let host = EdgeRequest(head).host
        guard host != siteHost else { return nil }
        return .text(.misdirectedRequest, "421 Misdirected Request: this address serves \(siteHost), not \(host)")
    }
}

/// Answers every request that did not become a WebSocket: refused upgrades (302, 400, 502,
/// forced status), `GET /cdn-cgi/edge/stats`, and the login protocol and admin API of
/// `AuthRoutes`.
///
/// Every answer carries `Connection: close` and the connection is closed after it, so a
/// refused upgrade never leaves a half-used connection behind. A `HEAD` answer has no body.
final class EdgeHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Pipeline name, so the upgrade can remove this handler.
    static let handlerName = "cf-access-edge.http"

    /// Path of the counters endpoint.
    static let statsPath = "/cdn-cgi/edge/stats"

    private let state: ConnectionState
    private let policy: AccessPolicy
    private let stats: EdgeStats
    private let routes: AuthRoutes
    private var requestHead: HTTPRequestHead?
    private var requestBody: [UInt8] = []
    private var responding = false
    /// The largest request body read (a `cert_sign` request is a few KiB).
    static let bodyLimit = 64 * 1024

    init(state: ConnectionState, routes: AuthRoutes) {
        self.state = state
        self.policy = routes.policy
        self.stats = routes.stats
        self.routes = routes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            requestHead = head
            requestBody = []
        case .body(var buffer):
            if requestBody.count + buffer.readableBytes <= Self.bodyLimit,
               let bytes = buffer.readBytes(length: buffer.readableBytes) {
                requestBody += bytes
            }
        case .end:
            guard let head = requestHead, !responding else { return }
            requestHead = nil
            responding = true
            switch reply(to: head) {
            case .response(let response):
                send(response, omittingBody: head.method == .HEAD, context: context)
            case .noAnswer:
                break
            case .held(let seconds, let otherwise, let check):
                hold(until: .now() + .seconds(Int64(seconds)), otherwise: otherwise, check: check,
                     omittingBody: head.method == .HEAD, context: context)
            case .deferred(let work):
                let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let eventLoop = context.eventLoop
                let omit = head.method == .HEAD
                DispatchQueue.global().async {
                    let response = work()
                    eventLoop.execute {
                        let (handler, context) = loopBound.value
                        guard context.channel.isActive else { return }
                        handler.send(response, omittingBody: omit, context: context)
                    }
                }
            }
        }
    }

    /// A long poll: `check` every 100 ms on the connection's event loop, until it answers or
    /// the deadline passes (then `otherwise`). A client that goes away ends it.
    private func hold(until deadline: NIODeadline, otherwise: EdgeResponse, check: @escaping @Sendable () -> EdgeResponse?,
                      omittingBody: Bool, context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        if let response = check() {
            send(response, omittingBody: omittingBody, context: context)
            return
        }
        if NIODeadline.now() >= deadline {
            send(otherwise, omittingBody: omittingBody, context: context)
            return
        }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.scheduleTask(in: .milliseconds(100)) {
            let (handler, context) = loopBound.value
            handler.hold(until: deadline, otherwise: otherwise, check: check, omittingBody: omittingBody, context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A refused upgrade is reported here before the request itself arrives: not an error.
        if error is NIOWebSocketUpgradeError { return }
        context.close(promise: nil)
    }

    private func reply(to head: HTTPRequestHead) -> EdgeReply {
        if Self.isWebSocketUpgrade(head) {
            if let rejection = state.pendingRejection {
                state.pendingRejection = nil
                return .response(rejection)
            }
            if let misdirected = state.misdirected(head) {
                stats.upgradeRejected()
                return .response(misdirected)
            }
            return .response(handshakeRejection(head))
        }
        if let misdirected = state.misdirected(head) { return .response(misdirected) }
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if head.method == .GET && path == Self.statsPath {
            return .response(EdgeResponse(status: .ok,
                                          headers: [("Content-Type", "application/json")],
                                          body: stats.snapshot().json))
        }
        return routes.reply(to: head, body: requestBody)
    }

    /// An upgrade request the WebSocket upgrader turned down before asking us (bad
    /// `Sec-WebSocket-Key` or version) or that arrived when no upgrade was possible.
    private func handshakeRejection(_ head: HTTPRequestHead) -> EdgeResponse {
        stats.recordUpgradeRequest(headerNames: head.headers.map { $0.name.lowercased() },
                                   userAgent: head.headers.first(name: "User-Agent") ?? "")
        stats.upgradeRejected()
        if case .reject(let response) = policy.decide(head) {
            return response
        }
        return .text(.badRequest,
                     "invalid WebSocket handshake (need Sec-WebSocket-Key and Sec-WebSocket-Version: 13)")
    }

    private func send(_ response: EdgeResponse, omittingBody: Bool, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers)
        headers.replaceOrAdd(name: "Server", value: "cf-access-edge")
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.utf8.count))
        headers.replaceOrAdd(name: "Connection", value: "close")
        let head = HTTPResponseHead(version: .http1_1, status: response.status, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if !response.body.isEmpty && !omittingBody {
            let body = context.channel.allocator.buffer(string: response.body)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    /// True when the request asks for `Upgrade: websocket`.
    static func isWebSocketUpgrade(_ head: HTTPRequestHead) -> Bool {
        head.headers["Upgrade"].contains { $0.lowercased().contains("websocket") }
    }
}
