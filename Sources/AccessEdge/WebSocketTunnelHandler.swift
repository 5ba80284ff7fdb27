import NIOCore
import NIOWebSocket

/// Per-tunnel settings.
struct TunnelSettings: Sendable {
    /// Close the tunnel when no frame travelled either way for this long (`nil`: never).
    var idleTimeout: TimeAmount?
    /// How long a closing side may take to drain (or to answer our Close) before it is cut.
    var closeGrace: TimeAmount = .seconds(3)
    var log: EdgeLog
    /// Answer pings with pongs (off to play a dead path for client keepalive tests).
    var answerPings = true
}

/// Joins an upgraded WebSocket channel and a connected TCP channel into one tunnel.
///
/// Both channels live on the same event loop, so the two handlers call each other directly.
/// Flow control is by read gating: each side forwards its `read()` only while the other
/// side's channel is writable, and re-issues it when the other side becomes writable again.
/// Nothing is buffered beyond one socket read (data frames are passed on piece by piece; a
/// text or control frame is collected whole).
enum Tunnel {
    /// `webSocket` has NIOWebSocket's frame encoder and no frame decoder: the tunnel's
    /// WebSocket half reads the client's frames itself, up to `maxFrameSize` bytes each.
    static func join(webSocket: Channel, target: Channel, maxFrameSize: Int, stats: EdgeStats,
                     settings: TunnelSettings) throws {
        webSocket.eventLoop.preconditionInEventLoop()
        precondition(webSocket.eventLoop === target.eventLoop, "tunnel halves must share an event loop")
        guard webSocket.isActive else {
            target.close(promise: nil)
            throw ChannelError.ioOnClosedChannel
        }
        let clientSide = WebSocketTunnelHandler(maxFrameSize: maxFrameSize, stats: stats, settings: settings)
        let targetSide = TargetTunnelHandler(settings: settings)
        clientSide.partner = targetSide
        targetSide.partner = clientSide
        do {
            try webSocket.pipeline.syncOperations.addHandler(clientSide)
            try target.pipeline.syncOperations.addHandler(targetSide)
        } catch {
            clientSide.partner = nil
            targetSide.partner = nil
            target.close(promise: nil)
            webSocket.close(promise: nil)
            throw error
        }
        if target.isActive {
            // The target was dialled with autoRead off so nothing arrived before the 101.
            if let options = target.syncOptions {
                try options.setOption(.autoRead, value: true)
            } else {
                target.setOption(.autoRead, value: true).whenFailure { _ in target.close(promise: nil) }
            }
        } else {
            targetSide.partner = nil
            clientSide.targetEnded()
        }
    }
}

