import AccessCore
import AccessTransport
import CFAccessTCP
import FoundationEssentials
import SystemPackage
internal import CCFSSH2
// The socket constants (SHUT_WR, MSG_NOSIGNAL, IPPROTO_TCP) come with the first C module that
// includes their headers, here libssh's.
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// libssh2's one-time global initialisation (crypto back end), done on first use.
private let libssh2Initialised: Int32 = libssh2_init(0)

/// The libssh2 engine of ``SSHSession``, for sessions that open a terminal while the linked
/// libssh cannot send terminal modes (before 0.11): libssh2 runs non-blocking on one thread of
/// the session's own; every method hops to it. A blocked call waits in `poll(2)` in the
/// directions libssh2 asks for (`libssh2_session_block_directions`), bounded by the
/// configuration's timeout while connecting and authenticating.
final class LibSSH2Session: SSHSessionEngine, PumpingSession, @unchecked Sendable {
    typealias Configuration = SSHSession.Configuration
    let fd: Int32
    let raw: OpaquePointer
    let configuration: Configuration
    private let thread: SessionThread
    private let stream: TunnelStream?
    let box: SSH2SessionBox
    private var freed = false
    private var handshakeDone = false
    private let validatedKey = LockedBox<SSHHostKey?>(nil)

    /// The server's host key, once ``handshake()`` returned (the delegate accepted it).
    var hostKey: SSHHostKey? { validatedKey.withLock { $0 } }

