import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// One SSH library's calls for a session (libssh in `LibSSH/`, libssh2 in `LibSSH2/`): only
/// what needs the C library. Everything above them is written once: the session thread,
/// deadlines, waits and retries, the identification scan, the authentication loop and the
/// certificate-first rule (``SSHSessionCore``), and the channel pump with its stall rule,
/// keepalives, forwards and escapes (``ChannelPump``).
///
/// Every call runs on the session's thread. A call that may have to wait for the server is
/// repeated by ``SSHEngine/retry(_:until:_:)`` (which waits in `poll(2)` between tries) while
/// the C call says "again".
protocol SSHEngine: AnyObject, Sendable {
    /// A channel of this library.
    associatedtype Channel

    /// The session's socket and what the session keeps beside the library.
    var state: SessionState { get }
    /// What this library, as linked, can do.
    static var features: SSHEngineFeatures { get }

    // MARK: Socket

    /// Whether the library holds bytes the socket has not taken yet (wait for POLLOUT too).
    var hasQueuedOutput: Bool { get }
    /// Whether the session's socket should be polled for reading now.
    var wantsInput: Bool { get }
    /// Before a wait: sends what is queued. A failure means the connection is gone.
    func beforeWait() -> SSHFailure?
    /// After a wait, with what `poll` found on the session's socket (`pumping`: the pump's wait,
    /// else a request's).
    func afterWait(_ revents: Int16, pumping: Bool)
    /// Once a pump round: sends what is queued, frees what waited for the server. A failure
    /// means the connection is gone.
    func endRound() -> SSHFailure?
    /// Whether the pump may hand the library more channel data now.
    var acceptsChannelData: Bool { get }
    /// Grows whenever something arrives from the server (packets, or bytes).
    var inboundMark: UInt64 { get }
    /// The socket was readable and no channel read took what came: the library keeps it, so
    /// `poll` does not spin on it (nil), or the connection is gone.
    func takeUnread() -> SSHFailure?
    /// Whether the connection is gone (closed by the peer, or broken).
    var isClosed: Bool { get }
    /// The server's SSH_MSG_DISCONNECT reason (visible-safe), once it sent one.
    var serverDisconnect: String? { get }
    /// The library's last error, from doing `what` (`code`: its result, where it gives one).
    func failure(_ code: Int32, _ what: String) -> SSHFailure

    // MARK: Handshake

    /// Sets the algorithm preferences; returns the host-key algorithms offered, in order.
    func prepareHandshake(preferredHostKeys: [String]?) -> [String]
    /// Runs the key exchange (after the identification scan): nil when it succeeded, or the
    /// failure, said plainly where the library lets us see why.
    func handshake(offering hostKeys: [String], until deadline: Date) throws(SSHFailure) -> SSHFailure?
    /// The server's host key after the key exchange.
    func serverHostKey() throws(SSHFailure) -> SSHHostKey

    // MARK: Authentication

    /// The `none` method: nil when it let `user` in, else the methods the server accepts.
    func noneMethod(user: String) throws(SSHFailure) -> SSHAuthenticationMethods?
    /// The server's pre-login banner (visible-safe), once the `none` method ran; nil when it sent
    /// none or the library does not pass it on.
    func issueBanner() -> String?
    /// A password; throws ``SSHFailure/Kind/authenticationFailed`` when refused.
    func offerPassword(user: String, password: String) throws(SSHFailure)
    /// Whether the server would accept the public key `blob` (a query without a signature, as
    /// OpenSSH sends before it asks for a passphrase).
    func probeKey(user: String, publicKey blob: [UInt8]) throws(SSHFailure) -> Bool
    /// A key file, with `certificate` (a `-cert.pub` file) as its public half when given.
    func offerKey(user: String, path: String, certificate: String?, passphrase: String?) throws(SSHFailure)
    /// The agent's identities (only the one whose public blob is `only`, if given).
    func offerAgent(user: String, socketPath: String?, only: [UInt8]?) throws(SSHFailure)
    /// keyboard-interactive: each round (made visible-safe) to `respond`, its answers back.
    func offerKeyboardInteractive(user: String, respond: @escaping @Sendable (SSHKeyboardPrompt) -> [String]) throws(SSHFailure)

