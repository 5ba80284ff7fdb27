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
}

/// Answers every request that did not become a WebSocket: refused upgrades (302, 400, 502,
/// forced status), `GET /cdn-cgi/edge/stats`, and 404 for anything else.
///
/// Every answer carries `Connection: close` and the connection is closed after it, so a
/// refused upgrade never leaves a half-used connection behind.
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
    private var requestHead: HTTPRequestHead?
    private var responding = false

    init(state: ConnectionState, policy: AccessPolicy, stats: EdgeStats) {
        self.state = state
        self.policy = policy
        self.stats = stats
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            requestHead = head
        case .body:
            break
        case .end:
            guard let head = requestHead, !responding else { return }
            requestHead = nil
            responding = true
            send(response(to: head), context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A refused upgrade is reported here before the request itself arrives: not an error.
        if error is NIOWebSocketUpgradeError { return }
        context.close(promise: nil)
    }

    private func response(to head: HTTPRequestHead) -> EdgeResponse {
        if Self.isWebSocketUpgrade(head) {
            if let rejection = state.pendingRejection {
                state.pendingRejection = nil
                return rejection
            }
            return handshakeRejection(head)
        }
        let path = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        if head.method == .GET && path == Self.statsPath {
            return EdgeResponse(status: .ok,
                                headers: [("Content-Type", "application/json")],
                                body: stats.snapshot().json)
        }
        return .text(.notFound, "not found")
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

    private func send(_ response: EdgeResponse, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers)
        headers.replaceOrAdd(name: "Server", value: "cf-access-edge")
        headers.replaceOrAdd(name: "Content-Length", value: String(response.body.utf8.count))
        headers.replaceOrAdd(name: "Connection", value: "close")
        let head = HTTPResponseHead(version: .http1_1, status: response.status, headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if !response.body.isEmpty {
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
