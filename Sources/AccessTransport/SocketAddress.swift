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
        var copy = storage
        return withUnsafeMutableBytes(of: &copy) { raw -> (String, Int)? in
            let family = Int32(storage.ss_family)
            // Where the address and the port (network order) sit in the family's structure.
            let address: UnsafeMutableRawPointer
            let port: UInt16
            switch family {
            case AF_INET:
                let v4 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                address = raw.baseAddress! + MemoryLayout<sockaddr_in>.offset(of: \.sin_addr)!
                port = v4.pointee.sin_port
            case AF_INET6:
                let v6 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                address = raw.baseAddress! + MemoryLayout<sockaddr_in6>.offset(of: \.sin6_addr)!
                port = v6.pointee.sin6_port
            default:
                return nil
            }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            guard inet_ntop(family, address, &text, socklen_t(text.count)) != nil else { return nil }
            return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                    Int(UInt16(bigEndian: port)))
        }
    }

    /// Calls `body` with the address as a `sockaddr` and its length.
    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }
}
