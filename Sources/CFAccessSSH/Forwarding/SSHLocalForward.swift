import AccessTransport
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// A local port forward, OpenSSH's `-L [bind_address:]port:host:hostport`: connections accepted
/// on `port` here are carried over the SSH session, each in a `direct-tcpip` channel of its own,
/// to `host:hostPort` as the server sees it.
///
/// ```swift
/// let forward = try SSHLocalForward(parsing: "8080:intranet.example:80")   // 127.0.0.1 and ::1
/// let listener = try SSHForwardListener(forward)
/// await ssh.startForwarding(listener)
/// let end = await ssh.runForwards()        // or run a command or shell: they forward too
/// ```
public struct SSHLocalForward: Sendable, Equatable, CustomStringConvertible {
    /// The local address to listen on: nil for the loopback addresses (`127.0.0.1` and `::1`,
    /// as `localhost`), `*` for every interface, or an address or name.
    public var bindAddress: String?
    /// The local port (0: any free port, see ``SSHForwardListener/port``).
    public var port: Int
    /// The host the server connects to (resolved by the server: `localhost` is the server).
    public var host: String
    /// The port the server connects to.
    public var hostPort: Int
    /// A dynamic forward (OpenSSH's `-D`): each connection names its target itself, as a SOCKS4,
    /// SOCKS4a or SOCKS5 client (`CONNECT`, no authentication); `host` and `hostPort` are unused.
    public var isDynamic = false

    /// A forward with every part given.
    public init(bindAddress: String? = nil, port: Int, host: String, hostPort: Int) {
        self.bindAddress = bindAddress
        self.port = port
        self.host = host
        self.hostPort = hostPort
    }

    /// A dynamic forward (`-D [bind_address:]port`) on `port`.
    public init(dynamicBindAddress bindAddress: String? = nil, port: Int) {
        self.init(bindAddress: bindAddress, port: port, host: "", hostPort: 0)
        isDynamic = true
    }

    /// Parses OpenSSH's `-D [bind_address:]port` (an IPv6 address in brackets).
    public init(parsingDynamic specification: String) throws(SSHFailure) {
        let bad = SSHFailure(.configuration, "Bad dynamic forwarding specification '\(specification)'")
        var text = Substring(specification)
        var bind: String?
        if let colon = text.lastIndex(of: ":") {
            var address = text[..<colon]
            if address.hasPrefix("[") && address.hasSuffix("]") { address = address.dropFirst().dropLast() }
            bind = address.isEmpty ? "*" : String(address)
            text = text[text.index(after: colon)...]
        }
        guard let port = Int(text), (0...65535).contains(port) else { throw bad }
        self.init(dynamicBindAddress: bind, port: port)
    }

    /// Parses OpenSSH's `[bind_address:]port:host:hostport`; IPv6 addresses go in brackets
    /// (`[::1]:8080:[2001:db8::1]:80`). An empty or `*` bind address means every interface.
    public init(parsing specification: String) throws(SSHFailure) {
        guard let fields = forwardingFields(specification), let parts = forwardingTarget(fields) else {
            throw SSHFailure(.configuration, "Bad local forwarding specification '\(specification)'")
        }
        self.init(bindAddress: parts.bind, port: parts.port, host: parts.host, hostPort: parts.hostPort)
    }

    /// `[bind:]port:host:hostport`, as given to `-L`.
    public var description: String {
        func bracket(_ name: String) -> String { name.contains(":") ? "[\(name)]" : name }
        let head = bindAddress.map { "\(bracket($0)):" } ?? ""
        if isDynamic { return "\(head)\(port)" }
        return "\(head)\(port):\(bracket(host)):\(hostPort)"
    }
}

/// The colon-separated fields of an OpenSSH forwarding specification (`-L`, `-R`), an IPv6
/// address in brackets being one field; nil when a bracket is left open.
func forwardingFields(_ specification: String) -> [String]? {
    var fields: [String] = []
    var current = ""
    var bracketed = false
    for character in specification {
        switch character {
        case "[" where current.isEmpty && !bracketed: bracketed = true
        case "]" where bracketed: bracketed = false
        case ":" where !bracketed:
            fields.append(current)
            current = ""
        default: current.append(character)
        }
    }
    guard !bracketed else { return nil }
    fields.append(current)
    return fields
}

/// The parts of `[bind_address:]port:host:hostport` from its fields (``forwardingFields(_:)``):
/// an empty or `*` bind address is `*` (every interface); nil when a part is missing or bad.
func forwardingTarget(_ fields: [String]) -> (bind: String?, port: Int, host: String, hostPort: Int)? {
    guard fields.count == 3 || fields.count == 4 else { return nil }
    let bind: String? = fields.count == 4 ? fields[0] : nil
    let rest = Array(fields.suffix(3))
    guard let port = Int(rest[0]), (0...65535).contains(port),
          !rest[1].isEmpty, !rest[1].contains(where: { $0.isWhitespace || $0.isNewline }),
          let hostPort = Int(rest[2]), (1...65535).contains(hostPort) else { return nil }
    return (bind.map { $0.isEmpty ? "*" : $0 }, port, rest[1], hostPort)
}

/// What happens to the connections of a forward, for a caller that reports them (OpenSSH
/// prints refusals as `channel N: open failed: …`).
public enum SSHForwardEvent: Sendable, Equatable {
    /// A connection from `origin` (`address:port`) was accepted and its channel opened (a local
    /// forward), or connected here (a remote forward's; `the server` where the library does not
    /// give the origin).
    case opened(origin: String)
    /// The server refused the channel for a connection from `origin` (`reason` the server's, e.g.
    /// `connect failed`), or a remote forward's connection could not be connected here
    /// (`reason`: `connect to localhost port 3000 failed: Connection refused`); the connection
    /// was closed.
    case openFailed(origin: String, reason: String)
}

