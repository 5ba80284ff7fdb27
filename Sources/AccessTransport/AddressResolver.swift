import AccessCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Resolves the edge's name to a numeric address before a dial, with a short cache.
///
/// Resolving here, on the calling thread, keeps a slow resolver off the carrier thread and
/// gives a precise message when the name does not resolve.
final class AddressResolver: @unchecked Sendable {
    private struct Entry { let address: String; let expires: Date }
    private let cache = LockedBox<[String: Entry]>([:])
    private let ttl: TimeInterval

    init(ttl: TimeInterval = 60) { self.ttl = ttl }

    func resolve(host: String, port: Int) -> Result<String, TunnelFailure> {
        let key = "\(host):\(port)"
        let now = Date()
        if let hit = cache.withLock({ $0[key] }), hit.expires > now { return .success(hit.address) }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        defer { if let list { freeaddrinfo(list) } }
        guard rc == 0, let first = list else {
            let reason = String(cString: gai_strerror(rc))
            if rc == EAI_AGAIN || rc == EAI_FAIL {
                return .failure(.networkUnavailable(detail: "resolving \(host): \(reason)"))
            }
            return .failure(.dns(host: host))
        }
        // Prefer IPv4 when both families answer: loopback and most edges speak it, and it avoids
        // a dead IPv6 route stalling the dial.
        var chosen = first
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            if entry.pointee.ai_family == AF_INET { chosen = entry; break }
            cursor = entry.pointee.ai_next
        }
        var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let nameRC = getnameinfo(chosen.pointee.ai_addr, chosen.pointee.ai_addrlen, &buffer,
                                 socklen_t(buffer.count), nil, 0, NI_NUMERICHOST)
        guard nameRC == 0 else {
            return .failure(.internalError("getnameinfo: \(String(cString: gai_strerror(nameRC)))"))
        }
        let address = String(nulTerminated: buffer)
        cache.withLock { $0[key] = Entry(address: address, expires: now.addingTimeInterval(ttl)) }
        return .success(address)
    }

    /// Why the kernel has no way to `address` (no route, network down), or nil when it has one.
    /// A UDP `connect` only looks the route up: no packet is sent.
    static func routeProblem(address: String, port: Int) -> String? {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(address, String(port), &hints, &list) == 0, let entry = list else { return nil }
        defer { freeaddrinfo(list) }
        let fd = socket(entry.pointee.ai_family, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if connect(fd, entry.pointee.ai_addr, entry.pointee.ai_addrlen) == 0 { return nil }
        let error = SystemError.current()
        guard [ENETUNREACH, EHOSTUNREACH, ENETDOWN, EADDRNOTAVAIL].contains(error.code) else { return nil }
        return error.text
    }
}
