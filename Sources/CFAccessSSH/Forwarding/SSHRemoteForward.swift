import AccessTransport
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#endif

/// A remote port forward, OpenSSH's `-R [bind_address:]port:host:hostport`: the server listens
/// on `port` and carries each connection it accepts back over the session, in a
/// `forwarded-tcpip` channel of its own; this side connects it to `host:hostPort`.
///
/// ```swift
/// let forward = try SSHRemoteForward(parsing: "8080:localhost:3000")
/// let port = try await ssh.startRemoteForwarding(forward)   // the server listens on `port`
/// let end = await ssh.runForwards()        // or run a command or shell: they forward too
/// ```
public struct SSHRemoteForward: Sendable, Equatable, CustomStringConvertible {
    /// The address the server listens on: nil for its loopback (`localhost`), `*` for every
    /// interface (the server's `GatewayPorts` decides), or an address or name.
    public var bindAddress: String?
    /// The port the server listens on (0: a port the server picks, see
    /// ``SSHSession/startRemoteForwarding(_:onEvent:)``).
    public var port: Int
    /// The host this side connects each forwarded connection to (resolved here).
    public var host: String
    /// The port this side connects to.
    public var hostPort: Int

    /// A forward with every part given.
    public init(bindAddress: String? = nil, port: Int, host: String, hostPort: Int) {
        self.bindAddress = bindAddress
        self.port = port
        self.host = host
        self.hostPort = hostPort
    }

    /// Parses OpenSSH's `[bind_address:]port:host:hostport`; IPv6 addresses go in brackets.
    /// An empty or `*` bind address means every interface. OpenSSH's remote dynamic forward
    /// (`-R [bind_address:]port`, a SOCKS proxy served from here) is refused with a line saying so.
    public init(parsing specification: String) throws(SSHFailure) {
        let bad = SSHFailure(.configuration, "Bad remote forwarding specification '\(specification)'")
        guard let fields = forwardingFields(specification) else { throw bad }
        if fields.count <= 2, let last = fields.last, Int(last) != nil {
            throw SSHFailure(.configuration, "Remote dynamic forwarding (-R '\(specification)', a SOCKS proxy served from here) is "
                             + "not supported: name the target, -R [bind_address:]port:host:hostport")
        }
        guard let parts = forwardingTarget(fields) else { throw bad }
        self.init(bindAddress: parts.bind, port: parts.port, host: parts.host, hostPort: parts.hostPort)
    }

    /// The address sent in the `tcpip-forward` request, as OpenSSH sends it: `localhost` for
    /// none, the empty string (every interface) for `*`.
    var requestedAddress: String {
        guard let bindAddress else { return "localhost" }
        return bindAddress == "*" ? "" : bindAddress
    }

    /// `[bind:]port:host:hostport`, as given to `-R`.
    public var description: String {
        func bracket(_ name: String) -> String { name.contains(":") ? "[\(name)]" : name }
        let head = bindAddress.map { "\(bracket($0)):" } ?? ""
        return "\(head)\(port):\(bracket(host)):\(hostPort)"
    }
}

/// A remote forward the server accepted: the port it listens on, and who hears of its
/// connections.
struct RemoteForwardBinding: Sendable {
    let forward: SSHRemoteForward
    let boundPort: Int
    let onEvent: (@Sendable (SSHForwardEvent) -> Void)?
}

/// Non-blocking TCP connects for the connections the server forwards to this side.
enum OutboundConnect {
    /// A socket connecting (non-blocking) to `host`:`port`, from its address at `from` on, and
    /// that address's index (to go on with the next when this one fails); the reason when no
    /// address could even be tried.
    static func start(host: String, port: Int, from first: Int = 0) -> Result<(fd: Int32, index: Int), SSHFailure> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let list else {
            return .failure(SSHFailure(.localIO, "connect to \(host) port \(port) failed: \(String(cString: gai_strerror(rc)))"))
        }
        defer { freeaddrinfo(list) }
        var why = "no usable address"
        var entry: UnsafeMutablePointer<addrinfo>? = list
        var index = -1
        while let info = entry?.pointee {
            defer { entry = info.ai_next }
            index += 1
            guard index >= first else { continue }
            let fd = socket(info.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { continue }
            if connect(fd, info.ai_addr, info.ai_addrlen) == 0 || errno == EINPROGRESS {
                var one: Int32 = 1
                _ = setsockopt(fd, SocketFlags.tcpLevel, SocketFlags.noDelay, &one, socklen_t(MemoryLayout<Int32>.size))
                return .success((fd, index))
            }
            why = SystemError.current().text
            _ = close(fd)
        }
        return .failure(SSHFailure(.localIO, "connect to \(host) port \(port) failed: \(why)"))
    }

    /// After `poll` found a connecting socket writable (or broken): nil once connected, else why not.
    static func outcome(_ fd: Int32) -> String? {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 else { return SystemError.current().text }
        return error == 0 ? nil : SystemError(error).text
    }
}