/// The listening sockets of one ``SSHLocalForward``, bound when created and kept across sessions
/// (a reconnect does not give the port away). A session accepts on it while one of its channels
/// runs, after ``SSHSession/startForwarding(_:)``; connections that arrive between sessions wait
/// in the kernel's backlog. Close it (or let it go) once no session uses it.
public final class SSHForwardListener: Sendable {
    /// The forward.
    public let forward: SSHLocalForward
    /// The port listened on (the one chosen by the system when ``SSHLocalForward/port`` is 0).
    public let port: Int
    /// The addresses listened on, as `address:port` (`[::1]:port` for IPv6).
    public let addresses: [String]
    let descriptors: [Int32]
    let onEvent: (@Sendable (SSHForwardEvent) -> Void)?
    private let closed = LockedBox(false)

    /// Binds and listens for `forward` (non-blocking sockets). `onEvent` hears about each
    /// connection (on the session's thread: return quickly). Throws ``SSHFailure/Kind/localIO``
    /// when no address can be bound (e.g. `Address already in use`).
    public init(_ forward: SSHLocalForward, onEvent: (@Sendable (SSHForwardEvent) -> Void)? = nil) throws(SSHFailure) {
        let wildcard = forward.bindAddress == "*"
        let loopback = forward.bindAddress == nil || forward.bindAddress == "localhost"
        let candidates: [String]
        if wildcard {
            candidates = ["0.0.0.0", "::"]
        } else if loopback {
            candidates = ["127.0.0.1", "::1"]
        } else {
            candidates = [forward.bindAddress!]
        }
        var descriptors: [Int32] = []
        var addresses: [String] = []
        var port = forward.port
        var firstError: String?
        for (index, candidate) in candidates.enumerated() {
            do throws(SSHFailure) {
                for (fd, shown) in try Self.listen(on: candidate, port: port, onlyV6: wildcard) {
                    descriptors.append(fd)
                    if port == 0 { port = Self.boundPort(fd) }
                    addresses.append(shown.contains(":") ? "[\(shown)]:\(port)" : "\(shown):\(port)")
                }
            } catch {
                // The second loopback or wildcard family is optional (IPv6 may be off), the
                // first and any explicit address are not.
                if index == 0 || !(wildcard || loopback) { firstError = error.message }
            }
            if firstError != nil { break }
        }
        if let firstError {
            descriptors.forEach { _ = Glibc.close($0) }
            throw SSHFailure(.localIO, firstError)
        }
        guard !descriptors.isEmpty else {
            throw SSHFailure(.localIO, "Cannot listen for the forward \(forward): no address to bind")
        }
        self.forward = forward
        self.port = port
        self.addresses = addresses
        self.descriptors = descriptors
        self.onEvent = onEvent
    }

    deinit { close() }

    /// Stops listening (idempotent). Only once no session accepts on it any more.
    public func close() {
        let first = closed.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        if first { descriptors.forEach { _ = Glibc.close($0) } }
    }

    var isClosed: Bool { closed.withLock { $0 } }

    /// Listening sockets for `address` (numeric or a name), each with the numeric address.
    private static func listen(on address: String, port: Int, onlyV6: Bool) throws(SSHFailure) -> [(Int32, String)] {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let shownPort = String(port)
        let rc = getaddrinfo(address, shownPort, &hints, &list)
        guard rc == 0, let list else {
            throw SSHFailure(.localIO, "Cannot listen on \(address):\(port): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var result: [(Int32, String)] = []
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let info = entry?.pointee {
            defer { entry = info.ai_next }
            let fd = socket(info.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { continue }
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            if info.ai_family == AF_INET6 && onlyV6 {
                _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
            }
            let shown = numericHost(info.ai_addr, info.ai_addrlen) ?? address
            guard bind(fd, info.ai_addr, info.ai_addrlen) == 0, Glibc.listen(fd, 128) == 0 else {
                let why = SystemError.current().text
                _ = Glibc.close(fd)
                result.forEach { _ = Glibc.close($0.0) }
                let where_ = shown.contains(":") ? "[\(shown)]:\(port)" : "\(shown):\(port)"
                throw SSHFailure(.localIO, "Cannot listen on \(where_): \(why)")
            }
            result.append((fd, shown))
            break   // one socket per candidate address is enough
        }
        guard !result.isEmpty else {
            throw SSHFailure(.localIO, "Cannot listen on \(address):\(port): no usable address")
        }
        return result
    }

    private static func boundPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard rc == 0 else { return 0 }
        return peerAddress(storage).port
    }
}

/// The numeric host of a socket address.
func numericHost(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> String? {
    guard let address else { return nil }
    var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    guard getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else { return nil }
    return host.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// Host and port of an IPv4 or IPv6 socket address.
func peerAddress(_ storage: sockaddr_storage) -> (host: String, port: Int) {
    var copy = storage
    let length = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let host = withUnsafePointer(to: &copy) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { numericHost($0, length) }
    } ?? "?"
    let port: Int
    switch Int32(storage.ss_family) {
    case AF_INET:
        port = withUnsafePointer(to: &copy) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) } }
    case AF_INET6:
        port = withUnsafePointer(to: &copy) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) } }
    default:
        port = 0
    }
    return (host, port)
}
