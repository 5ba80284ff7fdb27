import AccessCore
import AccessTransport
import FoundationEssentials
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// libssh's one-time global initialisation (crypto back end), done on first use.
private let libsshInitialised: Int32 = ssh_init()

extension SSHEngineFeatures {
    /// The linked libssh (`libssh 0.10.6`): it signs and verifies RSA with rsa-sha2.
    package static let libssh = SSHEngineFeatures(
        version: "libssh " + (ssh_version(0).map { String(cString: $0) }?.split(separator: "/").first.map(String.init) ?? "unknown"),
        rsaSHA2: true, sendsTerminalModes: LibSSHEngine.ptyWithModes != nil)
}

/// A libssh channel and what its callbacks fill in (a session channel's exit status).
final class LibSSHChannel {
    let raw: OpaquePointer
    let exit: ChannelExit?

    init(raw: OpaquePointer, exit: ChannelExit?) {
        self.raw = raw
        self.exit = exit
    }
}

/// libssh's calls for ``SSHSessionCore``. libssh runs non-blocking; it is given a duplicate of
/// the socket (it closes the socket it is given on some paths), reads no configuration or
/// known_hosts file of its own, and logs nothing (see `init`).
final class LibSSHEngine: SSHEngine, @unchecked Sendable {
    typealias Channel = LibSSHChannel
    static var features: SSHEngineFeatures { .libssh }

    let state: SessionState
    let raw: OpaquePointer
    /// What libssh has received (bytes and packets), updated by libssh as packets arrive.
    private let received: UnsafeMutablePointer<ssh_counter_struct>
    /// The agent libssh talks to, once an agent offer ran.
    private var agent: AgentProxy?
    private var disconnectReason: String?
    /// A `direct-tcpip` open in flight.
    private var opening: OpaquePointer?
    private var lastKeepalive: Date?
    /// The session's callbacks (agent forwarding), once set.
    private var callbacks: UnsafeMutablePointer<ssh_callbacks_struct>?
    /// Agent channels the server opened, not yet taken by the pump.
    private var agentChannels: [OpaquePointer] = []

    init(descriptor fileDescriptor: Int32, configuration: SSHSession.Configuration) throws(SSHFailure) {
        state = SessionState(fd: fileDescriptor, configuration: configuration)
        guard libsshInitialised == 0, let session = ssh_new() else {
            throw SessionState.cannotStart("libssh", initialisation: "ssh_init", result: libsshInitialised)
        }
        // libssh closes the socket it is given (on ssh_disconnect, ssh_free, and some errors), but
        // the stream (or the caller) owns the descriptor: libssh gets a duplicate of its own.
        var socket = fcntl(fileDescriptor, F_DUPFD_CLOEXEC, 0)
        guard socket >= 0 else {
            ssh_free(session)
            throw SSHFailure(.localIO, "cannot duplicate the socket: \(SystemError.current().text)")
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
        raw = session
        received = UnsafeMutablePointer<ssh_counter_struct>.allocate(capacity: 1)
        received.initialize(to: ssh_counter_struct())
        // Counts what arrives from the server (the keepalive loss rule: silence).
        ssh_set_counters(session, nil, received)
    }

    deinit {
        received.deallocate()
        callbacks?.deallocate()
    }

    /// Repeats `call` while it returns `again`; a closed session ends it with SSH_ERROR, and
    /// ``failure(_:_:)`` then gives the server's reason.
    private func retry(_ what: String, until deadline: Date?, again: Int32 = SSH_AGAIN, _ call: () -> Int32) throws(SSHFailure)
        -> Int32 {
        try retry(what, until: deadline, onClose: SSH_ERROR) { () -> Int32? in
            let rc = call()
            return rc == again ? nil : rc
        }
    }

    // MARK: Socket

    var hasQueuedOutput: Bool { ssh_get_status(raw) & SSH_WRITE_PENDING != 0 }
    var wantsInput: Bool { true }
    func beforeWait() -> SSHFailure? { nil }

    func afterWait(_ revents: Int16, pumping: Bool) {
        // Let libssh send what waits for the socket to take it (and read what came, in the
        // same poll). With nothing queued this does nothing: the next round's reads read.
        if pumping && revents & Int16(POLLIN | POLLOUT) != 0 { _ = ssh_blocking_flush(raw, 0) }
    }

    func endRound() -> SSHFailure? {
        // libssh sends a packet at once only when its last poll found the socket writable, and
        // a channel read that finds data buffered does not poll: what is queued is sent here.
        _ = ssh_blocking_flush(raw, 0)
        return nil
    }

    var acceptsChannelData: Bool { !hasQueuedOutput }
    var inboundMark: UInt64 { received.pointee.in_packets }
    func takeUnread() -> SSHFailure? { nil }
    var isClosed: Bool { ssh_get_status(raw) & (SSH_CLOSED | SSH_CLOSED_ERROR) != 0 }

    /// libssh's last error message (visible-safe).
    private func lastErrorText() -> String {
        guard let message = ssh_get_error(UnsafeMutableRawPointer(raw)) else { return "unknown error" }
        let text = ServerText.visible(String(cString: message))
        return text.isEmpty ? "unknown error" : text
    }

    var serverDisconnect: String? {
        if let disconnectReason { return disconnectReason }
        guard isClosed else { return nil }
        let text = lastErrorText()
        // libssh: "Received SSH_MSG_DISCONNECT: <code>:<description>".
        guard let marker = text.firstRange(of: "SSH_MSG_DISCONNECT: ") else { return nil }
        var reason = text[marker.upperBound...]
        if let colon = reason.firstIndex(of: ":"), reason[..<colon].allSatisfy({ $0.isNumber }) {
            reason = reason[reason.index(after: colon)...]
        }
        disconnectReason = reason.isEmpty ? "no reason given" : String(reason.prefix(512))
        return disconnectReason
    }

    func failure(_ code: Int32, _ what: String) -> SSHFailure {
        if let reason = serverDisconnect {
            return SSHFailure(.connectionLost, "Connection closed by the SSH server while \(what): \(reason)")
        }
        if isClosed {
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)")
        }
        return SSHFailure(.protocolError, "SSH error while \(what): \(lastErrorText())")
    }

