import AccessCore
import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A TCP listening socket on a local address whose accepted connections are handed to a callback.
package final class LoopbackListener: @unchecked Sendable {
    /// The port actually bound (the real one when 0 was asked).
    package let port: Int
    private let fd: Int32
    private let closed = LockedBox(false)
    private let stopped = DispatchSemaphore(value: 0)

    /// Binds and listens. Throws a configuration failure with a plain message when the address is
    /// taken or not local.
    package init(address: ListenAddress, backlog: Int32 = 511) throws(TunnelFailure) {
        let family = address.isIPv6 ? AF_INET6 : AF_INET
        let s = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard s >= 0 else { throw SystemError.current("socket()").tunnelFailure }
        var one: Int32 = 1
        _ = setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let rc: Int32
        if address.isIPv6 {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_port = in_port_t(UInt16(address.port).bigEndian)
            _ = inet_pton(AF_INET6, address.host, &sa.sin6_addr)
            rc = withUnsafePointer(to: &sa) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = in_port_t(UInt16(address.port).bigEndian)
            _ = inet_pton(AF_INET, address.host, &sa.sin_addr)
            rc = withUnsafePointer(to: &sa) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        let shown = address.description
        if rc != 0 {
            let error = SystemError.current()
            Glibc.close(s)
            if error.code == EADDRINUSE {
                throw .configuration(ConfigurationError(
                    "\(shown) is already in use: pick another port, or port 0 for any free one"), subject: .listenAddress)
            }
            throw .configuration(ConfigurationError("cannot listen on \(shown): \(error.text)"))
        }
        guard listen(s, backlog) == 0 else {
            let error = SystemError.current("listen()")
            Glibc.close(s)
            throw error.tunnelFailure
        }
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) }
        }
        let boundPort: Int = withUnsafePointer(to: &storage) { p in
            if address.isIPv6 {
                return p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
            return p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
        fd = s
        port = boundPort
    }

    deinit { close() }

    /// Accepts on a dedicated thread until `close()`, handing each connected socket to `onAccept`
    /// (which then owns it).
    package func startAccepting(_ onAccept: @escaping @Sendable (Int32) -> Void) {
        PThread.start(name: "cfat accept") { [self] in
            while !closed.withLock({ $0 }) {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    if errno == EMFILE || errno == ENFILE {
                        // Out of descriptors: back off instead of spinning.
                        usleep(50_000)
                        continue
                    }
                    break
                }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                var one: Int32 = 1
                _ = setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                onAccept(client)
            }
            stopped.signal()
        }
    }

    /// Stops accepting and closes the listening socket (the port is free again when this returns).
    package func close() {
        let first = closed.withLock { c -> Bool in defer { c = true }; return !c }
        guard first else { return }
        _ = shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}
