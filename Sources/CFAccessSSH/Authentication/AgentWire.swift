import AccessCore
import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The ssh-agent protocol as far as this client needs it (draft-miller-ssh-agent): a message is
/// a 4-byte big-endian length and a body whose first byte is its type. Blocking calls on a
/// Unix socket, for a thread of our own (never Swift's pool).
enum AgentWire {
    /// SSH_AGENTC_REQUEST_IDENTITIES.
    static let requestIdentities: UInt8 = 11
    /// SSH_AGENT_IDENTITIES_ANSWER.
    static let identitiesAnswer: UInt8 = 12
    /// The largest message accepted from an agent (OpenSSH's own limit is 256 KiB).
    static let maximumMessage = 256 * 1024

    /// A connected socket to the agent at `socketPath` (nil: `SSH_AUTH_SOCK`).
    static func connect(socketPath: String?) throws(SSHFailure) -> Int32 {
        let name = socketPath ?? "SSH_AUTH_SOCK"
        guard let path = socketPath ?? getenv("SSH_AUTH_SOCK").map({ String(cString: $0) }), !path.isEmpty else {
            throw SSHFailure(.configuration, "cannot reach the ssh-agent: SSH_AUTH_SOCK is not set")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw SSHFailure(.configuration, "cannot reach the ssh-agent at \(name): the socket path is too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SSHFailure(.localIO, "cannot create a socket: \(SystemError.current().text)") }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw SSHFailure(.configuration, "cannot reach the ssh-agent at \(name)")
        }
        return fd
    }

    /// Reads exactly `count` bytes; nil on EOF or an error.
    static func readExactly(_ fd: Int32, _ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let n = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + offset, count - offset, 0) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            offset += n
        }
        return bytes
    }

    /// Reads one message body; nil on EOF, an error or an oversized length.
    static func readMessage(_ fd: Int32) -> [UInt8]? {
        guard let header = readExactly(fd, 4) else { return nil }
        let length = Int(header[0]) << 24 | Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
        guard length > 0, length <= maximumMessage else { return nil }
        return readExactly(fd, length)
    }

    /// Writes one message body with its length.
    static func writeMessage(_ fd: Int32, _ body: [UInt8]) -> Bool {
        let count = UInt32(body.count)
        return FileDescriptors.writeAll(fd, [UInt8(count >> 24), UInt8(count >> 16 & 0xff), UInt8(count >> 8 & 0xff), UInt8(count & 0xff)] + body, socket: true)
    }

    /// The identities of an identities answer (`body` starts with its type), or nil if malformed.
    static func parseIdentities(_ body: [UInt8]) -> [(blob: [UInt8], comment: [UInt8])]? {
        guard body.first == identitiesAnswer else { return nil }
        var reader = SSHWireReader(Array(body[1...]))
        guard let count = try? reader.uint32(), count <= 4096 else { return nil }
        var list: [(blob: [UInt8], comment: [UInt8])] = []
        for _ in 0..<count {
            guard let blob = try? reader.string(), let comment = try? reader.string() else { return nil }
            list.append((blob, comment))
        }
        return list
    }

    /// An identities answer holding `identities`.
    static func identitiesBody(_ identities: [(blob: [UInt8], comment: [UInt8])]) -> [UInt8] {
        var body: [UInt8] = [identitiesAnswer]
        func put(_ value: Int) { body += [UInt8(value >> 24 & 0xff), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)] }
        put(identities.count)
        for identity in identities {
            put(identity.blob.count)
            body += identity.blob
            put(identity.comment.count)
            body += identity.comment
        }
        return body
    }

    /// The identities of the agent at `socketPath`, blocking.
    static func listIdentities(socketPath: String?) throws(SSHFailure) -> [SSHAgentIdentity] {
        let fd = try connect(socketPath: socketPath)
        defer { close(fd) }
        guard writeMessage(fd, [requestIdentities]), let reply = readMessage(fd) else {
            throw SSHFailure(.localIO, "the ssh-agent did not list its keys")
        }
        guard let identities = parseIdentities(reply) else {
            throw SSHFailure(.localIO, "the ssh-agent's list of keys is malformed")
        }
        return identities.map { SSHAgentIdentity(publicKey: $0.blob, comment: ServerText.visible($0.comment)) }
    }
}

/// The agent libssh talks to during an agent offer: one end of a socket pair handed to libssh,
/// the other served by a thread of its own that passes each request to the real agent and its
/// answer back, except that the list of identities is cut to the one key an offer names
/// (``SSHAuthenticationOffer/agentKey(socketPath:publicKey:)``: OpenSSH tries `-i` keys before
/// the agent's others, and `IdentitiesOnly` keeps them out). libssh alone would try every key.
final class AgentProxy: @unchecked Sendable {
    /// The end libssh owns (it closes it when the session is freed).
    let libsshEnd: Int32
    private let ourEnd: Int32
    private struct Setting {
        var socketPath: String?
        var only: [UInt8]?
        var upstream: Int32 = -1
        var upstreamPath: String??
        var closed = false
    }
    private let setting = LockedBox(Setting())

    init() throws(SSHFailure) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SSHFailure(.localIO, "cannot create a socket pair: \(SystemError.current().text)")
        }
        libsshEnd = fds[0]
        ourEnd = fds[1]
        PThread.start(name: "ssh agent proxy") { [self] in serve() }
    }

    /// The next offer's agent and key filter (nil: every key). Connects now, so that an
    /// unreachable agent is said before libssh tries.
    func use(socketPath: String?, only: [UInt8]?) throws(SSHFailure) {
        let current = setting.withLock { ($0.upstream, $0.upstreamPath) }
        var fd = current.0
        if fd < 0 || current.1 != .some(socketPath) {
            fd = try AgentWire.connect(socketPath: socketPath)
        }
        let old = setting.withLock { value -> Int32 in
            let previous = value.upstream
            value.socketPath = socketPath
            value.only = only
            value.upstream = fd
            value.upstreamPath = .some(socketPath)
            return previous == fd ? -1 : previous
        }
        if old >= 0 { close(old) }
    }

    /// Closes the connection to the agent. The thread ends when libssh closes its end (this
    /// end stays open until then: libssh writes to it without MSG_NOSIGNAL, and a write to a
    /// closed pair would raise SIGPIPE in the host process).
    func stop() {
        let fd = setting.withLock { value -> Int32 in
            value.closed = true
            defer { value.upstream = -1 }
            return value.upstream
        }
        if fd >= 0 { close(fd) }
    }

    private func serve() {
        while let request = AgentWire.readMessage(ourEnd) {
            let (upstream, only) = setting.withLock { ($0.upstream, $0.only) }
            var reply: [UInt8] = [5]   // SSH_AGENT_FAILURE
            if upstream >= 0, AgentWire.writeMessage(upstream, request), let answer = AgentWire.readMessage(upstream) {
                reply = answer
                if request.first == AgentWire.requestIdentities, let only, let identities = AgentWire.parseIdentities(answer) {
                    reply = AgentWire.identitiesBody(identities.filter { $0.blob == only })
                }
            }
            guard AgentWire.writeMessage(ourEnd, reply) else { return }
        }
    }

    deinit {
        stop()
        close(ourEnd)
    }
}
