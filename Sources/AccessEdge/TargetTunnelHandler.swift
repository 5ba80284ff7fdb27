import NIOCore

/// The TCP half of a tunnel: bytes from the target go to the client as binary frames,
/// payloads from the client are written to the target.
///
/// Reads are held while the WebSocket side is not writable. When the WebSocket side ends,
/// what the client already sent is flushed (output shut down after pending writes), then
/// the connection is closed; a target that does not drain is cut after the grace period.
final class TargetTunnelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The WebSocket half; `nil` once it has ended or been told to end.
    var partner: WebSocketTunnelHandler?

    private let settings: TunnelSettings
    private var context: ChannelHandlerContext?
    private var readHeld = false

    init(settings: TunnelSettings) {
        self.settings = settings
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        endPartner()
    }

    func channelInactive(context: ChannelHandlerContext) {
        endPartner()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settings.log.info("tunnel target error: \(error)")
        context.close(promise: nil)
    }

    // MARK: Data

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        partner?.sendToClient(unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.flushToClient()
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

    /// True while bytes written to the target are not piling up.
    var isWritable: Bool {
        context?.channel.isWritable ?? false
    }

    /// The WebSocket side became writable: let a held read through.
    func resumeReading() {
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    // MARK: Calls from the WebSocket half

    /// Writes a payload from the client to the target (flushed later).
    func sendToTarget(_ bytes: ByteBuffer) {
        context?.write(wrapOutboundOut(bytes), promise: nil)
    }

    func flushToTarget() {
        context?.flush()
    }

    /// The WebSocket side ended: deliver what is pending, then close.
    func webSocketEnded() {
        partner = nil
        guard let context else { return }
        let channel = context.channel
        context.flush()
        let cutoff = channel.eventLoop.scheduleTask(in: settings.closeGrace) {
            channel.close(promise: nil)
        }
        channel.closeFuture.whenComplete { _ in cutoff.cancel() }
        context.close(mode: .output).whenComplete { _ in channel.close(promise: nil) }
        if readHeld {
            readHeld = false
            context.read()
        }
    }

    private func endPartner() {
        guard let partner else { return }
        self.partner = nil
        partner.targetEnded()
    }
}
