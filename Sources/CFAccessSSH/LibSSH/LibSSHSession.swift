import AccessCore
import AccessTransport
import CFAccessTCP
import FoundationEssentials
import SystemPackage
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// libssh's one-time global initialisation (crypto back end), done on first use.
private let libsshInitialised: Int32 = ssh_init()

/// The libssh engine of ``SSHSession``: libssh runs non-blocking on one thread of the session's
/// own; every method hops to it, so calls run one after another in order. A call that must wait
/// for the server waits in `poll(2)` on the socket, bounded by the configuration's timeout while
/// connecting and authenticating. libssh reads no configuration file and no known_hosts file of
/// its own.
final class LibSSHSession: SSHSessionEngine, PumpingSession, @unchecked Sendable {
    typealias Configuration = SSHSession.Configuration
    let fd: Int32
    let raw: OpaquePointer
    let configuration: Configuration
    private let thread: SessionThread
    private let stream: TunnelStream?
    let box: SessionBox
    private var freed = false
    private var handshakeDone = false
    private var authenticated = false
    private let validatedKey = LockedBox<SSHHostKey?>(nil)

    /// The server's host key, once ``handshake()`` returned (the delegate accepted it).
    var hostKey: SSHHostKey? { validatedKey.withLock { $0 } }

    /// Creates a session on a tunnel stream; the session owns the stream and closes it in
    /// ``disconnect(description:)``.
    convenience init(stream: TunnelStream, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: stream.fileDescriptor.rawValue, configuration: configuration, owning: stream)
    }

    /// Creates a session on `fileDescriptor`, a connected stream socket (libssh calls send/recv
    /// on it) that the caller keeps owning: the escape hatch for a socket that is not a tunnel
    /// stream. The descriptor is made non-blocking.
    convenience init(fileDescriptor: FileDescriptor, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: fileDescriptor.rawValue, configuration: configuration, owning: nil)
    }

    private init(descriptor fileDescriptor: Int32, configuration: Configuration, owning stream: TunnelStream?) throws(SSHFailure) {
        guard libsshInitialised == 0 else {
            throw SSHFailure(.protocolError, "libssh could not be initialised (ssh_init returned \(libsshInitialised))")
        }
        guard let session = ssh_new() else {
            throw SSHFailure(.localIO, "libssh could not create a session (out of memory)")
        }
        let flags = fcntl(fileDescriptor, F_GETFL)
        _ = fcntl(fileDescriptor, F_SETFL, flags | O_NONBLOCK)
        // libssh closes the socket it is given (on ssh_disconnect, ssh_free, and some errors), but
        // the stream (or the caller) owns the descriptor: libssh gets a duplicate of its own.
        var socket = fcntl(fileDescriptor, F_DUPFD_CLOEXEC, 0)
        guard socket >= 0 else {
            ssh_free(session)
            throw SSHFailure(.localIO, "cannot duplicate the socket: \(String(cString: strerror(errno)))")
        }
        var no: Int32 = 0
        // No ~/.ssh/config or /etc/ssh/ssh_config of libssh's own (ours is read by the tool).
        // The log verbosity is left alone: libssh 0.10 makes a session's verbosity the log level
        // of the thread that sets it (`ssh_set_log_level`, thread-local), here the caller's,
        // which belongs to the host. The session's own thread keeps the default, 0: no logs.
        _ = ssh_options_set(session, SSH_OPTIONS_PROCESS_CONFIG, &no)
        _ = ssh_options_set(session, SSH_OPTIONS_FD, &socket)
        _ = ssh_options_set(session, SSH_OPTIONS_HOST, "ssh")
        // Host keys are ours to check (the delegate); libssh must not read known_hosts files to
        // reorder the host-key algorithms we ask for.
        _ = ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, "/dev/null")
        _ = ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null")
        ssh_set_blocking(session, 0)
        self.fd = fileDescriptor
        self.raw = session
        self.configuration = configuration
        self.stream = stream
        self.thread = SessionThread(name: "ssh session \(fileDescriptor)")
        self.box = SessionBox()
        // Counts what arrives from the server (the keepalive loss rule: silence).
        ssh_set_counters(session, nil, box.received)
    }

    deinit {
        if !freed {
            let raw = self.raw
            let stream = self.stream
            // Free on the session's thread, after anything still queued there.
            if !thread.submit({
                ssh_free(raw)
                stream?.close()
            }) {
                ssh_free(raw)
                stream?.close()
            }
        }
        thread.stop()
    }

    // MARK: Running on the session's thread

    /// Runs `body` on the session's thread and returns its result.
    func onThread<T: Sendable>(_ body: @escaping @Sendable (LibSSHSession) throws(SSHFailure) -> T) async throws(SSHFailure) -> T {
        try await thread.run { [self] () throws(SSHFailure) -> T in try body(self) }
    }

    /// A deadline `configuration.timeout` from now, for one request. The time a person then
    /// spends answering a keyboard-interactive round inside the request is added to it: the
    /// timeout is for the server, never for the person (issue 16 point 7).
    func deadline() -> Date {
        box.promptPause = 0
        return Date(timeIntervalSinceNow: configuration.timeout.seconds)
    }

    /// Waits (poll) until the socket is readable (or writable, while libssh has bytes to send),
    /// or the deadline (moved on by the time spent in prompts) passes (throws `.timedOut`).
    func waitSocket(until requestDeadline: Date?, what: String) throws(SSHFailure) {
        var events = Int16(POLLIN)
        if writePending { events |= Int16(POLLOUT) }
        while true {
            var milliseconds: Int32 = -1
            let deadline = requestDeadline?.addingTimeInterval(box.promptPause)
            if let deadline {
                let left = deadline.timeIntervalSinceNow
                if left <= 0 { throw timedOut(what) }
                milliseconds = Int32(min(left * 1000, 60_000).rounded(.up))
            }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 && errno == EINTR { continue }
            if ready == 0 {
                if let deadline, deadline.timeIntervalSinceNow <= 0 { throw timedOut(what) }
                continue
            }
            return
        }
    }

    private func timedOut(_ what: String) -> SSHFailure {
        let seconds = Int(configuration.timeout.seconds.rounded(.up))
        return SSHFailure(.timedOut, "Connection timed out. The SSH server did not answer (\(what)) within \(seconds) s")
    }

    /// Repeats `call` while libssh says `again` (SSH_AGAIN, or SSH_AUTH_AGAIN for the user
    /// authentication calls), waiting for the socket in between.
    ///
    /// A server's SSH_MSG_DISCONNECT (sshd's "Too many authentication failures", say) puts
    /// libssh's session in its error state and closes its socket, yet a waiting call keeps
    /// answering `again`: a closed session ends the wait with SSH_ERROR (which is also
    /// SSH_AUTH_ERROR), and ``failure(_:)`` then gives the server's reason.
    func retry(_ what: String, until deadline: Date?, again: Int32 = SSH_AGAIN, _ call: () -> Int32) throws(SSHFailure) -> Int32 {
        while true {
            let rc = call()
            if rc != again { return rc }
            if isClosed { return SSH_ERROR }
            try waitSocket(until: deadline, what: what)
        }
    }

    /// libssh's last error message (visible-safe).
    func lastErrorText() -> String {
        guard let message = ssh_get_error(UnsafeMutableRawPointer(raw)) else { return "unknown error" }
        let text = ServerText.visible(String(cString: message))
        return text.isEmpty ? "unknown error" : text
    }

    /// Whether libssh's last error is a refused request (not a broken connection).
    var lastErrorWasDenied: Bool { ssh_get_error_code(UnsafeMutableRawPointer(raw)) == SSH_REQUEST_DENIED.rawValue }

    /// The server's SSH_MSG_DISCONNECT description (visible-safe), once it sent one.
    var serverDisconnect: String? {
        if let reason = box.serverDisconnect { return reason }
        guard isClosed else { return nil }
        let text = lastErrorText()
        // libssh: "Received SSH_MSG_DISCONNECT: <code>:<description>".
        guard let marker = text.firstRange(of: "SSH_MSG_DISCONNECT: ") else { return nil }
        var reason = text[marker.upperBound...]
        if let colon = reason.firstIndex(of: ":"), reason[..<colon].allSatisfy({ $0.isNumber }) {
            reason = reason[reason.index(after: colon)...]
        }
        let value = reason.isEmpty ? "no reason given" : String(reason.prefix(512))
        box.serverDisconnect = value
        return value
    }

    /// Whether the connection is gone (closed by the peer, or broken).
    var isClosed: Bool { ssh_get_status(raw) & (SSH_CLOSED | SSH_CLOSED_ERROR) != 0 }

    /// libssh holds bytes the socket has not taken yet.
    var writePending: Bool { ssh_get_status(raw) & SSH_WRITE_PENDING != 0 }

    /// Turns libssh's last error, from doing `what`, into a failure.
    func failure(_ what: String) -> SSHFailure {
        if let reason = serverDisconnect {
            return SSHFailure(.connectionLost, "Connection closed by the SSH server while \(what): \(reason)")
        }
        if isClosed {
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)")
        }
        return SSHFailure(.protocolError, "SSH error while \(what): \(lastErrorText())")
    }

    // MARK: Handshake

    /// Runs the SSH handshake, then has the configuration's ``SSHHostKeyDelegate`` check the
    /// server's host key; returns the key once the delegate accepted it. Throws the delegate's
    /// failure (``SSHFailure/Kind/hostKeyRejected``) otherwise: no credential is ever sent to a
    /// server whose key was not accepted.
    ///
    /// Before the key exchange the delegate's ``SSHHostKeyDelegate/preferredHostKeyAlgorithms()``
    /// (the types known for the host) are asked for first; host certificates and DSA keys are
    /// never asked for. What the server sends before its SSH identification is bounded as in
    /// OpenSSH (lines of at most 8192 bytes, at most 1024 of them, all within the timeout): a
    /// peer that is not an SSH server is said to be one.
    @discardableResult
    func handshake() async throws(SSHFailure) -> SSHHostKey {
        let preferred = await configuration.hostKeyDelegate.preferredHostKeyAlgorithms()
        let key = try await onThread { session throws(SSHFailure) in try session.handshakeOnThread(preferring: preferred) }
        try await configuration.hostKeyDelegate.validateHostKey(key)
        validatedKey.withLock { $0 = key }
        return key
    }

    private func handshakeOnThread(preferring preferred: [String]?) throws(SSHFailure) -> SSHHostKey {
        let hostKeysOffered = HostKeyAlgorithms.preference(preferred: preferred, supported: HostKeyAlgorithms.openSSHOrder)
        _ = ssh_options_set(raw, SSH_OPTIONS_HOSTKEYS, hostKeysOffered.joined(separator: ","))
        let ciphers = CipherAlgorithms.openSSHOrder.joined(separator: ",")
        _ = ssh_options_set(raw, SSH_OPTIONS_CIPHERS_C_S, ciphers)
        _ = ssh_options_set(raw, SSH_OPTIONS_CIPHERS_S_C, ciphers)
        let deadline = self.deadline()
        // What comes before the server's identification is read (and dropped) here, as OpenSSH
        // bounds it; libssh then finds the identification first on the socket.
        try skipPreIdentification(until: deadline)
        let rc = try retry("handshake", until: deadline) {
            let rc = ssh_connect(raw)
            // libssh makes the socket blocking while it connects; the pump needs it non-blocking
            // (the flag belongs to the socket, shared with libssh's duplicate).
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            return rc
        }
        guard rc == SSH_OK else {
            if let why = NegotiationDiagnosis.explain(libsshError: lastErrorText(), engine: SSHEngineFeatures.libssh.version) {
                throw SSHFailure(.protocolError, why)
            }
            throw failure("handshaking")
        }
        handshakeDone = true
        var serverKey: OpaquePointer?
        guard ssh_get_server_publickey(raw, &serverKey) == SSH_OK, let serverKey else {
            throw SSHFailure(.protocolError, "the SSH server sent no usable host key")
        }
        defer { ssh_key_free(serverKey) }
        var base64: UnsafeMutablePointer<CChar>?
        guard ssh_pki_export_pubkey_base64(serverKey, &base64) == SSH_OK, let base64 else {
            throw SSHFailure(.protocolError, "the SSH server sent no usable host key")
        }
        let text = String(cString: base64)
        ssh_string_free_char(base64)
        guard let bytes = Base64.decode(text, alphabet: .standard), !bytes.isEmpty else {
            throw SSHFailure(.protocolError, "the SSH server sent no usable host key")
        }
        return SSHHostKey(blob: bytes, sha256: Digest.sha256(bytes))
    }

    /// Reads and drops the lines a server may send before its identification (RFC 4253 §4.2),
    /// looking at the socket with `MSG_PEEK` so the identification line itself stays for libssh.
    /// A NUL byte, a line over 8192 bytes, more than 1024 lines or an identification libssh
    /// cannot take mean the peer is not an SSH server.
    private func skipPreIdentification(until deadline: Date) throws(SSHFailure) {
        var scanner = IdentificationScanner()
        var peeked = [UInt8](repeating: 0, count: IdentificationScanner.maxLineLength + 1)
        while true {
            let n = peeked.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_PEEK)) }
            if n == 0 {
                throw SSHFailure(.connectionLost, "Connection lost: the SSH connection closed before the server identified itself")
            }
            if n < 0 {
                if errno == EINTR { continue }
                guard errno == EAGAIN || errno == EWOULDBLOCK else {
                    throw SSHFailure(.connectionLost, "Connection lost: \(String(cString: strerror(errno)))")
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
        let seconds = Int(configuration.timeout.seconds.rounded(.up))
        if scanner.ignoredLines > 0 {
            throw SSHFailure(.timedOut, "Connection timed out: the server sent \(scanner.ignoredLines) lines but no SSH "
                             + "identification within \(seconds) s (it began \"\(scanner.sample)\")")
        }
        throw timedOut("handshake")
    }

    /// Throws unless ``handshake()`` ran and its delegate accepted the key.
    private func requireAcceptedHostKey() throws(SSHFailure) {
        guard hostKey != nil else {
            throw SSHFailure(.configuration, "the SSH handshake has not run (or its host key was refused): call handshake() first")
        }
    }

    // MARK: Authentication

    /// The authentication methods the server accepts for `user`; empty when it let `user` in
    /// without any (the `none` method), see ``isAuthenticated``.
    func authenticationMethods(user: String) async throws(SSHFailure) -> SSHAuthenticationMethods {
        try requireAcceptedHostKey()
        return try await onThread { session throws(SSHFailure) in
            if session.authenticated { return [] }
            let deadline = session.deadline()
            let rc = try session.retry("listing authentication methods", until: deadline, again: SSH_AUTH_AGAIN.rawValue) {
                ssh_userauth_none(session.raw, user)
            }
            if rc == SSH_AUTH_SUCCESS.rawValue {
                session.authenticated = true
                return []
            }
            if rc == SSH_AUTH_ERROR.rawValue { throw session.failure("listing authentication methods") }
            return SSHAuthenticationMethods(libsshMask: UInt32(bitPattern: ssh_userauth_list(session.raw, user)))
        }
    }

    /// Whether authentication has succeeded.
    var isAuthenticated: Bool {
        get async {
            (try? await onThread { session in session.authenticated }) ?? false
        }
    }

    /// Logs `user` in with the offers `delegate` picks from the methods the server accepts, until
    /// one is accepted (see ``SSHUserAuthenticationDelegate``). Returns the offer that worked, or
    /// nil if the server needed none. Throws the delegate's failure, ``SSHFailure/Kind/authenticationFailed``
    /// when it gives up, or a transport failure.
    ///
    /// A server that ends the connection with a disconnect message while the user is not yet
    /// in (OpenSSH's `Too many authentication failures`) refused the login: that is an
    /// ``SSHFailure/Kind/authenticationFailed`` with the server's reason.
    @discardableResult
    func authenticate(user: String, delegate: any SSHUserAuthenticationDelegate) async throws(SSHFailure) -> SSHAuthenticationOffer? {
        do {
            let methods = try await authenticationMethods(user: user)
            if methods.isEmpty, await isAuthenticated { return nil }
            return try await AuthenticationLoop.run(availableMethods: methods, delegate: delegate) { offer throws(SSHFailure) in
                try await authenticate(user: user, offer: offer, answering: { round in await delegate.respond(to: round) })
            }
        } catch {
            if error.kind == .connectionLost,
               let reason = try? await onThread({ session in session.serverDisconnect }) {
                throw SSHFailure(.authenticationFailed, "Authentication failed: the SSH server disconnected: \(reason)", code: error.code)
            }
            throw error
        }
    }

    /// Tries one `offer` for `user`. `answering` answers the rounds of a keyboard-interactive
    /// offer (nil: no answers). Throws ``SSHFailure/Kind/authenticationFailed`` if the server
    /// refuses it, ``SSHFailure/Kind/localIO`` if a key file cannot be read or decrypted,
    /// ``SSHFailure/Kind/configuration`` without a reachable ssh-agent.
    func authenticate(user: String, offer: SSHAuthenticationOffer,
                             answering: (@Sendable (SSHKeyboardPrompt) async -> [String]?)? = nil) async throws(SSHFailure) {
        try requireAcceptedHostKey()
        switch offer {
        case .password(let password):
            try await onThread { session throws(SSHFailure) in
                let rc = try session.retry("authenticating", until: session.deadline(), again: SSH_AUTH_AGAIN.rawValue) {
                    ssh_userauth_password(session.raw, user, password)
                }
                try session.judge(rc, "authenticating with a password")
            }
        case .privateKey(let path, let passphrase):
            try await onThread { session throws(SSHFailure) in
                try session.privateKeyOnThread(user: user, path: path, passphrase: passphrase)
            }
        case .agent(let socketPath):
            try await onThread { session throws(SSHFailure) in
                try session.agentOnThread(user: user, socketPath: socketPath, only: nil)
            }
        case .agentKey(let socketPath, let publicKey):
            try await onThread { session throws(SSHFailure) in
                try session.agentOnThread(user: user, socketPath: socketPath, only: publicKey)
            }
        case .keyboardInteractive:
            let box = self.box
            let respond: @Sendable (SSHKeyboardPrompt) -> [String] = { round in
                guard let answering else { return [] }
                // The person's time does not count against the request's timeout.
                let asked = Date()
                defer { box.promptPause += Date().timeIntervalSince(asked) }
                return waitOffPool { await answering(round) } ?? []
            }
            try await onThread { session throws(SSHFailure) in
                try session.keyboardInteractiveOnThread(user: user, respond: respond)
            }
        }
    }

    /// Turns the result of a user-authentication call into success or a failure.
    private func judge(_ rc: Int32, _ what: String) throws(SSHFailure) {
        switch rc {
        case SSH_AUTH_SUCCESS.rawValue:
            authenticated = true
        case SSH_AUTH_PARTIAL.rawValue:
            // Accepted, but the server wants another method as well (AuthenticationMethods).
            throw SSHFailure(.authenticationFailed, "Authentication partially succeeded: the server wants another method too")
        case SSH_AUTH_DENIED.rawValue:
            throw SSHFailure(.authenticationFailed, "Authentication failed")
        default:
            throw failure(what)
        }
    }

    /// A key file (and, as OpenSSH does, the certificate beside it, `key-cert.pub`, first).
    private func privateKeyOnThread(user: String, path: String, passphrase: String?) throws(SSHFailure) {
        func load() throws(SSHFailure) -> OpaquePointer {
            var key: OpaquePointer?
            // Never nil: without a passphrase and a callback, OpenSSL would ask on the terminal.
            let rc = ssh_pki_import_privkey_file(path, passphrase ?? "", nil, nil, &key)
            guard rc == SSH_OK, let key else {
                if !FileManager.default.isReadableFile(atPath: path) {
                    throw SSHFailure(.localIO, "using the key \(path): the file cannot be read")
                }
                throw SSHFailure(.localIO, passphrase == nil
                    ? "using the key \(path): it is encrypted or not a private key libssh can read"
                    : "using the key \(path): wrong passphrase, or not a private key libssh can read")
            }
            return key
        }
        func offer(_ key: OpaquePointer) throws(SSHFailure) -> Int32 {
            try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) { ssh_userauth_publickey(raw, user, key) }
        }
        let certificate = path + "-cert.pub"
        if FileManager.default.isReadableFile(atPath: certificate) {
            let key = try load()
            defer { ssh_key_free(key) }
            var cert: OpaquePointer?
            if ssh_pki_import_cert_file(certificate, &cert) == SSH_OK, let cert {
                defer { ssh_key_free(cert) }
                if ssh_pki_copy_cert_to_privkey(cert, key) == SSH_OK {
                    let rc = try offer(key)
                    // Logged in, or the connection failed: done. Refused: the bare key next.
                    if rc == SSH_AUTH_SUCCESS.rawValue || rc == SSH_AUTH_ERROR.rawValue {
                        return try judge(rc, "using the certificate \(certificate)")
                    }
                }
            }
        }
        let key = try load()
        defer { ssh_key_free(key) }
        try judge(try offer(key), "using the key \(path)")
    }

    /// Tries the agent's identities (only the one whose public key blob is `only`, if given),
    /// through the session's ``AgentProxy``.
    private func agentOnThread(user: String, socketPath: String?, only: [UInt8]?) throws(SSHFailure) {
        if box.agent == nil {
            let proxy = try AgentProxy()
            guard ssh_set_agent_socket(raw, proxy.libsshEnd) == SSH_OK else {
                close(proxy.libsshEnd)
                throw SSHFailure(.localIO, "cannot use the ssh-agent: \(lastErrorText())")
            }
            box.agent = proxy
        }
        try box.agent!.use(socketPath: socketPath, only: only)
        let rc = try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) {
            ssh_userauth_agent(raw, user)
        }
        if rc == SSH_AUTH_ERROR.rawValue {
            let failure = failure("authenticating with the ssh-agent")
            if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
            if only != nil, (try? AgentWire.listIdentities(socketPath: socketPath))?.contains(where: { $0.publicKey == only }) == false {
                throw SSHFailure(.configuration, "the ssh-agent no longer holds the key")
            }
        }
        try judge(rc == SSH_AUTH_ERROR.rawValue ? SSH_AUTH_DENIED.rawValue : rc, "authenticating with the ssh-agent")
    }

    /// keyboard-interactive: each round's questions (server text, made visible-safe here,
    /// before it becomes a value anyone can print) go to `respond`, its answers back.
    private func keyboardInteractiveOnThread(user: String, respond: @Sendable (SSHKeyboardPrompt) -> [String]) throws(SSHFailure) {
        let deadline = self.deadline()
        func text(_ pointer: UnsafePointer<CChar>?) -> String {
            guard let pointer else { return "" }
            return ServerText.visible(String(cString: pointer), newlines: true)
        }
        for _ in 0..<64 {
            let rc = try retry("authenticating", until: deadline, again: SSH_AUTH_AGAIN.rawValue) {
                ssh_userauth_kbdint(raw, user, nil)
            }
            guard rc == SSH_AUTH_INFO.rawValue else {
                try judge(rc, "keyboard-interactive authentication")
                return
            }
            let count = max(0, ssh_userauth_kbdint_getnprompts(raw))
            var questions: [SSHKeyboardPrompt.Question] = []
            for index in 0..<UInt32(count) {
                var echo: CChar = 0
                let prompt = ssh_userauth_kbdint_getprompt(raw, index, &echo)
                questions.append(SSHKeyboardPrompt.Question(text: text(prompt), echo: echo != 0))
            }
            let round = SSHKeyboardPrompt(name: text(ssh_userauth_kbdint_getname(raw)),
                                          instruction: text(ssh_userauth_kbdint_getinstruction(raw)), questions: questions)
            let answers = count > 0 || !round.name.isEmpty || !round.instruction.isEmpty ? respond(round) : []
            for index in 0..<Int(count) {
                let answer = index < answers.count ? answers[index] : ""
                guard ssh_userauth_kbdint_setanswer(raw, UInt32(index), answer) == 0 else {
                    throw failure("keyboard-interactive authentication")
                }
            }
        }
        throw SSHFailure(.authenticationFailed, "Authentication failed: the server asked more than 64 rounds of questions")
    }

    // MARK: Channels

    /// Opens a session channel and starts `command` (exec) or a shell, with a PTY if `terminal`,
    /// after asking for `environment` (a variable the server refuses is skipped, as ssh skips it).
    func openChannel(command: String?, terminal: SSHTerminal?, environment: [String: String] = [:]) throws(SSHFailure)
        -> ChannelHandle {
        let deadline = self.deadline()
        guard let channel = ssh_channel_new(raw) else { throw failure("opening a channel") }
        let exit = ChannelExit()
        exit.attach(to: channel)
        do throws(SSHFailure) {
            let opened = try retry("opening a channel", until: deadline) { ssh_channel_open_session(channel) }
            guard opened == SSH_OK else { throw failure("opening a channel") }
            for (name, value) in environment.sorted(by: { $0.key < $1.key }) {
                let rc = try retry("setting \(name)", until: deadline) { ssh_channel_request_env(channel, name, value) }
                if rc == SSH_OK || lastErrorWasDenied { continue }
                let failure = failure("setting \(name)")
                if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
            }
            if let terminal {
                let modes = terminal.modes.encoded(fitting: 4096)
                let rc = try retry("requesting a terminal", until: deadline) {
                    // libssh ≥ 0.11 sends our terminal modes; 0.10 (Debian 12) can send none.
                    if let withModes = PTYRequest.withModes {
                        return modes.withUnsafeBufferPointer { bytes in
                            withModes(channel, terminal.term, Int32(terminal.columns), Int32(terminal.rows), bytes.baseAddress, bytes.count)
                        }
                    }
                    return ssh_channel_request_pty_size(channel, terminal.term, Int32(terminal.columns), Int32(terminal.rows))
                }
                guard rc == SSH_OK else { throw failure("requesting a terminal") }
            }
            let request = command == nil ? "shell" : "exec"
            let rc = try retry("starting the \(request)", until: deadline) {
                if let command { return ssh_channel_request_exec(channel, command) }
                return ssh_channel_request_shell(channel)
            }
            guard rc == SSH_OK else { throw failure("starting the \(request)") }
        } catch {
            ssh_channel_free(channel)
            throw error
        }
        return ChannelHandle(raw: channel, exit: exit)
    }

    // MARK: Ending

    /// Sends what is still queued, shuts our writing side down and reads (discarding) until
    /// the peer closes or `deadline`.
    func drainAfterShutdown(until deadline: Date) {
        _ = shutdown(fd, Int32(SHUT_WR))
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

    /// Sends what libssh still holds for the socket, waiting (poll) at most until `deadline`.
    func flushOutput(until deadline: Date) {
        while writePending, !isClosed {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return }
            if ssh_blocking_flush(raw, Int32(max(1, min(left * 1000, 1000)))) == SSH_ERROR { return }
        }
    }

    /// libssh writes a packet at once only when its last poll of the socket found it writable,
    /// and every write clears that mark: otherwise the packet waits for the next poll. With
    /// nothing queued, `ssh_blocking_flush` does not poll, so one poll through an event (the
    /// exported way to poll a session's socket) sets the mark again.
    func markWritable(timeout: Int32) {
        guard let event = ssh_event_new() else { return }
        defer { ssh_event_free(event) }
        guard ssh_event_add_session(event, raw) == SSH_OK else { return }
        _ = ssh_event_dopoll(event, timeout)
        _ = ssh_event_remove_session(event, raw)
    }

    /// Sends SSH_MSG_DISCONNECT with `description` (bounded at 2 s), frees the session and
    /// closes the stream it owns. Idempotent.
    func disconnect(description: String = "closed by the user") async {
        _ = try? await onThread { session in
            guard !session.freed else { return }
            session.freed = true
            // libssh's duplicate of the socket, unless libssh closed it already (on an error).
            let duplicate = ssh_get_fd(session.raw)
            if session.handshakeDone, !session.isClosed {
                session.flushOutput(until: Date(timeIntervalSinceNow: 2))
                session.markWritable(timeout: 100)
                _ = ssh_session_set_disconnect_message(session.raw, description)
                // Sends SSH_MSG_DISCONNECT (one non-blocking send, which needs the mark above:
                // ssh_disconnect drops what it could not write) and forgets the socket without
                // closing it (it was given with SSH_OPTIONS_FD).
                ssh_disconnect(session.raw)
                if duplicate >= 0 { close(duplicate) }
            }
            ssh_free(session.raw)
            // After libssh closed its end of the agent's socket pair (a write to a closed pair
            // would raise SIGPIPE: libssh writes to the agent without MSG_NOSIGNAL).
            session.box.agent?.stop()
            if let stream = session.stream {
                // Let the tunnel take the last bytes (the disconnect message) before closing:
                // end our writing, then wait (bounded) until the other end closes too.
                session.drainAfterShutdown(until: Date(timeIntervalSinceNow: 2))
                stream.close()
            }
        }
        thread.stop()
    }
}