    /// Creates a session on a tunnel stream; the session owns the stream and closes it in
    /// ``disconnect(description:)``.
    convenience init(stream: TunnelStream, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: stream.fileDescriptor.rawValue, configuration: configuration, owning: stream)
    }

    /// Creates a session on `fileDescriptor`, a connected stream socket (libssh2 calls send/recv
    /// on it) that the caller keeps owning: the escape hatch for a socket that is not a tunnel
    /// stream. The descriptor is made non-blocking.
    convenience init(fileDescriptor: FileDescriptor, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: fileDescriptor.rawValue, configuration: configuration, owning: nil)
    }

    private init(descriptor fileDescriptor: Int32, configuration: Configuration, owning stream: TunnelStream?) throws(SSHFailure) {
        guard libssh2Initialised == 0 else {
            throw SSHFailure(.protocolError, "libssh2 could not be initialised (libssh2_init returned \(libssh2Initialised))")
        }
        guard let session = CCFSSH2_session_init() else {
            throw SSHFailure(.localIO, "libssh2 could not create a session (out of memory)")
        }
        let flags = fcntl(fileDescriptor, F_GETFL)
        _ = fcntl(fileDescriptor, F_SETFL, flags | O_NONBLOCK)
        libssh2_session_set_blocking(session, 0)
        self.fd = fileDescriptor
        self.raw = session
        self.configuration = configuration
        self.stream = stream
        self.thread = SessionThread(name: "ssh session \(fileDescriptor)")
        self.box = SSH2SessionBox(io: SocketIO(fd: fileDescriptor))
        libssh2_session_abstract(session).pointee = Unmanaged.passUnretained(box).toOpaque()
        // Our own recv and send (SessionIO.swift). The recv reads the server's identification as
        // OpenSSH does (bounded lines before it), keeps the server's first packet (its KEXINIT, to
        // explain a failed key exchange), and notes when the server last sent anything (keepalive
        // answers included); sends never come back short, and no read happens behind the pump's back.
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_RECV, unsafeBitCast(receiveCallback, to: UnsafeMutableRawPointer.self))
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_SEND, unsafeBitCast(sendCallback, to: UnsafeMutableRawPointer.self))
        // The server's SSH_MSG_DISCONNECT reason, for the failure that follows.
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_DISCONNECT,
                                         unsafeBitCast(disconnectCallback, to: UnsafeMutableRawPointer.self))
    }

    deinit {
        if !freed {
            let raw = self.raw
            let stream = self.stream
            // Free on the session's thread, after anything still queued there.
            if !thread.submit({
                _ = libssh2_session_free(raw)
                stream?.close()
            }) {
                _ = libssh2_session_free(raw)
                stream?.close()
            }
        }
        thread.stop()
    }

    // MARK: Running on the session's thread

    /// Runs `body` on the session's thread and returns its result.
    func onThread<T: Sendable>(_ body: @escaping @Sendable (LibSSH2Session) throws(SSHFailure) -> T) async throws(SSHFailure) -> T {
        try await thread.run { [self] () throws(SSHFailure) -> T in try body(self) }
    }

    /// A deadline `configuration.timeout` from now, for one request. The time a person then
    /// spends answering a keyboard-interactive round inside the request is added to it: the
    /// timeout is for the server, never for the person (issue 16 point 7).
    func deadline() -> Date {
        box.promptPause = 0
        return Date(timeIntervalSinceNow: configuration.timeout.seconds)
    }

    /// Waits (poll) until the socket is ready in the directions libssh2 is blocked on, or the
    /// deadline (moved on by the time spent in prompts) passes (throws `.timedOut`). Bytes queued
    /// by our send callback go out meanwhile.
    func waitSocket(until requestDeadline: Date?, what: String) throws(SSHFailure) {
        let io = box.io
        guard io.flush() else {
            throw SSHFailure(.connectionLost, "Connection lost: \(io.sendErrorText ?? "the tunnel closed") while \(what)")
        }
        let directions = libssh2_session_block_directions(raw)
        var events: Int16 = 0
        if directions & LIBSSH2_SESSION_BLOCK_INBOUND != 0 { events |= Int16(POLLIN) }
        if directions & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0 { events |= Int16(POLLOUT) }
        if events == 0 { events = Int16(POLLIN) }
        if io.pendingOutbound > 0 { events |= Int16(POLLOUT) }
        defer { io.polled() }
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
            if entry.revents & Int16(POLLOUT) != 0 { io.flush() }
            return
        }
    }

    private func timedOut(_ what: String) -> SSHFailure {
        let seconds = Int(configuration.timeout.seconds.rounded(.up))
        return SSHFailure(.timedOut, "Connection timed out. The SSH server did not answer (\(what)) within \(seconds) s")
    }

    /// Repeats `call` while libssh2 says EAGAIN, waiting for the socket in between.
    func retry(_ what: String, until deadline: Date?, _ call: () -> Int32) throws(SSHFailure) -> Int32 {
        while true {
            let rc = call()
            if rc != LIBSSH2_ERROR_EAGAIN { return rc }
            try waitSocket(until: deadline, what: what)
        }
    }

    /// Repeats `call` while it returns nil and libssh2's last error is EAGAIN.
    func retryPointer<P>(_ what: String, until deadline: Date?, _ call: () -> P?) throws(SSHFailure) -> P? {
        while true {
            if let value = call() { return value }
            if libssh2_session_last_errno(raw) != LIBSSH2_ERROR_EAGAIN { return nil }
            try waitSocket(until: deadline, what: what)
        }
    }

    /// libssh2's last error message (visible-safe).
    func lastErrorText() -> String {
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        _ = libssh2_session_last_error(raw, &message, &length, 0)
        guard let message else { return "unknown error" }
        return ServerText.visible(String(cString: message))
    }

    /// Turns libssh2's error `code` from doing `what` into a failure.
    func failure(_ code: Int32, _ what: String) -> SSHFailure {
        let detail = lastErrorText()
        // libssh2 reports some requests cut short by the server's disconnect (or its end of the
        // stream) as their own refusal ("Waiting for USERAUTH response"): nothing more can
        // work, so that is a lost connection, with the server's reason when it gave one.
        if let reason = box.serverDisconnect {
            return SSHFailure(.connectionLost, "Connection closed by the SSH server while \(what): \(reason)", code: code)
        }
        if box.peerClosed {
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)", code: code)
        }
        switch code {
        case LIBSSH2_ERROR_SOCKET_NONE, LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_RECV,
             LIBSSH2_ERROR_SOCKET_DISCONNECT, LIBSSH2_ERROR_BANNER_RECV, LIBSSH2_ERROR_BANNER_SEND,
             LIBSSH2_ERROR_BAD_SOCKET, LIBSSH2_ERROR_SOCKET_TIMEOUT:
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)", code: code)
        case LIBSSH2_ERROR_TIMEOUT:
            return timedOut(what)
        case LIBSSH2_ERROR_AUTHENTICATION_FAILED, LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED:
            return SSHFailure(.authenticationFailed, "Authentication failed", code: code)
        case LIBSSH2_ERROR_FILE, LIBSSH2_ERROR_KEYFILE_AUTH_FAILED:
            return SSHFailure(.localIO, "\(what): \(detail)", code: code)
        default:
            return SSHFailure(.protocolError, "SSH error while \(what): \(detail) (\(code))", code: code)
        }
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
        let hostKeysOffered = SSH2HostKeyAlgorithms.preference(preferred: preferred, supported: supportedAlgorithms(LIBSSH2_METHOD_HOSTKEY))
        if !hostKeysOffered.isEmpty {
            _ = libssh2_session_method_pref(raw, LIBSSH2_METHOD_HOSTKEY, hostKeysOffered.joined(separator: ","))
        }
        for method in [LIBSSH2_METHOD_CRYPT_CS, LIBSSH2_METHOD_CRYPT_SC] {
            let ciphers = SSH2CipherAlgorithms.preference(supported: supportedAlgorithms(method))
            if !ciphers.isEmpty { _ = libssh2_session_method_pref(raw, method, ciphers.joined(separator: ",")) }
        }
        let deadline = self.deadline()
        box.scanning = true
        let rc: Int32
        do throws(SSHFailure) {
            rc = try retry("handshake", until: deadline) { libssh2_session_handshake(raw, fd) }
        } catch {
            if let refusal = box.identificationRefusal { throw SSHFailure(.protocolError, "The peer is \(refusal)") }
            if error.kind == .timedOut, box.scanner.outcome == .needMore, box.scanner.ignoredLines > 0 {
                let seconds = Int(configuration.timeout.seconds.rounded(.up))
                throw SSHFailure(.timedOut, "Connection timed out: the server sent \(box.scanner.ignoredLines) lines but no SSH "
                                 + "identification within \(seconds) s (it began \"\(box.scanner.sample)\")")
            }
            throw error
        }
        guard rc == 0 else {
            if let refusal = box.identificationRefusal {
                throw SSHFailure(.protocolError, "The peer is \(refusal)", code: rc)
            }
            if rc == LIBSSH2_ERROR_KEX_FAILURE, let server = KexInit.parse(packet: box.firstPacket),
               let why = SSH2NegotiationDiagnosis.explain(server: server, hostKeysOffered: hostKeysOffered,
                                                     kexOffered: supportedAlgorithms(LIBSSH2_METHOD_KEX),
                                                     ciphersOffered: supportedAlgorithms(LIBSSH2_METHOD_CRYPT_CS),
                                                     macsOffered: supportedAlgorithms(LIBSSH2_METHOD_MAC_CS),
                                                     features: .libssh2) {
                throw SSHFailure(.protocolError, why, code: rc)
            }
            throw failure(rc, "handshaking")
        }
        handshakeDone = true
        var length = 0
        var type: Int32 = 0
        guard let blob = libssh2_session_hostkey(raw, &length, &type), length > 0,
              let hash = libssh2_hostkey_hash(raw, LIBSSH2_HOSTKEY_HASH_SHA256) else {
            throw SSHFailure(.protocolError, "the SSH server sent no usable host key")
        }
        let bytes = [UInt8](UnsafeRawBufferPointer(start: blob, count: length))
        let digest = [UInt8](UnsafeRawBufferPointer(start: hash, count: 32))
        let key = SSHHostKey(blob: bytes, sha256: digest)
        if configuration.keepalive.isEnabled {
            libssh2_keepalive_config(raw, 1, configuration.keepalive.librarySeconds)
        }
        return key
    }

    /// libssh2's own algorithms of `method` (a `LIBSSH2_METHOD_*`), in its order.
    private func supportedAlgorithms(_ method: Int32) -> [String] {
        var list: UnsafeMutablePointer<UnsafePointer<CChar>?>?
        let count = libssh2_session_supported_algs(raw, method, &list)
        guard count > 0, let list else { return [] }
        defer { libssh2_free(raw, list) }
        return (0..<Int(count)).compactMap { list[$0].map { String(cString: $0) } }
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
            let deadline = session.deadline()
            let list = try session.retryPointer("listing authentication methods", until: deadline) {
                libssh2_userauth_list(session.raw, user, UInt32(user.utf8.count))
            }
            guard let list else {
                if libssh2_userauth_authenticated(session.raw) == 1 { return [] }
                throw session.failure(libssh2_session_last_errno(session.raw), "listing authentication methods")
            }
            return SSHAuthenticationMethods(names: String(cString: list).split(separator: ","))
        }
    }

    /// Whether authentication has succeeded.
    var isAuthenticated: Bool {
        get async {
            (try? await onThread { session in libssh2_userauth_authenticated(session.raw) == 1 }) ?? false
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
               let reason = try? await onThread({ session in session.box.serverDisconnect }) {
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
                let rc = try session.retry("authenticating", until: session.deadline()) {
                    libssh2_userauth_password_ex(session.raw, user, UInt32(user.utf8.count),
                                                 password, UInt32(password.utf8.count), nil)
                }
                guard rc == 0 else { throw session.failure(rc, "authenticating with a password") }
            }
        case .privateKey(let path, let passphrase):
            try await onThread { session throws(SSHFailure) in
                // As OpenSSH does, a certificate beside the key (`key-cert.pub`) is offered first,
                // then the bare key (libssh2 presents a certificate given as the public key file).
                let certificate = path + "-cert.pub"
                if FileManager.default.isReadableFile(atPath: certificate) {
                    let rc = try session.retry("authenticating", until: session.deadline()) {
                        libssh2_userauth_publickey_fromfile_ex(session.raw, user, UInt32(user.utf8.count), certificate, path,
                                                               passphrase)
                    }
                    if rc == 0 { return }
                    let failure = session.failure(rc, "using the certificate \(certificate)")
                    if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
                }
                let rc = try session.retry("authenticating", until: session.deadline()) {
                    libssh2_userauth_publickey_fromfile_ex(session.raw, user, UInt32(user.utf8.count), nil, path, passphrase)
                }
                guard rc == 0 else { throw session.failure(rc, "using the key \(path)") }
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
                session.box.respond = respond
                defer { session.box.respond = nil }
                let rc = try session.retry("authenticating", until: session.deadline()) {
                    libssh2_userauth_keyboard_interactive_ex(session.raw, user, UInt32(user.utf8.count), keyboardCallback)
                }
                guard rc == 0 else { throw session.failure(rc, "keyboard-interactive authentication") }
            }
        }
    }

    /// Tries the agent's identities (only the one whose public key blob is `only`, if given).
    private func agentOnThread(user: String, socketPath: String?, only: [UInt8]?) throws(SSHFailure) {
        guard let agent = libssh2_agent_init(raw) else {
            throw SSHFailure(.localIO, "cannot use the ssh-agent: \(lastErrorText())")
        }
        defer { libssh2_agent_free(agent) }
        if let socketPath { libssh2_agent_set_identity_path(agent, socketPath) }
        guard libssh2_agent_connect(agent) == 0 else {
            throw SSHFailure(.configuration, "cannot reach the ssh-agent at \(socketPath ?? "SSH_AUTH_SOCK")")
        }
        defer { _ = libssh2_agent_disconnect(agent) }
        guard libssh2_agent_list_identities(agent) == 0 else {
            throw SSHFailure(.localIO, "the ssh-agent did not list its keys: \(lastErrorText())")
        }
        var previous: UnsafeMutablePointer<libssh2_agent_publickey>?
        while true {
            var identity: UnsafeMutablePointer<libssh2_agent_publickey>?
            let rc = libssh2_agent_get_identity(agent, &identity, previous)
            if rc == 1 { break }
            guard rc == 0, let identity else {
                throw SSHFailure(.localIO, "the ssh-agent failed: \(lastErrorText())")
            }
            if let only, [UInt8](UnsafeBufferPointer(start: identity.pointee.blob, count: Int(identity.pointee.blob_len))) != only {
                previous = identity
                continue
            }
            let auth = try retry("authenticating", until: deadline()) {
                libssh2_agent_userauth(agent, user, identity)
            }
            if auth == 0 { return }
            let failure = failure(auth, "authenticating with the ssh-agent")
            if failure.kind == .connectionLost || failure.kind == .timedOut || only != nil { throw failure }
            previous = identity
        }
        if only != nil { throw SSHFailure(.configuration, "the ssh-agent no longer holds the key") }
        throw SSHFailure(.authenticationFailed, "Authentication failed")
    }

    // MARK: Channels

    /// Opens a session channel and starts `command` (exec) or a shell, with a PTY if `terminal`,
    /// after asking for `environment` (a variable the server refuses is skipped, as ssh skips it).
    func openChannel(command: String?, terminal: SSHTerminal?, environment: [String: String] = [:]) throws(SSHFailure)
        -> SSH2ChannelHandle {
        let deadline = self.deadline()
        let opened = try retryPointer("opening a channel", until: deadline) { CCFSSH2_channel_open_session(raw) }
        guard let channel = opened else {
            throw failure(libssh2_session_last_errno(raw), "opening a channel")
        }
        do throws(SSHFailure) {
            for (name, value) in environment.sorted(by: { $0.key < $1.key }) {
                let rc = try retry("setting \(name)", until: deadline) {
                    libssh2_channel_setenv_ex(channel, name, UInt32(name.utf8.count), value, UInt32(value.utf8.count))
                }
                if rc == 0 || rc == LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED { continue }
                let failure = failure(rc, "setting \(name)")
                if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
            }
            if let terminal {
                let term = terminal.term
                // libssh2 takes at most 256 bytes of terminal type and modes.
                let modes = terminal.modes.encoded(fitting: 256 - term.utf8.count)
                let rc = try retry("requesting a terminal", until: deadline) {
                    modes.withUnsafeBytes { bytes in
                        libssh2_channel_request_pty_ex(channel, term, UInt32(term.utf8.count),
                                                       bytes.baseAddress?.assumingMemoryBound(to: CChar.self), UInt32(bytes.count),
                                                       Int32(terminal.columns), Int32(terminal.rows), 0, 0)
                    }
                }
                guard rc == 0 else { throw failure(rc, "requesting a terminal") }
            }
            let request = command == nil ? "shell" : "exec"
            let rc = try retry("starting the \(request)", until: deadline) {
                libssh2_channel_process_startup(channel, request, UInt32(request.utf8.count),
                                                command, UInt32(command?.utf8.count ?? 0))
            }
            guard rc == 0 else { throw failure(rc, "starting the \(request)") }
        } catch {
            _ = libssh2_channel_free(channel)
            throw error
        }
        return SSH2ChannelHandle(raw: channel)
    }

    // MARK: Ending

    /// Sends what is still queued, shuts our writing side down and reads (discarding) until
    /// the peer closes or `deadline`.
    func drainAfterShutdown(until deadline: Date) {
        _ = box.io.flushAll(until: deadline)
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

    /// Sends SSH_MSG_DISCONNECT with `description` (bounded at 2 s), frees the session and
    /// closes the stream it owns. Idempotent.
    func disconnect(description: String = "closed by the user") async {
        _ = try? await onThread { session in
            guard !session.freed else { return }
            session.freed = true
            if session.handshakeDone {
                let deadline = Date(timeIntervalSinceNow: 2)
                _ = try? session.retry("disconnecting", until: deadline) {
                    libssh2_session_disconnect_ex(session.raw, SSH_DISCONNECT_BY_APPLICATION, description, "")
                }
                _ = session.box.io.flushAll(until: deadline)
            }
            _ = libssh2_session_free(session.raw)
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

/// A channel pointer that may cross to the session's thread and back.
struct SSH2ChannelHandle: @unchecked Sendable {
    let raw: OpaquePointer
}

/// What libssh2's callbacks need, found through the session's abstract pointer: the
/// keyboard-interactive responder while such an authentication runs, the time spent in its
/// prompts, the server's identification and first packet while handshaking, its disconnect
/// reason, the socket I/O (when the server last sent a byte, what waits to be sent), and the
/// local forwards the pump serves. Used on the session's thread only.
final class SSH2SessionBox: @unchecked Sendable {
    var respond: (@Sendable (SSHKeyboardPrompt) -> [String])?
    let io: SocketIO
    var forwards: [SSHForwardListener] = []
    /// Seconds spent waiting for a person inside the current request.
    var promptPause: TimeInterval = 0
    /// While the handshake reads what comes before the server's identification.
    var scanning = false
    var scanner = IdentificationScanner()
    /// Why the peer is not an SSH server, once the scanner refused it.
    var identificationRefusal: String?
    /// Bytes read past the identification that libssh2 has not taken yet.
    var pending: [UInt8] = []
    /// The server's first binary packet (its KEXINIT), as far as it arrived (at most 64 KiB).
    var firstPacket: [UInt8] = []
    /// The server's SSH_MSG_DISCONNECT description (visible-safe), if it sent one.
    var serverDisconnect: String?
    /// The stream ended (recv returned 0).
    var peerClosed = false

    init(io: SocketIO) {
        self.io = io
    }

    /// Keeps the start of the server's first binary packet.
    func noteFirstPacket(_ bytes: UnsafeRawBufferPointer) {
        let wanted: Int
        if firstPacket.count >= 4 {
            let length = Int(firstPacket[0]) << 24 | Int(firstPacket[1]) << 16 | Int(firstPacket[2]) << 8 | Int(firstPacket[3])
            wanted = min(4 + length, 65_536)
        } else {
            wanted = 65_536
        }
        guard firstPacket.count < wanted else { return }
        firstPacket.append(contentsOf: bytes.prefix(wanted - firstPacket.count))
    }
}

/// libssh2's socket read: `recv`, noting the time of every byte that arrives. While the
/// handshake waits for the server's identification, lines before it are read and dropped here
/// (bounded, as OpenSSH bounds them), and the identification line is handed on as if it were
/// the first byte; the server's first packet is kept. Errors go back as `-errno`, as libssh2's
/// own function returns them.
let receiveCallback: @convention(c) (
    Int32, UnsafeMutableRawPointer?, Int, Int32, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int = { socket, buffer, length, flags, abstract in
    guard let pointer = abstract?.pointee else {
        let n = recv(socket, buffer, length, flags)
        return n < 0 ? -Int(errno) : n
    }
    let box = Unmanaged<SSH2SessionBox>.fromOpaque(pointer).takeUnretainedValue()
    // libssh2 talks to the ssh-agent through these callbacks too, on the agent's socket:
    // only the session's own socket goes through the scanner and SocketIO.
    guard socket == box.io.fd else {
        let n = recv(socket, buffer, length, flags)
        return n < 0 ? -Int(errno) : n
    }
    if box.scanning {
        if box.identificationRefusal != nil { return -Int(EPROTO) }
        var chunk = [UInt8](repeating: 0, count: 4096)
        while box.scanner.outcome == .needMore {
            let n = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, flags) }
            if n < 0 { return -Int(errno) }
            if n == 0 {
                box.peerClosed = true
                return 0
            }
            box.io.lastInbound = Date()
            switch box.scanner.feed(chunk[0..<n]) {
            case .needMore: continue
            case .identified:
                box.pending = box.scanner.passOn
                let rest = box.pending[box.scanner.identificationLineLength...]
                if !rest.isEmpty { Array(rest).withUnsafeBytes { box.noteFirstPacket($0) } }
            case .refused(let why):
                box.identificationRefusal = why
                return -Int(EPROTO)
            }
        }
        box.scanning = false
    }
    if !box.pending.isEmpty, let buffer {
        let count = min(length, box.pending.count)
        box.pending.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress!, byteCount: count) }
        box.pending.removeFirst(count)
        return count
    }
    let n = box.io.receive(buffer, length, flags: flags)
    if n == 0 { box.peerClosed = true }
    if n > 0 {
        if box.firstPacket.count < 65_536, let buffer { box.noteFirstPacket(UnsafeRawBufferPointer(start: buffer, count: n)) }
    }
    return n
}