    // MARK: Handshake

    func prepareHandshake(preferredHostKeys: [String]?) -> [String] {
        // libssh 0.10's client drops certificate algorithms from the list it sends (the
        // certificate is read on a connection of its own: HostCertificateProbe).
        let offered = HostKeyAlgorithms.preference(preferred: preferredHostKeys, supported: HostKeyAlgorithms.openSSHOrder)
        _ = ssh_options_set(raw, SSH_OPTIONS_HOSTKEYS, offered.joined(separator: ","))
        let ciphers = CipherAlgorithms.openSSHOrder.joined(separator: ",")
        _ = ssh_options_set(raw, SSH_OPTIONS_CIPHERS_C_S, ciphers)
        _ = ssh_options_set(raw, SSH_OPTIONS_CIPHERS_S_C, ciphers)
        if state.configuration.compression { _ = ssh_options_set(raw, SSH_OPTIONS_COMPRESSION, "yes") }
        return offered
    }

    func handshake(offering hostKeys: [String], until deadline: Date) throws(SSHFailure) -> SSHFailure? {
        let fd = state.fd
        let rc = try retry("handshake", until: deadline) {
            let rc = ssh_connect(raw)
            // libssh makes the socket blocking while it connects; the pump needs it non-blocking
            // (the flag belongs to the socket, shared with libssh's duplicate).
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            return rc
        }
        guard rc == SSH_OK else {
            if let why = NegotiationDiagnosis.explain(libsshError: lastErrorText(), engine: Self.features.version) {
                return SSHFailure(.protocolError, why)
            }
            return failure(rc, "handshaking")
        }
        return nil
    }