/// A channel pointer (and what its callbacks fill in) that may cross to the session's thread and back.
struct ChannelHandle: @unchecked Sendable {
    let raw: OpaquePointer
    let exit: ChannelExit
}

/// What the session keeps beside libssh, used on the session's thread only: the time spent in
/// prompts, the server's disconnect reason, the counter of what arrived from the server, the
/// agent proxy, and the local forwards the pump serves.
final class SessionBox: @unchecked Sendable {
    var forwards: [SSHForwardListener] = []
    /// Seconds spent waiting for a person inside the current request.
    var promptPause: TimeInterval = 0
    /// The server's SSH_MSG_DISCONNECT description (visible-safe), once it sent one.
    var serverDisconnect: String?
    /// The agent libssh talks to, once an agent offer ran.
    var agent: AgentProxy?
    /// What libssh has received (bytes and packets), updated by libssh as packets arrive.
    let received: UnsafeMutablePointer<ssh_counter_struct>

    init() {
        received = UnsafeMutablePointer<ssh_counter_struct>.allocate(capacity: 1)
        received.initialize(to: ssh_counter_struct())
    }

    deinit {
        received.deallocate()
    }
}

extension SSHAuthenticationMethods {
    /// The set of libssh's `SSH_AUTH_METHOD_*` bits.
    init(libsshMask mask: UInt32) {
        self = []
        if mask & SSH_AUTH_METHOD_PUBLICKEY != 0 { insert(.publicKey) }
        if mask & SSH_AUTH_METHOD_INTERACTIVE != 0 { insert(.keyboardInteractive) }
        if mask & SSH_AUTH_METHOD_PASSWORD != 0 { insert(.password) }
        if mask & SSH_AUTH_METHOD_HOSTBASED != 0 { insert(.hostBased) }
        if mask & SSH_AUTH_METHOD_GSSAPI_MIC != 0 { insert(.gssapi) }
    }
}

/// `ssh_channel_request_pty_size_modes` of libssh ≥ 0.11, looked up in the linked libssh at run
/// time (nil with 0.10, which has no way to send terminal modes).
enum PTYRequest {
    typealias Function = @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32, Int32, UnsafePointer<UInt8>?, Int) -> Int32
    static let withModes: Function? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "ssh_channel_request_pty_size_modes") else { return nil }
        return unsafeBitCast(symbol, to: Function.self)
    }()
}
