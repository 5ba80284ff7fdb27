#if canImport(Glibc)
import Glibc
#endif

/// A numeric IPv4 or IPv6 address and a port, as `connect` takes it.
struct SocketAddress {
    /// `AF_INET` or `AF_INET6`.
    let family: Int32
    private var storage = sockaddr_storage()
    private let length: socklen_t

    /// The address `numeric` (`192.0.2.1`, `2001:db8::1`) at `port`; nil if it is not numeric.
    init?(numeric: String, port: Int) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, numeric, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            family = AF_INET
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeBytes(of: v4) { source in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) } }
        } else if inet_pton(AF_INET6, numeric, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(truncatingIfNeeded: port).bigEndian)
            family = AF_INET6
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeBytes(of: v6) { source in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: source) } }
        } else {
            return nil
        }
    }

    /// Calls `body` with the address as a `sockaddr` and its length.
    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }
}