    func serverHostKey() throws(SSHFailure) -> SSHHostKey {
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

    // MARK: Authentication

    func noneMethod(user: String) throws(SSHFailure) -> SSHAuthenticationMethods? {
        let rc = try retry("listing authentication methods", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) {
            ssh_userauth_none(raw, user)
        }
        if rc == SSH_AUTH_SUCCESS.rawValue { return nil }
        if rc == SSH_AUTH_ERROR.rawValue { throw failure(rc, "listing authentication methods") }
        let mask = UInt32(bitPattern: ssh_userauth_list(raw, user))
        var methods: SSHAuthenticationMethods = []
        if mask & SSH_AUTH_METHOD_PUBLICKEY != 0 { methods.insert(.publicKey) }
        if mask & SSH_AUTH_METHOD_INTERACTIVE != 0 { methods.insert(.keyboardInteractive) }
        if mask & SSH_AUTH_METHOD_PASSWORD != 0 { methods.insert(.password) }
        if mask & SSH_AUTH_METHOD_HOSTBASED != 0 { methods.insert(.hostBased) }
        if mask & SSH_AUTH_METHOD_GSSAPI_MIC != 0 { methods.insert(.gssapi) }
        return methods
    }

    func issueBanner() -> String? {
        guard let banner = ssh_get_issue_banner(raw) else { return nil }
        defer { ssh_string_free_char(banner) }
        let text = ServerText.visible(String(cString: banner), newlines: true)
        return text.isEmpty ? nil : text
    }

    /// Turns the result of a user-authentication call into success or a failure.
    private func judge(_ rc: Int32, _ what: String) throws(SSHFailure) {
        switch rc {
        case SSH_AUTH_SUCCESS.rawValue:
            return
        case SSH_AUTH_PARTIAL.rawValue:
            // Accepted, but the server wants another method as well (AuthenticationMethods).
            throw SSHFailure(.authenticationFailed, "Authentication partially succeeded: the server wants another method too")
        case SSH_AUTH_DENIED.rawValue:
            throw SSHFailure(.authenticationFailed, "Authentication failed")
        default:
            throw failure(rc, what)
        }
    }

    func offerPassword(user: String, password: String) throws(SSHFailure) {
        let rc = try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) {
            ssh_userauth_password(raw, user, password)
        }
        try judge(rc, "authenticating with a password")
    }

