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

    /// The numeric address and port of an IPv4 or IPv6 socket address (`getsockname`'s), or nil
    /// for another family.
    static func numeric(_ storage: sockaddr_storage) -> (String, Int)? {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        var copy = storage
        return withUnsafePointer(to: &copy) { pointer -> (String, Int)? in
            switch Int32(storage.ss_family) {
            case AF_INET:
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                    var address = v4.pointee.sin_addr
                    guard inet_ntop(AF_INET, &address, &text, socklen_t(text.count)) != nil else { return nil }
                    return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                            Int(UInt16(bigEndian: v4.pointee.sin_port)))
                }
            case AF_INET6:
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                    var address = v6.pointee.sin6_addr
                    guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return nil }
                    return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                            Int(UInt16(bigEndian: v6.pointee.sin6_port)))
                }
            default:
                return nil
            }
        }
    }

    /// Calls `body` with the address as a `sockaddr` and its length.
    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }
}