/// libssh2's disconnect callback: keeps the server's reason, visible-safe, for the failure.
private let disconnectCallback: @convention(c) (
    OpaquePointer?, Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, Int32,
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Void = { _, reason, message, length, _, _, abstract in
    guard let pointer = abstract?.pointee else { return }
    let box = Unmanaged<SSH2SessionBox>.fromOpaque(pointer).takeUnretainedValue()
    var text = ""
    if let message, length > 0 {
        text = ServerText.visible(UnsafeRawBufferPointer(start: message, count: Int(length)), limit: 512)
    }
    box.serverDisconnect = text.isEmpty ? "reason \(reason)" : text
}

/// libssh2's keyboard-interactive callback: asks the session's responder and hands libssh2
/// malloc'd answers (libssh2 frees them).
private let keyboardCallback: @convention(c) (
    UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, Int32, Int32,
    UnsafePointer<LIBSSH2_USERAUTH_KBDINT_PROMPT>?, UnsafeMutablePointer<LIBSSH2_USERAUTH_KBDINT_RESPONSE>?,
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Void = { name, nameLength, instruction, instructionLength, count, prompts, responses, abstract in
    guard let abstract, let pointer = abstract.pointee, let responses else { return }
    let box = Unmanaged<SSH2SessionBox>.fromOpaque(pointer).takeUnretainedValue()
    // Server text: made visible-safe here, before it becomes a value anyone can print.
    func text(_ p: UnsafePointer<CChar>?, _ n: Int) -> String {
        guard let p, n > 0 else { return "" }
        return ServerText.visible(UnsafeRawBufferPointer(start: p, count: n), newlines: true)
    }
    var list: [SSHKeyboardPrompt.Question] = []
    for index in 0..<Int(max(0, count)) {
        guard let prompt = prompts?[index] else { continue }
        let words = prompt.text.map { text($0, Int(prompt.length)) } ?? ""
        list.append(SSHKeyboardPrompt.Question(text: words, echo: prompt.echo != 0))
    }
    let round = SSHKeyboardPrompt(name: text(name, Int(nameLength)), instruction: text(instruction, Int(instructionLength)),
                                  questions: list)
    let answers = box.respond?(round) ?? []
    for index in 0..<Int(max(0, count)) {
        let answer = index < answers.count ? answers[index] : ""
        responses[index].text = strdup(answer)
        responses[index].length = UInt32(answer.utf8.count)
    }
}
