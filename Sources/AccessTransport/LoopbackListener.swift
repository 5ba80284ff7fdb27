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
    /// The address bound, numeric (`127.0.0.1`, `::1`).
    package let host: String
    private let fd: Int32
    /// The socket was handed over (systemd socket activation): another process holds it too, so
    /// it is never shut down, only closed, and accepting polls instead of blocking (its file status
    /// flags, O_NONBLOCK included, are shared with that process).
    private let inherited: Bool
    private let closed = LockedBox(false)
    private let stopped = DispatchSemaphore(value: 0)
    private let accepting = LockedBox(false)

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
        host = address.host
        inherited = false
    }

    /// Takes over the listening TCP socket `descriptor` (systemd socket activation, `LISTEN_FDS`).
    /// Throws, leaving it open, unless it is a listening stream socket on a loopback address (or
    /// `allowNonLoopback`).
    package init(adopting descriptor: Int32, allowNonLoopback: Bool) throws(TunnelFailure) {
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(descriptor, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        guard let type = option(SO_TYPE), type == Int32(SOCK_STREAM.rawValue), option(SO_ACCEPTCONN) == 1 else {
            throw .configuration(ConfigurationError(
                "descriptor \(descriptor) handed over (LISTEN_FDS) is not a listening stream socket: "
                    + "give the socket unit a ListenStream= line"), subject: .listenAddress)
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard let (numeric, boundPort) = SocketAddress.numeric(storage) else {
            throw .configuration(ConfigurationError(
                "descriptor \(descriptor) handed over (LISTEN_FDS) is not a TCP socket: give the socket unit a ListenStream= line with an address and port"),
                subject: .listenAddress)
        }
        let shown = HostText.withPort(numeric, boundPort)
        guard allowNonLoopback || (try? ListenAddress.parse(shown, allowNonLoopback: false)) != nil else {
            throw .configuration(ConfigurationError(
                "the socket handed over (LISTEN_FDS) is bound to \(shown), not a loopback address: bind it to 127.0.0.1 "
                    + "(ListenStream=127.0.0.1:PORT in the socket unit), or \(ConfigurationError.Setting.allowNonLoopback.placeholder)"))
        }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        fd = descriptor
        port = boundPort
        host = numeric
        inherited = true
    }

    deinit { close() }

    /// Accepts on a dedicated thread until `close()`, handing each connected socket to `onAccept`
    /// (which then owns it).
    package func startAccepting(_ onAccept: @escaping @Sendable (Int32) -> Void) {
        accepting.withLock { $0 = true }
        PThread.start(name: "cfat accept") { [self] in
            while !closed.withLock({ $0 }) {
                if inherited {
                    // Woken at least four times a second to see `closed`: the socket is never
                    // shut down, which would end it for the process that handed it over too.
                    var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    if poll(&ready, 1, 250) <= 0 { continue }
                }
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED || errno == EAGAIN || errno == EWOULDBLOCK { continue }
                    if errno == EMFILE || errno == ENFILE {
                        // Out of descriptors: back off instead of spinning.
                        usleep(50_000)
                        continue
                    }
                    break
                }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                var one: Int32 = 1
                _ = setsockopt(client, SocketFlags.tcpLevel, SocketFlags.noDelay, &one, socklen_t(MemoryLayout<Int32>.size))
                onAccept(client)
            }
            stopped.signal()
        }
    }

    /// Stops accepting and closes the listening socket (the port is free again when this returns).
    package func close() {
        let first = closed.withLock { c -> Bool in defer { c = true }; return !c }
        guard first else { return }
        if inherited {
            // What waits in the backlog stays there for the next process the socket starts; a
            // connection being accepted now is handed on before this returns.
            if accepting.withLock({ $0 }) { stopped.wait() }
        } else {
            _ = shutdown(fd, SocketFlags.shutBoth)
        }
        Glibc.close(fd)
    }
}