    // MARK: Channels

    /// Opens a session channel (`until`: the request's deadline).
    func openSession(until deadline: Date) throws(SSHFailure) -> Channel
    /// Asks for an environment variable: false when the server refused it.
    func requestEnvironment(_ channel: Channel, name: String, value: String, until deadline: Date) throws(SSHFailure) -> Bool
    /// Asks for a pseudo-terminal.
    func requestTerminal(_ channel: Channel, _ terminal: SSHTerminal, until deadline: Date) throws(SSHFailure)
    /// Starts what `request` names: the login shell, a command, or a subsystem.
    func start(_ channel: Channel, _ request: ChannelRequest, until deadline: Date) throws(SSHFailure)
    /// Drives the open of a `direct-tcpip` channel (one at a time; the same arguments until it
    /// is no longer `.again`).
    func openDirect(host: String, port: Int, originHost: String, originPort: Int) -> DirectOpen<Channel>
    /// Forgets a `direct-tcpip` open still in flight.
    func cancelDirectOpen()
    /// Reads from `stream` (0 stdout, 1 stderr) into `buffer`.
    func read(_ channel: Channel, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> ChannelRead
    /// Writes `bytes` (as far as the window takes them).
    func write(_ channel: Channel, _ bytes: UnsafeRawBufferPointer) -> ChannelWrite
    /// Sends EOF: true once sent, false to try again.
    func sendEOF(_ channel: Channel) throws(SSHFailure) -> Bool
    /// The server sent EOF and nothing of it is left unread.
    func isEOF(_ channel: Channel) -> Bool
    /// Data (or its end) waits in the library for `channel`.
    func hasBufferedData(_ channel: Channel) -> Bool
    /// The channel's window takes data.
    func windowIsOpen(_ channel: Channel) -> Bool
    /// Tells the server the terminal's new size; a failure when the connection broke.
    func resize(_ channel: Channel, columns: Int, rows: Int) -> SSHFailure?
    /// Closes our side of the channel without waiting for the server.
    func closeNow(_ channel: Channel)
    /// After the server's EOF: waits (bounded) for its exit status and close; closes our side.
    func finish(_ channel: Channel) -> SSHChannelEnd
    /// Closes and frees a finished forward's channel (or keeps it until the server's close).
    func release(_ channel: Channel)
    /// Frees a channel.
    func free(_ channel: Channel)

    // MARK: Channels the server opens

    /// Asks the server to listen on `address`:`port` for a remote forward (`tcpip-forward`):
    /// the port it listens on, or nil when it refused.
    func listenRemote(address: String, port: Int, until deadline: Date) throws(SSHFailure) -> Int?
    /// Asks the server to pass its agent requests to this side (`auth-agent-req@openssh.com` on
    /// a session channel); a library that cannot accept the agent channels throws.
    func requestAgentForwarding(_ channel: Channel, until deadline: Date) throws(SSHFailure)
    /// A channel the server opened and the library accepted (a remote forward's connection, or
    /// one to the agent), if one waits; called every pump round.
    func acceptInbound() -> InboundChannel<Channel>?

    // MARK: The rest

    /// Called every pump round while keepalives are on: sends OpenSSH's
    /// `keepalive@openssh.com` request when `interval` seconds passed since the last one.
    /// Returns a failure when the connection broke, and the seconds until the next one.
    func keepalive(every interval: TimeInterval) -> (SSHFailure?, TimeInterval)
    /// Sends what is queued for the socket, waiting at most until `deadline`.
    func settle(until deadline: Date)
    /// Sends SSH_MSG_DISCONNECT (bounded), frees the library's session and lets go of the
    /// socket. `handshakeDone`: the key exchange ran.
    func disconnect(description: String, handshakeDone: Bool)
    /// Frees the library's session (no message).
    func free()
}

/// What a session channel runs (RFC 4254 §6.5).
enum ChannelRequest: Sendable, Equatable {
    /// The login shell.
    case shell
    /// A command.
    case exec(String)
    /// A subsystem, e.g. `sftp`.
    case subsystem(String)

