import ArgumentParser
import NIOCore
import NIOPosix

/// The plain TCP test servers behind the edge.
enum TargetKind: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Returns every byte it receives.
    case echo
    /// Reads and discards.
    case sink
    /// Writes N bytes of a repeating pattern, then shuts down its write side.
    case source
}

/// Starts a `TargetKind` server.
struct TargetServer: Sendable {
    var kind: TargetKind
    var listen: HostPort
    /// Bytes each `source` connection sends.
    var sourceBytes: Int

    /// Binds the listener; the returned channel's `localAddress` has the real port.
    func start(group: any EventLoopGroup) throws -> Channel {
        let kind = self.kind
        let sourceBytes = self.sourceBytes
        return try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: SocketTuning.waterMarks)
            .childChannelOption(.recvAllocator, value: SocketTuning.receiveAllocator)
            .childChannelOption(.allowRemoteHalfClosure, value: kind != .source)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler: any ChannelHandler
                    switch kind {
                    case .echo: handler = EchoHandler()
                    case .sink: handler = SinkHandler()
                    case .source: handler = SourceHandler(totalBytes: sourceBytes)
                    }
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .bind(host: listen.host, port: listen.port)
            .wait()
    }
}

/// Echoes everything back. Reads are held while its own writes are piling up, so a client
/// that sends without reading is slowed down instead of filling memory.
/// On the peer's half-close it finishes the echo, then closes.
final class EchoHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var readHeld = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.write(data, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            context.read()
        } else {
            readHeld = true
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable && readHeld {
            readHeld = false
            context.read()
        }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            closeAfterPendingWrites(context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Reads and discards everything; closes when the peer half-closes.
final class SinkHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event {
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Writes `totalBytes` of the pattern `byte[i] = i % 251` while the channel is writable,
/// then shuts down its write side (after pending writes). Input is read and discarded.
final class SourceHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Pattern chunk: a multiple of 251 bytes, so consecutive chunks continue the pattern.
    private static let chunkSize = 251 * 256
    private let totalBytes: Int
    private var sent = 0
    private var pattern: ByteBuffer?
    private var pumping = false

    init(totalBytes: Int) {
        self.totalBytes = totalBytes
    }

    func channelActive(context: ChannelHandlerContext) {
        var chunk = context.channel.allocator.buffer(capacity: Self.chunkSize)
        for index in 0..<Self.chunkSize {
            chunk.writeInteger(UInt8(truncatingIfNeeded: index % 251))
        }
        pattern = chunk
        pump(context: context)
        context.fireChannelActive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        pump(context: context)
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func pump(context: ChannelHandlerContext) {
        // A write or flush may re-enter via channelWritabilityChanged: the outer call goes on.
        guard let pattern, !pumping else { return }
        pumping = true
        defer { pumping = false }
        repeat {
            while sent < totalBytes && context.channel.isWritable {
                let length = min(pattern.readableBytes, totalBytes - sent)
                sent += length
                context.write(wrapOutboundOut(pattern.getSlice(at: pattern.readerIndex, length: length)!),
                              promise: nil)
            }
            context.flush()
            // The flush may have made room again; its writability event was swallowed above.
        } while sent < totalBytes && context.channel.isWritable
        if sent >= totalBytes {
            // Done: drop the pattern (so later writability changes do nothing) and half-close.
            self.pattern = nil
            context.close(mode: .output, promise: nil)
        }
    }
}

/// Closes after everything written so far has reached the socket (a zero-length write
/// completes only after the writes queued before it).
private func closeAfterPendingWrites(context: ChannelHandlerContext) {
    let channel = context.channel
    context.writeAndFlush(NIOAny(channel.allocator.buffer(capacity: 0))).whenComplete { _ in
        channel.close(promise: nil)
    }
}