/// The WebSocket half of a tunnel: binary frames from the client go to the TCP target,
/// TCP bytes come back as binary frames.
///
/// It reads the client's frames from the TLS bytes itself (`ClientFrameReader`): the payload
/// of binary and continuation frames goes to the target as it arrives, unmasked on the way,
/// without waiting for the end of the frame. A text frame is a protocol violation (Close
/// 1003). Pings are answered with pongs. A Close from the client is answered and ends the TCP
/// side; the end of the TCP side sends Close 1000. A frame over the size limit gets Close
/// 1009, a malformed control frame Close 1002, and the connection is closed.
final class WebSocketTunnelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The TCP half; `nil` once it has ended or been told to end.
    var partner: TargetTunnelHandler?

    private let stats: EdgeStats
    private let settings: TunnelSettings
    private let maxFrameSize: Int
    private var reader: ClientFrameReader?
    private var context: ChannelHandlerContext?
    private var readHeld = false
    private var sentClose = false
    private var receivedClose = false
    /// Completes once our Close frame has been written.
    private var closeWritten: EventLoopFuture<Void>?
    private var lastActivity = NIODeadline.now()
    private var idleCheck: Scheduled<Void>?

    init(maxFrameSize: Int, stats: EdgeStats, settings: TunnelSettings) {
        self.maxFrameSize = maxFrameSize
        self.stats = stats
        self.settings = settings
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        reader = ClientFrameReader(maxFrameSize: maxFrameSize, allocator: context.channel.allocator)
        lastActivity = .now()
        scheduleIdleCheck()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
        self.context = nil
        endPartner()
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
        endPartner()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settings.log.info("tunnel WebSocket error: \(error)")
        endPartner()
        context.close(promise: nil)
    }

    // MARK: Frames from the client

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        while self.context != nil, let event = reader?.next(from: &bytes) {
            switch event {
            case .data(let payload, let startsFrame):
                guard !sentClose else { continue }
                stats.dataIn(frames: startsFrame ? 1 : 0, bytes: payload.readableBytes)
                lastActivity = .now()
                if payload.readableBytes > 0 {
                    partner?.sendToTarget(payload)
                }
            case .frame(let opcode, let payload):
                wholeFrameRead(context: context, opcode: opcode, payload: payload)
            case .violation(let error):
                violation(context: context, error: "\(error)",
                          code: error == .invalidFrameLength ? .messageTooLarge : .protocolError)
            case .unmaskedFrame:
                violation(context: context, error: "unmasked client frame", code: .protocolError)
            }
        }
    }

    /// A text, ping, pong, close or unknown frame, complete.
    private func wholeFrameRead(context: ChannelHandlerContext, opcode: WebSocketOpcode, payload: ByteBuffer) {
        switch opcode {
        case .text:
            stats.textFrameReceived()
            settings.log.info("text frame received: closing with 1003")
            endPartner()
            sendClose(code: .unacceptableData, reason: "binary frames only")
        case .ping:
            stats.pingReceived()
            lastActivity = .now()
            guard !sentClose, settings.answerPings else { return }
            let pong = WebSocketFrame(fin: true, opcode: .pong, data: payload)
            context.writeAndFlush(wrapOutboundOut(pong), promise: nil)
        case .pong:
            lastActivity = .now()
        case .connectionClose:
            stats.closeFrameReceived()
            receivedClose = true
            endPartner()
            if let closeWritten {
                let channel = context.channel
                closeWritten.whenComplete { _ in channel.close(promise: nil) }
            } else {
                var payload = payload
                let code = payload.readWebSocketErrorCode() ?? .normalClosure
                sendClose(code: Self.replyCode(to: code), reason: nil)
            }
        default:
            endPartner()
            sendClose(code: .protocolError, reason: "unknown opcode")
        }
    }

    /// A frame the reader refused: Close with `code` (1009 for a frame too large, 1002
    /// otherwise), then the connection is closed; nothing more is read.
    private func violation(context: ChannelHandlerContext, error: String, code: WebSocketErrorCode) {
        settings.log.info("tunnel WebSocket error: \(error)")
        endPartner()
        var payload = context.channel.allocator.buffer(capacity: 2)
        payload.write(webSocketErrorCode: code)
        sentClose = true
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)))
            .whenComplete { _ in channel.close(promise: nil) }
        context.close(promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.flushToTarget()
        context.fireChannelReadComplete()
    }

    // MARK: Flow control

    func read(context: ChannelHandlerContext) {
        if let partner, !partner.isWritable {
            readHeld = true
        } else {
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            partner?.resumeReading()
        }
        context.fireChannelWritabilityChanged()
    }

    /// True while frames written to the client are not piling up.
    var isWritable: Bool {
        context?.channel.isWritable ?? false
    }

    /// The target side became writable: let a held read through.
    func resumeReading() {
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    // MARK: Calls from the TCP half

    /// Sends `bytes` from the target to the client as one binary frame (flushed later).
    func sendToClient(_ bytes: ByteBuffer) {
        guard let context, !sentClose else { return }
        stats.dataFrameOut(bytes: bytes.readableBytes)
        lastActivity = .now()
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: bytes)), promise: nil)
    }

    func flushToClient() {
        context?.flush()
    }

    /// The TCP side is gone: say goodbye with Close 1000.
    func targetEnded() {
        partner = nil
        readHeld = false
        sendClose(code: .normalClosure, reason: nil)
        // Keep reading so the client's Close reply (and anything before it) is consumed.
        context?.read()
    }

    // MARK: Helpers

    private func endPartner() {
        guard let partner else { return }
        self.partner = nil
        partner.webSocketEnded()
        if readHeld, let context {
            readHeld = false
            context.read()
        }
    }

    /// Sends a Close frame once. The channel is closed when the client's Close has already
    /// arrived (after our frame is written), when it arrives, or after the grace period.
    private func sendClose(code: WebSocketErrorCode, reason: String?) {
        guard let context, !sentClose else { return }
        sentClose = true
        var payload = context.channel.allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        payload.write(webSocketErrorCode: code)
        if let reason { payload.writeString(reason) }
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)
        let channel = context.channel
        let written = context.writeAndFlush(wrapOutboundOut(frame))
        closeWritten = written
        if receivedClose {
            written.whenComplete { _ in channel.close(promise: nil) }
        } else {
            let cutoff = channel.eventLoop.scheduleTask(in: settings.closeGrace) {
                channel.close(promise: nil)
            }
            channel.closeFuture.whenComplete { _ in cutoff.cancel() }
        }
    }

    /// The code to echo in our Close reply (only codes that may appear on the wire).
    private static func replyCode(to code: WebSocketErrorCode) -> WebSocketErrorCode {
        switch code {
        case .unknown(let value) where value < 1000 || value == 1005 || value == 1006 || value == 1015:
            return .normalClosure
        default:
            return code
        }
    }

    private func scheduleIdleCheck() {
        guard let timeout = settings.idleTimeout, let context else { return }
        idleCheck = context.eventLoop.assumeIsolated().scheduleTask(deadline: lastActivity + timeout) {
            self.idleCheckFired()
        }
    }

    private func idleCheckFired() {
        idleCheck = nil
        guard let timeout = settings.idleTimeout, context != nil, !sentClose else { return }
        if NIODeadline.now() >= lastActivity + timeout {
            stats.idleTunnelClosed()
            settings.log.info("tunnel idle for \(timeout.nanoseconds / 1_000_000) ms: closing")
            endPartner()
            sendClose(code: .normalClosure, reason: "idle timeout")
        } else {
            scheduleIdleCheck()
        }
    }
}