    /// The shell for nil, else the command.
    init(command: String?) {
        self = command.map { .exec($0) } ?? .shell
    }

    /// The request's name, for messages.
    var name: String {
        switch self {
        case .shell: "shell"
        case .exec: "exec"
        case .subsystem(let name): "subsystem \(name)"
        }
    }
}

/// What a `direct-tcpip` open came to.
enum DirectOpen<Channel> {
    case opened(Channel)
    /// Not answered yet.
    case again
    /// The server refused it: the reason in OpenSSH's words.
    case refused(String)
    /// The connection broke.
    case lost(SSHFailure)
}

/// A channel the server opened.
enum InboundChannel<Channel> {
    /// A connection to a remote forward listening on `port` on the server, from `origin`
    /// (`address:port`, or empty where the library does not say).
    case forwarded(Channel, port: Int, origin: String)
    /// A connection to the forwarded agent.
    case agent(Channel)
}

/// What a channel read came to.
enum ChannelRead {
    case bytes(Int)
    /// Nothing now.
    case nothing
    /// The server's EOF, and nothing left.
    case eof
    case failed(SSHFailure)
}

/// What a channel write came to.
enum ChannelWrite {
    case wrote(Int)
    /// No window, or the socket is full: later.
    case blocked
    case failed(SSHFailure)
}

/// What a session keeps beside its library, used on the session's thread only.
final class SessionState: @unchecked Sendable {
    let fd: Int32
    let configuration: SSHSession.Configuration
    /// The local forwards the pump serves.
    var forwards: [SSHForwardListener] = []
    /// The remote forwards the server accepted.
    var remoteForwards: [RemoteForwardBinding] = []
    /// Seconds spent waiting for a person inside the current request.
    var promptPause: TimeInterval = 0

    /// The state of a session on `fd`, which is made non-blocking.
    init(fd: Int32, configuration: SSHSession.Configuration) {
        self.fd = fd
        self.configuration = configuration
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// Why `library` could not start a session: its `initialisation` call returned `result`
    /// (not 0), or it could not allocate one.
    static func cannotStart(_ library: String, initialisation: String, result: Int32) -> SSHFailure {
        guard result == 0 else {
            return SSHFailure(.protocolError, "\(library) could not be initialised (\(initialisation) returned \(result))")
        }
        return SSHFailure(.localIO, "\(library) could not create a session (out of memory)")
    }

    /// A deadline `configuration.timeout` from now, for one request. The time a person then
    /// spends answering a keyboard-interactive round inside the request is added to it: the
    /// timeout is for the server, never for the person (issue 16 point 7).
    func deadline() -> Date {
        promptPause = 0
        return Date(timeIntervalSinceNow: configuration.timeout.seconds)
    }

    /// The failure of a request the server did not answer in time.
    func timedOut(_ what: String) -> SSHFailure {
        let seconds = Int(configuration.timeout.seconds.rounded(.up))
        return SSHFailure(.timedOut, "Connection timed out. The SSH server did not answer (\(what)) within \(seconds) s")
    }
}

extension SSHEngine {
    var fd: Int32 { state.fd }

    /// A deadline for one request (see ``SessionState/deadline()``).
    func deadline() -> Date { state.deadline() }

    /// Waits (poll) until the socket is readable (or writable, while output is queued), or the
    /// deadline (moved on by the time spent in prompts) passes (throws `.timedOut`).
    func waitSocket(until requestDeadline: Date?, what: String) throws(SSHFailure) {
        if let failure = beforeWait() { throw failure }
        var events = Int16(POLLIN)
        if hasQueuedOutput { events |= Int16(POLLOUT) }
        while true {
            var milliseconds: Int32 = -1
            let deadline = requestDeadline?.addingTimeInterval(state.promptPause)
            if let deadline {
                let left = deadline.timeIntervalSinceNow
                if left <= 0 { throw state.timedOut(what) }
                milliseconds = Int32(min(left * 1000, 60_000).rounded(.up))
            }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 && errno == EINTR { continue }
            if ready == 0 {
                if let deadline, deadline.timeIntervalSinceNow <= 0 { throw state.timedOut(what) }
                continue
            }
            afterWait(entry.revents, pumping: false)
            return
        }
    }

