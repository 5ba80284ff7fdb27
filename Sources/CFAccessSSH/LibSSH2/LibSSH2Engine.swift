import AccessTransport
import FoundationEssentials
internal import CCFSSH2
// The socket constants (SHUT_WR, MSG_NOSIGNAL) come with the first C module that includes
// their headers, here libssh's.
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// libssh2's one-time global initialisation (crypto back end), done on first use.
private let libssh2Initialised: Int32 = libssh2_init(0)

extension SSHEngineFeatures {
    /// The linked libssh2 (`libssh2 1.10.0`), checked at run time (the library may be newer than
    /// the headers it was built with): rsa-sha2 from 1.11 on. It always sends terminal modes.
    package static let libssh2 = SSHEngineFeatures(
        version: "libssh2 " + (libssh2_version(0).map { String(cString: $0) } ?? "unknown"),
        rsaSHA2: libssh2_version(0x010b00) != nil, sendsTerminalModes: true, acceptsAgentChannels: false,
        passesBanner: LibSSH2Engine.userauthBanner != nil)
}

/// libssh2's calls for ``SSHSessionCore``, for sessions that open a terminal while the linked
/// libssh cannot send terminal modes (before 0.11). libssh2 runs non-blocking, through our own
/// send and recv (``SocketIO``): sends never come back short, and no read happens behind the
/// pump's back. The engine is what libssh2's callbacks find through the session's abstract
/// pointer.
final class LibSSH2Engine: SSHEngine, @unchecked Sendable {
    typealias Channel = OpaquePointer
    static var features: SSHEngineFeatures { .libssh2 }

    let state: SessionState
    let raw: OpaquePointer
    let io: SocketIO
    /// The keyboard-interactive responder while such an authentication runs.
    var respond: (@Sendable (SSHKeyboardPrompt) -> [String])?
    /// The identification line has been read (what follows is the first packet).
    var identified = false
    /// The server's first binary packet (its KEXINIT), as far as it arrived (at most 64 KiB).
    var firstPacket: [UInt8] = []
    /// The server's SSH_MSG_DISCONNECT description (visible-safe), if it sent one.
    var disconnectReason: String?
    /// The stream ended (recv returned 0).
    var peerClosed = false
    /// The server accepted the public key last probed.
    var probeAccepted = false
    /// Channels closed by us whose server close may still come: freed once it did.
    private var detached: [OpaquePointer] = []
    /// The server's listeners of remote forwards, with the port each listens on.
    private var remoteListeners: [(OpaquePointer, Int)] = []

