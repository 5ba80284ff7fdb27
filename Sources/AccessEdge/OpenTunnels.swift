import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// The WebSocket channels of every tunnel that is open now, so the admin call `drop-tunnels`
/// can cut them all at once (a dead edge, for tests of the client's loss handling).
final class OpenTunnels: @unchecked Sendable {
    private let lock = NSLock()
    private var channels: [ObjectIdentifier: any Channel] = [:]

    /// Remembers `channel` until it closes.
    func add(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        lock.lock()
        channels[key] = channel
        lock.unlock()
        channel.closeFuture.whenComplete { [weak self] _ in
            guard let self else { return }
            self.lock.lock()
            self.channels[key] = nil
            self.lock.unlock()
        }
    }

    /// Resets every open tunnel's client connection: SO_LINGER 0 and a close below the TLS
    /// handler, so the client gets a TCP RST with no WebSocket Close frame and no TLS
    /// close_notify. Returns how many were dropped.
    func dropAll() -> Int {
        lock.lock()
        let open = Array(channels.values)
        channels.removeAll()
        lock.unlock()
        for channel in open {
            channel.eventLoop.execute {
                Self.reset(channel)
            }
        }
        return open.count
    }

    private static func reset(_ channel: any Channel) {
        guard channel.isActive else { return }
        if let options = channel as? any SocketOptionProvider {
            _ = options.setSoLinger(linger(l_onoff: 1, l_linger: 0))
        }
        // Closing from the TLS handler's own context skips it: nothing more is written.
        if let tls = try? channel.pipeline.syncOperations.context(handlerType: NIOSSLServerHandler.self) {
            tls.close(promise: nil)
        } else {
            channel.close(promise: nil)
        }
    }
}