    /// Repeats `call` while it says "again" (nil), waiting for the socket in between. A session
    /// that closed meanwhile ends the wait with the connection's failure: a library whose
    /// session the server disconnected may keep answering "again".
    /// `onClose`, if given, is the result then instead.
    func retry<T>(_ what: String, until deadline: Date?, onClose: T? = nil, _ call: () -> T?) throws(SSHFailure) -> T {
        while true {
            if let value = call() { return value }
            if isClosed {
                if let onClose { return onClose }
                throw failure(0, what)
            }
            try waitSocket(until: deadline, what: what)
        }
    }

    /// Sends what is still queued, shuts our writing side down and reads (discarding) until
    /// the peer closes or `deadline`.
    func drainAfterShutdown(until deadline: Date) {
        _ = shutdown(fd, SocketFlags.shutWrite)
        var scratch = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&entry, 1, Int32(left * 1000))
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { return }
            let n = recv(fd, &scratch, scratch.count, 0)
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) { return }
        }
    }

    /// Reads and drops the lines a server may send before its identification (RFC 4253 §4.2),
    /// looking at the socket with `MSG_PEEK` so the identification line itself stays for the
    /// library. A NUL byte, a line over 8192 bytes, more than 1024 lines or an identification
    /// no library can take mean the peer is not an SSH server.
    func skipPreIdentification(until deadline: Date) throws(SSHFailure) {
        var scanner = IdentificationScanner()
        var peeked = [UInt8](repeating: 0, count: IdentificationScanner.maxLineLength + 1)
        while true {
            let n = peeked.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, SocketFlags.peek) }
            if n == 0 {
                throw SSHFailure(.connectionLost, "Connection lost: the SSH connection closed before the server identified itself")
            }
            if n < 0 {
                if errno == EINTR { continue }
                guard errno == EAGAIN || errno == EWOULDBLOCK else {
                    throw SSHFailure(.connectionLost, "Connection lost: \(SystemError.current().text)")
                }
                try waitForIdentification(scanner, until: deadline, pause: false)
                continue
            }
            let view = peeked[0..<n]
            guard let newline = view.firstIndex(of: UInt8(ascii: "\n")) else {
                // No whole line yet: refused if it can never become one, else wait for more.
                var probe = scanner
                if case .refused(let why) = probe.feed(view) { throw SSHFailure(.protocolError, "The peer is \(why)") }
                try waitForIdentification(scanner, until: deadline, pause: true)
                continue
            }
            let line = view[...newline]
            if line.starts(with: Array("SSH-".utf8)) {
                var probe = scanner
                if case .refused(let why) = probe.feed(line) { throw SSHFailure(.protocolError, "The peer is \(why)") }
                return
            }
            if case .refused(let why) = scanner.feed(line) { throw SSHFailure(.protocolError, "The peer is \(why)") }
            var dropped = [UInt8](repeating: 0, count: line.count)
            _ = dropped.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        }
    }

    /// Waits for more of the identification: in `poll` when nothing is buffered, in short
    /// naps when a partial line is (a readable socket would wake `poll` at once).
    private func waitForIdentification(_ scanner: IdentificationScanner, until deadline: Date, pause: Bool) throws(SSHFailure) {
        if deadline.timeIntervalSinceNow > 0 {
            if pause {
                usleep(10_000)
                return
            }
            do {
                try waitSocket(until: deadline, what: "handshake")
                return
            } catch {
                // The deadline passed in the wait: said below, with the lines seen.
                guard error.kind == .timedOut else { throw error }
            }
        }
        let seconds = Int(state.configuration.timeout.seconds.rounded(.up))
        if scanner.ignoredLines > 0 {
            throw SSHFailure(.timedOut, "Connection timed out: the server sent \(scanner.ignoredLines) lines but no SSH "
                             + "identification within \(seconds) s (it began \"\(scanner.sample)\")")
        }
        throw state.timedOut("handshake")
    }
}