    init(descriptor fileDescriptor: Int32, configuration: SSHSession.Configuration) throws(SSHFailure) {
        state = SessionState(fd: fileDescriptor, configuration: configuration)
        guard libssh2Initialised == 0, let session = CCFSSH2_session_init() else {
            throw SessionState.cannotStart("libssh2", initialisation: "libssh2_init", result: libssh2Initialised)
        }
        libssh2_session_set_blocking(session, 0)
        raw = session
        io = SocketIO(fd: fileDescriptor)
        libssh2_session_abstract(session).pointee = Unmanaged.passUnretained(self).toOpaque()
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_RECV, unsafeBitCast(receiveCallback, to: UnsafeMutableRawPointer.self))
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_SEND, unsafeBitCast(sendCallback, to: UnsafeMutableRawPointer.self))
        // The server's SSH_MSG_DISCONNECT reason, for the failure that follows.
        _ = libssh2_session_callback_set(session, LIBSSH2_CALLBACK_DISCONNECT,
                                         unsafeBitCast(disconnectCallback, to: UnsafeMutableRawPointer.self))
    }

    /// Repeats `call` while it returns LIBSSH2_ERROR_EAGAIN.
    private func retry(_ what: String, until deadline: Date?, _ call: () -> Int32) throws(SSHFailure) -> Int32 {
        try retry(what, until: deadline) { () -> Int32? in
            let rc = call()
            return rc == LIBSSH2_ERROR_EAGAIN ? nil : rc
        }
    }

    /// Repeats `call` while it returns nil and libssh2's last error is EAGAIN; nil for another error.
    private func retryPointer<P>(_ what: String, until deadline: Date?, _ call: () -> P?) throws(SSHFailure) -> P? {
        try retry(what, until: deadline) { () -> P?? in
            if let value = call() { return .some(value) }
            return libssh2_session_last_errno(raw) == LIBSSH2_ERROR_EAGAIN ? nil : .some(nil)
        }
    }

    // MARK: Socket

    var hasQueuedOutput: Bool {
        io.pendingOutbound > 0 || libssh2_session_block_directions(raw) & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0
    }
    var wantsInput: Bool { io.bufferedInbound < SocketIO.inboundLimit }

    func beforeWait() -> SSHFailure? {
        io.flush() ? nil : SSHFailure(.connectionLost, "Connection lost: \(io.sendErrorText ?? "the tunnel closed")")
    }

    func afterWait(_ revents: Int16, pumping: Bool) {
        if revents & Int16(POLLOUT) != 0 { io.flush() }
        io.polled()
    }

    func endRound() -> SSHFailure? {
        detached.removeAll { libssh2_channel_free($0) != LIBSSH2_ERROR_EAGAIN }
        return beforeWait()
    }

    var acceptsChannelData: Bool { io.pendingOutbound < SocketIO.highWater }
    var inboundMark: UInt64 { io.mark }
    func takeUnread() -> SSHFailure? { io.drained ? nil : io.fill() }
    var isClosed: Bool { io.sendErrorText != nil }
    var serverDisconnect: String? { disconnectReason }

    /// libssh2's last error message (visible-safe).
    private func lastErrorText() -> String {
        var message: UnsafeMutablePointer<CChar>?
        var length: Int32 = 0
        _ = libssh2_session_last_error(raw, &message, &length, 0)
        guard let message else { return "unknown error" }
        return ServerText.visible(String(cString: message))
    }

    func failure(_ code: Int32, _ what: String) -> SSHFailure {
        if let sendError = io.sendErrorText { return SSHFailure(.connectionLost, "Connection lost: \(sendError) while \(what)") }
        // libssh2 reports some requests cut short by the server's disconnect (or its end of the
        // stream) as their own refusal ("Waiting for USERAUTH response"): nothing more can
        // work, so that is a lost connection, with the server's reason when it gave one.
        if let reason = disconnectReason {
            return SSHFailure(.connectionLost, "Connection closed by the SSH server while \(what): \(reason)")
        }
        if peerClosed {
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)")
        }
        switch code {
        case LIBSSH2_ERROR_SOCKET_NONE, LIBSSH2_ERROR_SOCKET_SEND, LIBSSH2_ERROR_SOCKET_RECV,
             LIBSSH2_ERROR_SOCKET_DISCONNECT, LIBSSH2_ERROR_BANNER_RECV, LIBSSH2_ERROR_BANNER_SEND,
             LIBSSH2_ERROR_BAD_SOCKET, LIBSSH2_ERROR_SOCKET_TIMEOUT:
            return SSHFailure(.connectionLost, "Connection lost: the SSH connection closed while \(what)")
        case LIBSSH2_ERROR_TIMEOUT:
            return state.timedOut(what)
        case LIBSSH2_ERROR_AUTHENTICATION_FAILED, LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED:
            return SSHFailure(.authenticationFailed, "Authentication failed")
        case LIBSSH2_ERROR_FILE, LIBSSH2_ERROR_KEYFILE_AUTH_FAILED:
            return SSHFailure(.localIO, "\(what): \(lastErrorText())")
        default:
            return SSHFailure(.protocolError, "SSH error while \(what): \(lastErrorText()) (\(code))")
        }
    }

    // MARK: Handshake

    /// libssh2's own algorithms of `method` (a `LIBSSH2_METHOD_*`), in its order.
    private func supportedAlgorithms(_ method: Int32) -> [String] {
        var list: UnsafeMutablePointer<UnsafePointer<CChar>?>?
        let count = libssh2_session_supported_algs(raw, method, &list)
        guard count > 0, let list else { return [] }
        defer { libssh2_free(raw, list) }
        return (0..<Int(count)).compactMap { list[$0].map { String(cString: $0) } }
    }

    func prepareHandshake(preferredHostKeys: [String]?) -> [String] {
        // libssh2 1.10 names ECDSA certificates, but only to sign with (user certificates): it
        // cannot take a host's (HostCertificateProbe reads it on a connection of its own).
        let hostKeys = supportedAlgorithms(LIBSSH2_METHOD_HOSTKEY).filter { !$0.hasSuffix(HostKeyAlgorithms.certificateSuffix) }
        let offered = HostKeyAlgorithms.preference(preferred: preferredHostKeys, supported: hostKeys)
        if !offered.isEmpty { _ = libssh2_session_method_pref(raw, LIBSSH2_METHOD_HOSTKEY, offered.joined(separator: ",")) }
        for method in [LIBSSH2_METHOD_CRYPT_CS, LIBSSH2_METHOD_CRYPT_SC] {
            let ciphers = CipherAlgorithms.preference(supported: supportedAlgorithms(method))
            if !ciphers.isEmpty { _ = libssh2_session_method_pref(raw, method, ciphers.joined(separator: ",")) }
        }
        if state.configuration.compression { _ = libssh2_session_flag(raw, LIBSSH2_FLAG_COMPRESS, 1) }
        return offered
    }

    func handshake(offering hostKeys: [String], until deadline: Date) throws(SSHFailure) -> SSHFailure? {
        let rc = try retry("handshake", until: deadline) { libssh2_session_handshake(raw, state.fd) }
        guard rc == 0 else {
            if rc == LIBSSH2_ERROR_KEX_FAILURE, let server = KexInit.parse(packet: firstPacket),
               let why = KexDiagnosis.explain(server: server, hostKeysOffered: hostKeys, kexOffered: supportedAlgorithms(LIBSSH2_METHOD_KEX),
                                              ciphersOffered: supportedAlgorithms(LIBSSH2_METHOD_CRYPT_CS),
                                              macsOffered: supportedAlgorithms(LIBSSH2_METHOD_MAC_CS), features: Self.features) {
                return why
            }
            return failure(rc, "handshaking")
        }
        let keepalive = state.configuration.keepalive
        if keepalive.isEnabled { libssh2_keepalive_config(raw, 1, keepalive.librarySeconds) }
        return nil
    }

    func serverHostKey() throws(SSHFailure) -> SSHHostKey {
        var length = 0
        var type: Int32 = 0
        guard let blob = libssh2_session_hostkey(raw, &length, &type), length > 0,
              let hash = libssh2_hostkey_hash(raw, LIBSSH2_HOSTKEY_HASH_SHA256) else {
            throw SSHFailure(.protocolError, "the SSH server sent no usable host key")
        }
        return SSHHostKey(blob: [UInt8](UnsafeRawBufferPointer(start: blob, count: length)),
                          sha256: [UInt8](UnsafeRawBufferPointer(start: hash, count: 32)))
    }

    // MARK: Authentication

    func noneMethod(user: String) throws(SSHFailure) -> SSHAuthenticationMethods? {
        let list = try retryPointer("listing authentication methods", until: deadline()) {
            libssh2_userauth_list(raw, user, UInt32(user.utf8.count))
        }
        guard let list else {
            if libssh2_userauth_authenticated(raw) == 1 { return nil }
            throw failure(libssh2_session_last_errno(raw), "listing authentication methods")
        }
        return SSHAuthenticationMethods(names: String(cString: list).split(separator: ","))
    }

    /// The banner through `libssh2_userauth_banner` (1.11 and later, looked up at run time);
    /// libssh2 1.10 (Debian 12) reads the banner and drops it: nil.
    func issueBanner() -> String? {
        guard let userauthBanner = Self.userauthBanner else { return nil }
        var banner: UnsafeMutablePointer<CChar>?
        guard userauthBanner(raw, &banner) == 0, let banner else { return nil }
        let text = ServerText.visible(String(cString: banner), newlines: true)
        return text.isEmpty ? nil : text
    }

    /// `libssh2_userauth_banner` of libssh2 ≥ 1.11, looked up in the linked library (nil with 1.10).
    typealias UserauthBanner = @convention(c) (OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32
    static let userauthBanner: UserauthBanner? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "libssh2_userauth_banner") else { return nil }
        return unsafeBitCast(symbol, to: UserauthBanner.self)
    }()

    func offerPassword(user: String, password: String) throws(SSHFailure) {
        let rc = try retry("authenticating", until: deadline()) {
            libssh2_userauth_password_ex(raw, user, UInt32(user.utf8.count), password, UInt32(password.utf8.count), nil)
        }
        guard rc == 0 else { throw failure(rc, "authenticating with a password") }
    }

    func probeKey(user: String, publicKey blob: [UInt8]) throws(SSHFailure) -> Bool {
        // libssh2 sends the key without a signature first and calls for a signature only once
        // the server said it would accept it (SSH_MSG_USERAUTH_PK_OK): the callback notes that
        // and declines to sign.
        probeAccepted = false
        let abstract = libssh2_session_abstract(raw)
        let rc = try retry("authenticating", until: deadline()) {
            blob.withUnsafeBufferPointer { libssh2_userauth_publickey(raw, user, $0.baseAddress, $0.count, probeSignCallback, abstract) }
        }
        if probeAccepted || rc == 0 { return true }
        let failure = failure(rc, "offering a public key")
        if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
        return false
    }

    func offerKey(user: String, path: String, certificate: String?, passphrase: String?) throws(SSHFailure) {
        // libssh2 presents a certificate given as the public key file.
        let rc = try retry("authenticating", until: deadline()) {
            libssh2_userauth_publickey_fromfile_ex(raw, user, UInt32(user.utf8.count), certificate, path, passphrase)
        }
        guard rc == 0 else { throw failure(rc, certificate.map { "using the certificate \($0)" } ?? "using the key \(path)") }
    }

    func offerAgent(user: String, socketPath: String?, only: [UInt8]?) throws(SSHFailure) {
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
            guard rc == 0, let identity else { throw SSHFailure(.localIO, "the ssh-agent failed: \(lastErrorText())") }
            previous = identity
            if let only, [UInt8](UnsafeBufferPointer(start: identity.pointee.blob, count: Int(identity.pointee.blob_len))) != only {
                continue
            }
            let auth = try retry("authenticating", until: deadline()) { libssh2_agent_userauth(agent, user, identity) }
            if auth == 0 { return }
            let failure = failure(auth, "authenticating with the ssh-agent")
            if failure.kind == .connectionLost || failure.kind == .timedOut || only != nil { throw failure }
        }
        if only != nil { throw SSHFailure(.configuration, "the ssh-agent no longer holds the key") }
        throw SSHFailure(.authenticationFailed, "Authentication failed")
    }

    func offerKeyboardInteractive(user: String, respond: @escaping @Sendable (SSHKeyboardPrompt) -> [String]) throws(SSHFailure) {
        self.respond = respond
        defer { self.respond = nil }
        let rc = try retry("authenticating", until: deadline()) {
            libssh2_userauth_keyboard_interactive_ex(raw, user, UInt32(user.utf8.count), keyboardCallback)
        }
        guard rc == 0 else { throw failure(rc, "keyboard-interactive authentication") }
    }

    // MARK: Channels

    func openSession(until deadline: Date) throws(SSHFailure) -> OpaquePointer {
        guard let channel = try retryPointer("opening a channel", until: deadline, { CCFSSH2_channel_open_session(raw) }) else {
            throw failure(libssh2_session_last_errno(raw), "opening a channel")
        }
        return channel
    }

    func requestEnvironment(_ channel: OpaquePointer, name: String, value: String, until deadline: Date) throws(SSHFailure) -> Bool {
        let rc = try retry("setting \(name)", until: deadline) {
            libssh2_channel_setenv_ex(channel, name, UInt32(name.utf8.count), value, UInt32(value.utf8.count))
        }
        if rc == 0 { return true }
        if rc == LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED { return false }
        throw failure(rc, "setting \(name)")
    }

    func requestTerminal(_ channel: OpaquePointer, _ terminal: SSHTerminal, until deadline: Date) throws(SSHFailure) {
        let term = terminal.term
        // libssh2 takes at most 256 bytes of terminal type and modes.
        let modes = terminal.modes.encoded(fitting: 256 - term.utf8.count)
        let rc = try retry("requesting a terminal", until: deadline) {
            modes.withUnsafeBytes { bytes in
                libssh2_channel_request_pty_ex(channel, term, UInt32(term.utf8.count), bytes.baseAddress?.assumingMemoryBound(to: CChar.self),
                                               UInt32(bytes.count), Int32(terminal.columns), Int32(terminal.rows), 0, 0)
            }
        }
        guard rc == 0 else { throw failure(rc, "requesting a terminal") }
    }

    func start(_ channel: OpaquePointer, _ request: ChannelRequest, until deadline: Date) throws(SSHFailure) {
        let (kind, argument): (String, String?)
        switch request {
        case .shell: (kind, argument) = ("shell", nil)
        case .exec(let command): (kind, argument) = ("exec", command)
        case .subsystem(let name): (kind, argument) = ("subsystem", name)
        }
        let rc = try retry("starting the \(request.name)", until: deadline) {
            libssh2_channel_process_startup(channel, kind, UInt32(kind.utf8.count), argument, UInt32(argument?.utf8.count ?? 0))
        }
        guard rc == 0 else { throw failure(rc, "starting the \(request.name)") }
    }

    func openDirect(host: String, port: Int, originHost: String, originPort: Int) -> DirectOpen<OpaquePointer> {
        if let channel = libssh2_channel_direct_tcpip_ex(raw, host, Int32(port), originHost, Int32(originPort)) {
            // A direct-tcpip channel has no stderr; anything sent as such is dropped (and its
            // window given back) instead of piling up unread.
            libssh2_channel_handle_extended_data2(channel, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE)
            return .opened(channel)
        }
        let code = libssh2_session_last_errno(raw)
        if code == LIBSSH2_ERROR_EAGAIN { return .again }
        let failure = failure(code, "opening a forwarded connection")
        if failure.kind == .connectionLost || failure.kind == .timedOut { return .lost(failure) }
        return .refused(ChannelOpenFailure.reason(libssh2Error: lastErrorText()))
    }

    func cancelDirectOpen() {}

    func read(_ channel: OpaquePointer, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> ChannelRead {
        let n = libssh2_channel_read_ex(channel, stream, buffer.baseAddress!.assumingMemoryBound(to: CChar.self), buffer.count)
        if n > 0 { return .bytes(n) }
        if n == Int(LIBSSH2_ERROR_EAGAIN) || n == 0 { return .nothing }
        return .failed(failure(Int32(n), "reading from the channel"))
    }

    func write(_ channel: OpaquePointer, _ bytes: UnsafeRawBufferPointer) -> ChannelWrite {
        let rc = libssh2_channel_write_ex(channel, 0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
        if rc > 0 { return .wrote(rc) }
        if rc == Int(LIBSSH2_ERROR_EAGAIN) || rc == 0 { return .blocked }
        return .failed(failure(Int32(rc), "writing to the channel"))
    }

    func sendEOF(_ channel: OpaquePointer) throws(SSHFailure) -> Bool {
        let rc = libssh2_channel_send_eof(channel)
        if rc == 0 { return true }
        if rc == LIBSSH2_ERROR_EAGAIN { return false }
        throw failure(rc, "ending the command's input")
    }

    func isEOF(_ channel: OpaquePointer) -> Bool { libssh2_channel_eof(channel) == 1 }

    func hasBufferedData(_ channel: OpaquePointer) -> Bool {
        var available: UInt = 0
        _ = libssh2_channel_window_read_ex(channel, &available, nil)
        return available > 0
    }

    func windowIsOpen(_ channel: OpaquePointer) -> Bool { libssh2_channel_window_write_ex(channel, nil) > 0 }

    func resize(_ channel: OpaquePointer, columns: Int, rows: Int) -> SSHFailure? {
        let rc = try? retry("resizing", until: Date(timeIntervalSinceNow: 5)) {
            libssh2_channel_request_pty_size_ex(channel, Int32(columns), Int32(rows), 0, 0)
        }
        guard let rc, rc < 0 else { return nil }
        return failure(rc, "resizing the terminal")
    }

    func closeNow(_ channel: OpaquePointer) { _ = libssh2_channel_close(channel) }

    func finish(_ channel: OpaquePointer) -> SSHChannelEnd {
        let deadline = Date(timeIntervalSinceNow: 5)
        _ = try? retry("closing the channel", until: deadline) { libssh2_channel_close(channel) }
        _ = try? retry("closing the channel", until: deadline) { libssh2_channel_wait_closed(channel) }
        var signal: UnsafeMutablePointer<CChar>?
        var signalLength = 0
        _ = libssh2_channel_get_exit_signal(channel, &signal, &signalLength, nil, nil, nil, nil)
        if let signal {
            defer { Glibc.free(signal) }
            // The signal's name is the server's text: visible-safe before it is a value.
            if signalLength > 0 { return .signalled(ServerText.visible(UnsafeRawBufferPointer(start: signal, count: signalLength), limit: 64)) }
        }
        return .exited(libssh2_channel_get_exit_status(channel))
    }

    // MARK: Channels the server opens

    func listenRemote(address: String, port: Int, until deadline: Date) throws(SSHFailure) -> Int? {
        var bound: Int32 = 0
        let listener = try retryPointer("asking the server to listen on port \(port)", until: deadline) { () -> OpaquePointer? in
            libssh2_channel_forward_listen_ex(raw, address, Int32(port), &bound, 16)
        }
        guard let listener else {
            let code = libssh2_session_last_errno(raw)
            let failure = failure(code, "asking the server to listen on port \(port)")
            if failure.kind == .connectionLost || failure.kind == .timedOut { throw failure }
            return nil
        }
        let listening = port == 0 ? Int(bound) : port
        remoteListeners.append((listener, listening))
        return listening
    }

    func requestAgentForwarding(_ channel: OpaquePointer, until deadline: Date) throws(SSHFailure) {
        throw SSHFailure(.configuration, "agent forwarding needs libssh: \(Self.features.version) cannot accept the server's agent channels")
    }

    func acceptInbound() -> InboundChannel<OpaquePointer>? {
        for (listener, port) in remoteListeners {
            if let channel = libssh2_channel_forward_accept(listener) {
                libssh2_channel_handle_extended_data2(channel, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE)
                // libssh2 does not pass on the connection's origin.
                return .forwarded(channel, port: port, origin: "")
            }
        }
        return nil
    }

    func release(_ channel: OpaquePointer) {
        // Without waiting for the server's close: the channel is freed once it came.
        if libssh2_channel_close(channel) == LIBSSH2_ERROR_EAGAIN {
            detached.append(channel)
        } else {
            _ = libssh2_channel_free(channel)
        }
    }

    func free(_ channel: OpaquePointer) { _ = libssh2_channel_free(channel) }

    // MARK: The rest

    func keepalive(every interval: TimeInterval) -> (SSHFailure?, TimeInterval) {
        var next: Int32 = 0
        let rc = libssh2_keepalive_send(raw, &next)
        if rc < 0 && rc != LIBSSH2_ERROR_EAGAIN { return (failure(rc, "sending a keepalive"), 0) }
        return (nil, TimeInterval(max(1, next)))
    }

    func settle(until deadline: Date) { _ = io.flushAll(until: deadline) }

    func disconnect(description: String, handshakeDone: Bool) {
        if handshakeDone {
            let deadline = Date(timeIntervalSinceNow: 2)
            _ = try? retry("disconnecting", until: deadline) {
                libssh2_session_disconnect_ex(raw, SSH_DISCONNECT_BY_APPLICATION, description, "")
            }
            _ = io.flushAll(until: deadline)
        }
        free()
    }

    func free() {
        for channel in detached { _ = libssh2_channel_free(channel) }
        detached = []
        _ = libssh2_session_free(raw)
    }

    /// Keeps the start of the server's first binary packet, which follows the identification.
    func noteInbound(_ bytes: UnsafeRawBufferPointer) {
        var bytes = bytes[...]
        if !identified {
            guard let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) else { return }
            identified = true
            bytes = bytes[(newline + 1)...]
        }
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

/// The engine of a libssh2 session, from the abstract pointer its callbacks get.
private func sessionEngine(_ abstract: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> LibSSH2Engine? {
    guard let pointer = abstract?.pointee else { return nil }
    return Unmanaged<LibSSH2Engine>.fromOpaque(pointer).takeUnretainedValue()
}

/// libssh2's socket read, through ``SocketIO/receive(_:_:flags:)``; the start of the server's
/// first packet is kept (to explain a failed key exchange). Errors go back as `-errno`, as
/// libssh2's own function returns them.
private let receiveCallback: @convention(c) (
    Int32, UnsafeMutableRawPointer?, Int, Int32, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int = { socket, buffer, length, flags, abstract in
    // libssh2 talks to the ssh-agent through these callbacks too, on the agent's socket: only
    // the session's own socket goes through SocketIO.
    guard let engine = sessionEngine(abstract), socket == engine.io.fd else {
        let n = recv(socket, buffer, length, flags)
        return n < 0 ? -Int(errno) : n
    }
    let n = engine.io.receive(buffer, length, flags: flags)
    if n == 0 { engine.peerClosed = true }
    if n > 0, engine.firstPacket.count < 65_536, let buffer { engine.noteInbound(UnsafeRawBufferPointer(start: buffer, count: n)) }
    return n
}

/// libssh2's socket write, through ``SocketIO/send(_:_:flags:)``: all of it is taken (sent or
/// queued) unless the socket failed.
private let sendCallback: @convention(c) (
    Int32, UnsafeRawPointer?, Int, Int32, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int = { socket, buffer, length, flags, abstract in
    guard let buffer, length > 0 else { return 0 }
    guard let engine = sessionEngine(abstract), socket == engine.io.fd else {
        let n = Glibc.send(socket, buffer, length, flags)
        return n < 0 ? -Int(errno) : n
    }
    return engine.io.send(buffer, length, flags: flags)
}

/// libssh2's signing callback while a key is probed: the server accepted the key; no signature.
private let probeSignCallback: @convention(c) (
    OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?, UnsafeMutablePointer<Int>?, UnsafePointer<UInt8>?, Int,
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Int32 = { _, _, _, _, _, abstract in
    sessionEngine(abstract)?.probeAccepted = true
    return -1
}

/// libssh2's disconnect callback: keeps the server's reason, visible-safe, for the failure.
private let disconnectCallback: @convention(c) (
    OpaquePointer?, Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, Int32,
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Void = { _, reason, message, length, _, _, abstract in
    guard let engine = sessionEngine(abstract) else { return }
    var text = ""
    if let message, length > 0 {
        text = ServerText.visible(UnsafeRawBufferPointer(start: message, count: Int(length)), limit: 512)
    }
    engine.disconnectReason = text.isEmpty ? "reason \(reason)" : text
}

/// libssh2's keyboard-interactive callback: asks the engine's responder and hands libssh2
/// malloc'd answers (libssh2 frees them).
private let keyboardCallback: @convention(c) (
    UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, Int32, Int32,
    UnsafePointer<LIBSSH2_USERAUTH_KBDINT_PROMPT>?, UnsafeMutablePointer<LIBSSH2_USERAUTH_KBDINT_RESPONSE>?,
    UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> Void = { name, nameLength, instruction, instructionLength, count, prompts, responses, abstract in
    guard let engine = sessionEngine(abstract), let responses else { return }
    // Server text: made visible-safe here, before it becomes a value anyone can print.
    func text(_ p: UnsafePointer<CChar>?, _ n: Int) -> String {
        guard let p, n > 0 else { return "" }
        return ServerText.visible(UnsafeRawBufferPointer(start: p, count: n), newlines: true)
    }
    var list: [SSHKeyboardPrompt.Question] = []
    for index in 0..<Int(max(0, count)) {
        guard let prompt = prompts?[index] else { continue }
        list.append(SSHKeyboardPrompt.Question(text: prompt.text.map { text($0, Int(prompt.length)) } ?? "", echo: prompt.echo != 0))
    }
    let round = SSHKeyboardPrompt(name: text(name, Int(nameLength)), instruction: text(instruction, Int(instructionLength)),
                                  questions: list)
    let answers = engine.respond?(round) ?? []
    for index in 0..<Int(max(0, count)) {
        let answer = index < answers.count ? answers[index] : ""
        responses[index].text = strdup(answer)
        responses[index].length = UInt32(answer.utf8.count)
    }
}