    func probeKey(user: String, publicKey blob: [UInt8]) throws(SSHFailure) -> Bool {
        var key: OpaquePointer?
        let type = ssh_key_type_from_name(SSHPublicKeyBlob.algorithm(blob))
        guard ssh_pki_import_pubkey_base64(Base64.encode(blob, alphabet: .standard, padded: true), type, &key) == SSH_OK, let key else {
            return true   // a key libssh cannot read cannot be probed: its passphrase decides
        }
        defer { ssh_key_free(key) }
        let rc = try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) { ssh_userauth_try_publickey(raw, user, key) }
        if rc == SSH_AUTH_SUCCESS.rawValue { return true }
        if rc == SSH_AUTH_DENIED.rawValue || rc == SSH_AUTH_PARTIAL.rawValue { return false }
        throw failure(rc, "offering a public key")
    }

    func offerKey(user: String, path: String, certificate: String?, passphrase: String?) throws(SSHFailure) {
        var key: OpaquePointer?
        // Never nil: without a passphrase and a callback, OpenSSL would ask on the terminal.
        guard ssh_pki_import_privkey_file(path, passphrase ?? "", nil, nil, &key) == SSH_OK, let key else {
            if !FileManager.default.isReadableFile(atPath: path) {
                throw SSHFailure(.localIO, "using the key \(path): the file cannot be read")
            }
            throw SSHFailure(.localIO, passphrase == nil
                ? "using the key \(path): it is encrypted or not a private key libssh can read"
                : "using the key \(path): wrong passphrase, or not a private key libssh can read")
        }
        defer { ssh_key_free(key) }
        if let certificate {
            var cert: OpaquePointer?
            guard ssh_pki_import_cert_file(certificate, &cert) == SSH_OK, let cert else {
                throw SSHFailure(.localIO, "using the certificate \(certificate): libssh cannot read it")
            }
            defer { ssh_key_free(cert) }
            guard ssh_pki_copy_cert_to_privkey(cert, key) == SSH_OK else {
                throw SSHFailure(.localIO, "using the certificate \(certificate): it does not belong to the key")
            }
        }
        let rc = try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) { ssh_userauth_publickey(raw, user, key) }
        try judge(rc, "using the \(certificate == nil ? "key \(path)" : "certificate \(certificate!)")")
    }

    func offerAgent(user: String, socketPath: String?, only: [UInt8]?) throws(SSHFailure) {
        if agent == nil {
            let proxy = try AgentProxy()
            guard ssh_set_agent_socket(raw, proxy.libsshEnd) == SSH_OK else {
                close(proxy.libsshEnd)
                throw SSHFailure(.localIO, "cannot use the ssh-agent: \(lastErrorText())")
            }
            agent = proxy
        }
        try agent!.use(socketPath: socketPath, only: only)
        let rc = try retry("authenticating", until: deadline(), again: SSH_AUTH_AGAIN.rawValue) { ssh_userauth_agent(raw, user) }
        if rc == SSH_AUTH_ERROR.rawValue {
            let failure = failure(rc, "authenticating with the ssh-agent")
            if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
            if only != nil, (try? AgentWire.listIdentities(socketPath: socketPath))?.contains(where: { $0.publicKey == only }) == false {
                throw SSHFailure(.configuration, "the ssh-agent no longer holds the key")
            }
        }
        try judge(rc == SSH_AUTH_ERROR.rawValue ? SSH_AUTH_DENIED.rawValue : rc, "authenticating with the ssh-agent")
    }

    func offerKeyboardInteractive(user: String, respond: @escaping @Sendable (SSHKeyboardPrompt) -> [String]) throws(SSHFailure) {
        let deadline = self.deadline()
        func text(_ pointer: UnsafePointer<CChar>?) -> String {
            guard let pointer else { return "" }
            return ServerText.visible(String(cString: pointer), newlines: true)
        }
        for _ in 0..<64 {
            let rc = try retry("authenticating", until: deadline, again: SSH_AUTH_AGAIN.rawValue) { ssh_userauth_kbdint(raw, user, nil) }
            guard rc == SSH_AUTH_INFO.rawValue else { return try judge(rc, "keyboard-interactive authentication") }
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
                guard ssh_userauth_kbdint_setanswer(raw, UInt32(index), index < answers.count ? answers[index] : "") == 0 else {
                    throw failure(0, "keyboard-interactive authentication")
                }
            }
        }
        throw SSHFailure(.authenticationFailed, "Authentication failed: the server asked more than 64 rounds of questions")
    }

    // MARK: Channels

    /// Whether libssh's last error is a refused request (not a broken connection).
    private var lastErrorWasDenied: Bool { ssh_get_error_code(UnsafeMutableRawPointer(raw)) == SSH_REQUEST_DENIED.rawValue }

    func openSession(until deadline: Date) throws(SSHFailure) -> LibSSHChannel {
        guard let channel = ssh_channel_new(raw) else { throw failure(0, "opening a channel") }
        let exit = ChannelExit()
        exit.attach(to: channel)
        let opened = LibSSHChannel(raw: channel, exit: exit)
        let rc: Int32
        do {
            rc = try retry("opening a channel", until: deadline) { ssh_channel_open_session(channel) }
        } catch {
            free(opened)
            throw error
        }
        guard rc == SSH_OK else {
            let failure = failure(rc, "opening a channel")
            free(opened)
            throw failure
        }
        return opened
    }

    func requestEnvironment(_ channel: LibSSHChannel, name: String, value: String, until deadline: Date) throws(SSHFailure) -> Bool {
        let rc = try retry("setting \(name)", until: deadline) { ssh_channel_request_env(channel.raw, name, value) }
        if rc == SSH_OK { return true }
        if lastErrorWasDenied { return false }
        throw failure(rc, "setting \(name)")
    }

    func requestTerminal(_ channel: LibSSHChannel, _ terminal: SSHTerminal, until deadline: Date) throws(SSHFailure) {
        let modes = terminal.modes.encoded(fitting: 4096)
        let rc = try retry("requesting a terminal", until: deadline) {
            // libssh ≥ 0.11 sends our terminal modes; 0.10 (Debian 12) can send none.
            if let withModes = Self.ptyWithModes {
                return modes.withUnsafeBufferPointer { bytes in
                    withModes(channel.raw, terminal.term, Int32(terminal.columns), Int32(terminal.rows), bytes.baseAddress, bytes.count)
                }
            }
            return ssh_channel_request_pty_size(channel.raw, terminal.term, Int32(terminal.columns), Int32(terminal.rows))
        }
        guard rc == SSH_OK else { throw failure(rc, "requesting a terminal") }
    }

    func start(_ channel: LibSSHChannel, _ request: ChannelRequest, until deadline: Date) throws(SSHFailure) {
        let rc = try retry("starting the \(request.name)", until: deadline) {
            switch request {
            case .shell: ssh_channel_request_shell(channel.raw)
            case .exec(let command): ssh_channel_request_exec(channel.raw, command)
            case .subsystem(let name): ssh_channel_request_subsystem(channel.raw, name)
            }
        }
        guard rc == SSH_OK else { throw failure(rc, "starting the \(request.name)") }
    }

    func openDirect(host: String, port: Int, originHost: String, originPort: Int) -> DirectOpen<LibSSHChannel> {
        if opening == nil {
            guard let channel = ssh_channel_new(raw) else { return .lost(failure(0, "opening a forwarded connection")) }
            opening = channel
        }
        let channel = opening!
        let rc = ssh_channel_open_forward(channel, host, Int32(port), originHost, Int32(originPort))
        if rc == SSH_AGAIN { return .again }
        opening = nil
        if rc == SSH_OK { return .opened(LibSSHChannel(raw: channel, exit: nil)) }
        let failure = failure(rc, "opening a forwarded connection")
        let reason = ChannelOpenFailure.reason(libsshError: lastErrorText())
        ssh_channel_free(channel)
        if failure.kind == .connectionLost || failure.kind == .timedOut { return .lost(failure) }
        return .refused(reason)
    }

    func cancelDirectOpen() {
        if let opening { ssh_channel_free(opening) }
        opening = nil
    }

    // MARK: Channels the server opens

    func listenRemote(address: String, port: Int, until deadline: Date) throws(SSHFailure) -> Int? {
        var bound: Int32 = 0
        let rc = try retry("asking the server to listen on port \(port)", until: deadline) {
            ssh_channel_listen_forward(raw, address, Int32(port), &bound)
        }
        guard rc == SSH_OK else {
            if lastErrorWasDenied { return nil }
            throw failure(rc, "asking the server to listen on port \(port)")
        }
        return port == 0 ? Int(bound) : port
    }

    func requestAgentForwarding(_ channel: LibSSHChannel, until deadline: Date) throws(SSHFailure) {
        if callbacks == nil {
            // libssh hands the server's agent channel opens to this callback, which makes the
            // channel they go to; the pump picks it up in `acceptInbound`.
            let table = UnsafeMutablePointer<ssh_callbacks_struct>.allocate(capacity: 1)
            table.initialize(to: ssh_callbacks_struct())
            table.pointee.size = MemoryLayout<ssh_callbacks_struct>.size
            table.pointee.userdata = Unmanaged.passUnretained(self).toOpaque()
            table.pointee.channel_open_request_auth_agent_function = { session, userdata in
                guard let session, let userdata, let channel = ssh_channel_new(session) else { return nil }
                Unmanaged<LibSSHEngine>.fromOpaque(userdata).takeUnretainedValue().agentChannels.append(channel)
                return channel
            }
            guard ssh_set_callbacks(raw, table) == SSH_OK else {
                table.deallocate()
                throw failure(SSH_ERROR, "setting up agent forwarding")
            }
            callbacks = table
        }
        // Asks for no reply (as OpenSSH): a refusal shows as no agent on the server.
        let rc = try retry("asking for agent forwarding", until: deadline) { ssh_channel_request_auth_agent(channel.raw) }
        guard rc == SSH_OK else { throw failure(rc, "asking for agent forwarding") }
    }

    func acceptInbound() -> InboundChannel<LibSSHChannel>? {
        if !agentChannels.isEmpty { return .agent(LibSSHChannel(raw: agentChannels.removeFirst(), exit: nil)) }
        guard !state.remoteForwards.isEmpty else { return nil }
        var port: Int32 = 0
        var originator: UnsafeMutablePointer<CChar>?
        var originatorPort: Int32 = 0
        // A timeout of 0: one non-blocking look at what arrived, no sleep.
        guard let channel = ssh_channel_open_forward_port(raw, 0, &port, &originator, &originatorPort) else { return nil }
        var origin = ""
        if let originator {
            let host = ServerText.visible(String(cString: originator), limit: 64)
            ssh_string_free_char(originator)
            origin = host.contains(":") ? "[\(host)]:\(originatorPort)" : "\(host):\(originatorPort)"
        }
        return .forwarded(LibSSHChannel(raw: channel, exit: nil), port: Int(port), origin: origin)
    }

    func read(_ channel: LibSSHChannel, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> ChannelRead {
        let n = ssh_channel_read_nonblocking(channel.raw, buffer.baseAddress, UInt32(buffer.count), stream)
        if n > 0 { return .bytes(Int(n)) }
        if n == 0 || n == SSH_AGAIN { return .nothing }
        if n == SSH_EOF { return .eof }
        return .failed(failure(n, "reading from the channel"))
    }

    func write(_ channel: LibSSHChannel, _ bytes: UnsafeRawBufferPointer) -> ChannelWrite {
        let rc = ssh_channel_write(channel.raw, bytes.baseAddress, UInt32(bytes.count))
        if rc > 0 { return .wrote(Int(rc)) }
        if rc == 0 || rc == SSH_AGAIN { return .blocked }
        return .failed(failure(rc, "writing to the channel"))
    }

    func sendEOF(_ channel: LibSSHChannel) throws(SSHFailure) -> Bool {
        let rc = ssh_channel_send_eof(channel.raw)
        if rc == SSH_OK { return true }
        if rc == SSH_AGAIN { return false }
        throw failure(rc, "ending the command's input")
    }

    func isEOF(_ channel: LibSSHChannel) -> Bool { ssh_channel_is_eof(channel.raw) != 0 }

    func hasBufferedData(_ channel: LibSSHChannel) -> Bool {
        let out = ssh_channel_poll(channel.raw, 0)
        return out > 0 || out == SSH_EOF || ssh_channel_poll(channel.raw, 1) > 0
    }

    func windowIsOpen(_ channel: LibSSHChannel) -> Bool { ssh_channel_window_size(channel.raw) > 0 }

    func resize(_ channel: LibSSHChannel, columns: Int, rows: Int) -> SSHFailure? {
        // A window-change asks for no reply: it only queues a packet.
        guard ssh_channel_change_pty_size(channel.raw, Int32(columns), Int32(rows)) == SSH_ERROR else { return nil }
        return failure(SSH_ERROR, "resizing the terminal")
    }

    func closeNow(_ channel: LibSSHChannel) { _ = ssh_channel_close(channel.raw) }

    func finish(_ channel: LibSSHChannel) -> SSHChannelEnd {
        let deadline = Date(timeIntervalSinceNow: 5)
        let exit = channel.exit
        // The exit-status (or -signal) comes before the server's close; wait for one of them.
        while exit?.status == nil && exit?.signal == nil && ssh_channel_is_closed(channel.raw) == 0 && !isClosed {
            guard (try? waitSocket(until: deadline, what: "closing the channel")) != nil else { break }
            // Not ssh_channel_poll: after the server's EOF it answers without reading the socket.
            // This call reads what arrived (once, the session being non-blocking).
            _ = ssh_channel_get_exit_status(channel.raw)
        }
        _ = ssh_channel_close(channel.raw)
        return exit?.end ?? .exited(-1)
    }

    func release(_ channel: LibSSHChannel) {
        // libssh frees a channel whose close is still on its way once the server's close comes.
        _ = ssh_channel_close(channel.raw)
        ssh_channel_free(channel.raw)
    }

    func free(_ channel: LibSSHChannel) {
        // libssh keeps a channel freed while still open until the server's close, and calls its
        // callbacks for what arrives meanwhile (the exit status of a command still running when
        // the output's reader went away): they must not reach the ChannelExit, gone with the pump.
        if let exit = channel.exit { _ = ssh_remove_channel_callbacks(channel.raw, exit.callbacks) }
        ssh_channel_free(channel.raw)
    }

    // MARK: The rest

    func keepalive(every interval: TimeInterval) -> (SSHFailure?, TimeInterval) {
        let now = Date()
        guard let last = lastKeepalive else {
            lastKeepalive = now
            return (nil, interval)
        }
        let since = now.timeIntervalSince(last)
        guard since >= interval else { return (nil, interval - since) }
        // libssh keeps one such request at a time: a call while the last reply is unread only
        // reads it, so a second call sends the next request.
        _ = ssh_send_keepalive(raw)
        _ = ssh_send_keepalive(raw)
        lastKeepalive = now
        return (nil, interval)
    }

    func settle(until deadline: Date) {
        while hasQueuedOutput, !isClosed {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return }
            if ssh_blocking_flush(raw, Int32(max(1, min(left * 1000, 1000)))) == SSH_ERROR { return }
        }
    }

    func disconnect(description: String, handshakeDone: Bool) {
        // libssh's duplicate of the socket, unless libssh closed it already (on an error).
        let duplicate = ssh_get_fd(raw)
        if handshakeDone, !isClosed {
            settle(until: Date(timeIntervalSinceNow: 2))
            // libssh writes a packet at once only when its last poll of the socket found it
            // writable, and every write clears that mark; with nothing queued
            // `ssh_blocking_flush` does not poll, so one poll through an event sets it again:
            // ssh_disconnect's one non-blocking send needs it (it drops what it cannot write).
            if let event = ssh_event_new() {
                if ssh_event_add_session(event, raw) == SSH_OK {
                    _ = ssh_event_dopoll(event, 100)
                    _ = ssh_event_remove_session(event, raw)
                }
                ssh_event_free(event)
            }
            _ = ssh_session_set_disconnect_message(raw, description)
            // Sends SSH_MSG_DISCONNECT and forgets the socket without closing it (it was given
            // with SSH_OPTIONS_FD).
            ssh_disconnect(raw)
            if duplicate >= 0 { close(duplicate) }
        }
        free()
    }

    func free() {
        for channel in agentChannels { ssh_channel_free(channel) }
        agentChannels = []
        ssh_free(raw)
        // After libssh closed its end of the agent's socket pair (a write to a closed pair would
        // raise SIGPIPE: libssh writes to the agent without MSG_NOSIGNAL).
        agent?.stop()
        agent = nil
    }

    /// `ssh_channel_request_pty_size_modes` of libssh ≥ 0.11, looked up in the linked libssh at
    /// run time (nil with 0.10, which has no way to send terminal modes).
    typealias PTYWithModes = @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32, Int32, UnsafePointer<UInt8>?, Int) -> Int32
    static let ptyWithModes: PTYWithModes? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "ssh_channel_request_pty_size_modes") else { return nil }
        return unsafeBitCast(symbol, to: PTYWithModes.self)
    }()
}

/// How a session channel ended, as the server said it (exit-status, exit-signal): filled in by
/// libssh's channel callbacks, which also keep the callback table alive as long as the channel.
final class ChannelExit: @unchecked Sendable {
    var status: Int32?
    var signal: String?
    let callbacks: UnsafeMutablePointer<ssh_channel_callbacks_struct>

    init() {
        callbacks = UnsafeMutablePointer<ssh_channel_callbacks_struct>.allocate(capacity: 1)
        callbacks.initialize(to: ssh_channel_callbacks_struct())
        callbacks.pointee.size = MemoryLayout<ssh_channel_callbacks_struct>.size
        callbacks.pointee.userdata = Unmanaged.passUnretained(self).toOpaque()
        callbacks.pointee.channel_exit_status_function = { _, _, status, userdata in
            guard let userdata else { return }
            Unmanaged<ChannelExit>.fromOpaque(userdata).takeUnretainedValue().status = status
        }
        callbacks.pointee.channel_exit_signal_function = { _, _, signal, _, _, _, userdata in
            guard let userdata, let signal else { return }
            // The signal's name is the server's text: visible-safe before it is a value.
            let name = ServerText.visible(String(cString: signal), limit: 64)
            Unmanaged<ChannelExit>.fromOpaque(userdata).takeUnretainedValue().signal = name.isEmpty ? "unknown" : name
        }
    }

    /// Registers the callbacks on `channel` (which must not outlive this object).
    func attach(to channel: OpaquePointer) {
        _ = ssh_set_channel_callbacks(channel, callbacks)
    }

    deinit {
        callbacks.deallocate()
    }

    /// The end the server reported (a signal wins over a status), or `-1` when it said neither.
    var end: SSHChannelEnd {
        if let signal { return .signalled(signal) }
        return .exited(status ?? -1)
    }
}
