import AccessTransport
import CFAccessTCP
import FoundationEssentials
import SystemPackage

/// An SSH client session over a connected socket, typically a tunnel from
/// `AccessTunnel.openStream(hostname:method:)`: handshake with the host-key check, authentication,
/// commands and interactive shells. No TCP port is involved.
///
/// ```swift
/// let stream = try await tunnel.openStream(hostname: "ssh.example.com", method: method)
/// let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: knownHostsPath),
///                                                        host: "ssh.example.com", checking: .strict))
/// let ssh = try SSHSession(stream: stream, configuration: .init(hostKeyDelegate: verifier))
/// try await ssh.handshake()                        // the delegate accepted the host key
/// try await ssh.authenticate(user: "me", offer: .privateKey(path: "/home/me/.ssh/id_ed25519"))
/// let result = try await ssh.exec("uname -a")
/// print(String(decoding: result.standardOutput, as: UTF8.self), result.exitStatus ?? -1)
/// await ssh.disconnect()
/// ```
///
/// The policy lives in delegates: the host key is checked by the configuration's
/// ``SSHHostKeyDelegate`` (``KnownHostsVerifier``: OpenSSH's known_hosts rules), the way to log in
/// is picked by an ``SSHUserAuthenticationDelegate`` (``SSHOrderedAuthentication``: OpenSSH's
/// order) — or one ``SSHAuthenticationOffer`` is tried directly.
///
/// The SSH protocol is run by libssh, on one thread of the session's own: every method hops to
/// it, so the session may be used from any task; calls run one after another in order. A call
/// that must wait for the server waits in `poll(2)` on the socket, bounded by
/// ``Configuration/timeout`` while connecting and authenticating. No configuration file and no
/// known_hosts file is read behind the delegates' back.
///
/// A session that will open a terminal (``Configuration/opensTerminal``) runs on libssh2 instead
/// while the linked libssh cannot send terminal modes with the terminal request (before 0.11,
/// as in Debian 12): libssh2 sends them, so the remote terminal's characters and flags are the
/// local one's. libssh2 before 1.11 signs and verifies RSA only with SHA-1, which OpenSSH 8.8
/// and later refuse: such a session says so, and ``engineName`` tells which library runs it.
public final class SSHSession: Sendable {
    let core: any SessionCalls
    /// The SSH library running this session.
    package let engineKind: SSHEngineKind

    /// The server's host key, once ``handshake()`` returned (the delegate accepted it).
    public var hostKey: SSHHostKey? { core.hostKey }

    /// The SSH library running this session and its version, e.g. `libssh 0.10.6`.
    public var engineName: String { engineKind.features.version }

    /// Creates a session on a tunnel stream; the session owns the stream and closes it in
    /// ``disconnect(description:)``.
    public convenience init(stream: TunnelStream, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: stream.fileDescriptor.rawValue, configuration: configuration, owning: stream)
    }

    /// Creates a session on `fileDescriptor`, a connected stream socket (the SSH library calls
    /// send/recv on it) that the caller keeps owning: the escape hatch for a socket that is not a
    /// tunnel stream. The descriptor is made non-blocking.
    public convenience init(fileDescriptor: FileDescriptor, configuration: Configuration) throws(SSHFailure) {
        try self.init(descriptor: fileDescriptor.rawValue, configuration: configuration, owning: nil)
    }

    private init(descriptor: Int32, configuration: Configuration, owning stream: TunnelStream?) throws(SSHFailure) {
        let kind = SSHEngineKind.choice(for: configuration)
        switch kind {
        case .libssh:
            core = SSHSessionCore(engine: try LibSSHEngine(descriptor: descriptor, configuration: configuration), owning: stream)
        case .libssh2:
            core = SSHSessionCore(engine: try LibSSH2Engine(descriptor: descriptor, configuration: configuration), owning: stream)
        }
        engineKind = kind
    }

    /// Runs the SSH handshake, then has the configuration's ``SSHHostKeyDelegate`` check the
    /// server's host key; returns the key once the delegate accepted it. Throws the delegate's
    /// failure (``SSHFailure/Kind/hostKeyRejected``) otherwise: no credential is ever sent to a
    /// server whose key was not accepted.
    ///
    /// Before the key exchange the delegate's ``SSHHostKeyDelegate/preferredHostKeyAlgorithms()``
    /// (the types known for the host) are asked for first; DSA keys are never asked for. When the
    /// preferred list holds certificate algorithms (``KnownHostsVerifier``: a `@cert-authority`
    /// line names the host) and ``Configuration/hostCertificateConnection`` is set, the server's
    /// host certificate is read on that second connection first (neither linked library takes
    /// one in its key exchange), and the delegate is given the certificate instead of the plain
    /// key when it certifies exactly the key this session's key exchange proved; the certificate
    /// is then also ``hostKey``. What the server sends before its SSH identification is bounded as in
    /// OpenSSH (lines of at most 8192 bytes, at most 1024 of them, all within the timeout): a
    /// peer that is not an SSH server is said to be one.
    @discardableResult
    public func handshake() async throws(SSHFailure) -> SSHHostKey {
        try await core.handshake()
    }

    /// The authentication methods the server accepts for `user`; empty when it let `user` in
    /// without any (the `none` method), see ``isAuthenticated``.
    public func authenticationMethods(user: String) async throws(SSHFailure) -> SSHAuthenticationMethods {
        try await core.authenticationMethods(user: user)
    }

    /// Whether authentication has succeeded.
    public var isAuthenticated: Bool {
        get async { await core.isAuthenticated }
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
    public func authenticate(user: String, delegate: any SSHUserAuthenticationDelegate) async throws(SSHFailure) -> SSHAuthenticationOffer? {
        return try await core.authenticate(user: user, delegate: delegate)
    }

    /// Tries one `offer` for `user`. `answering` answers the rounds of a keyboard-interactive
    /// offer (nil: no answers). Throws ``SSHFailure/Kind/authenticationFailed`` if the server
    /// refuses it, ``SSHFailure/Kind/localIO`` if a key file cannot be read or decrypted,
    /// ``SSHFailure/Kind/configuration`` without a reachable ssh-agent.
    public func authenticate(user: String, offer: SSHAuthenticationOffer,
                             answering: (@Sendable (SSHKeyboardPrompt) async -> [String]?)? = nil) async throws(SSHFailure) {
        try await core.authenticate(user: user, offer: offer, answering: answering)
    }

    /// Runs `command` with `input` as its stdin and returns its output and exit status.
    /// `environment` is asked for first (servers set only the names their `AcceptEnv` allows;
    /// the others are skipped).
    public func exec(_ command: String, input: Data = Data(), environment: [String: String] = [:]) async throws(SSHFailure)
        -> SSHExecResult {
        try await core.exec(command, input: input, environment: environment)
    }

    /// Runs `command`, copying `standardInput` (nil: none) to it and its stdout and stderr to
    /// the given descriptors as they arrive, until it ends: the escape hatch for piping local
    /// files, pipes or a terminal straight through (the caller keeps owning the descriptors).
    /// `environment` is asked for first, as with ``exec(_:input:environment:)``.
    public func exec(_ command: String, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
                     standardError: FileDescriptor, environment: [String: String] = [:]) async throws(SSHFailure)
        -> SSHChannelEnd {
        try await core.run(.exec(command), standardInput: standardInput, standardOutput: standardOutput,
                           standardError: standardError, environment: environment)
    }

    /// Starts the login shell without a pseudo-terminal (ssh's `-T` without a command): it reads
    /// `standardInput` as its commands; otherwise as ``exec(_:standardInput:standardOutput:standardError:environment:)``.
    public func shell(standardInput: FileDescriptor?, standardOutput: FileDescriptor, standardError: FileDescriptor,
                      environment: [String: String] = [:]) async throws(SSHFailure) -> SSHChannelEnd {
        try await core.run(.shell, standardInput: standardInput, standardOutput: standardOutput,
                           standardError: standardError, environment: environment)
    }

    /// Starts the subsystem `name` (ssh's `-s`, e.g. `sftp`), copying `standardInput` to it and
    /// its output to `standardOutput` (and anything on its stderr to `standardError`) until it
    /// ends; otherwise as ``exec(_:standardInput:standardOutput:standardError:environment:)``.
    public func subsystem(_ name: String, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
                          standardError: FileDescriptor, environment: [String: String] = [:]) async throws(SSHFailure) -> SSHChannelEnd {
        try await core.run(.subsystem(name), standardInput: standardInput, standardOutput: standardOutput,
                           standardError: standardError, environment: environment)
    }

    /// Opens an interactive channel with a pseudo-terminal (its type, size and modes from
    /// `terminal`): the login shell, or `command` (e.g. `tmux new-session -A -s main`), with
    /// `environment` asked for first. Run it with ``SSHInteractiveChannel/run(input:output:escapes:)``.
    ///
    /// The modes reach the server when ``terminalModesSent`` is true (a session of
    /// ``Configuration/opensTerminal``, or a libssh of 0.11 or later); otherwise the remote
    /// terminal keeps the server's defaults.
    public func openShell(terminal: SSHTerminal, command: String? = nil, environment: [String: String] = [:]) async throws(SSHFailure)
        -> SSHInteractiveChannel {
        SSHInteractiveChannel(try await core.openShell(terminal: terminal, command: command, environment: environment))
    }

    /// Opens a `direct-tcpip` channel to `host`:`port` as the server sees them (ssh's `-W`, and
    /// the hop of a `ProxyJump`): run it with ``SSHInteractiveChannel/run(input:output:escapes:)``
    /// (no escapes), which copies `input` to the connection and the connection to `output` until
    /// either side ends (``SSHChannelEnd/closed``). Throws ``SSHFailure/Kind/protocolError`` with
    /// the server's reason when it refuses (OpenSSH's `connect failed: Connection refused`).
    public func openDirectTCPIP(host: String, port: Int) async throws(SSHFailure) -> SSHInteractiveChannel {
        SSHInteractiveChannel(try await core.openDirect(host: host, port: port))
    }

    /// Whether ``openShell(terminal:command:environment:)`` sends the terminal's modes with the
    /// terminal request.
    public var terminalModesSent: Bool { engineKind.sendsTerminalModes }

    /// Sends SSH_MSG_DISCONNECT with `description` (bounded at 2 s), frees the session and
    /// closes the stream it owns. Idempotent.
    public func disconnect(description: String = "closed by the user") async {
        await core.disconnect(description: description)
    }

    /// Listens for `listener`'s connections whenever a channel of this session runs (a command,
    /// a shell, or ``runForwards()``), each carried in a `direct-tcpip` channel of its own
    /// (OpenSSH's `-L`). The session does not close the listener.
    public func startForwarding(_ listener: SSHForwardListener) async throws(SSHFailure) {
        try await core.startForwarding(listener)
    }

    /// Asks the server to listen for `forward` (OpenSSH's `-R`): while a channel of this session
    /// runs (a command, a shell, or ``runForwards()``), each connection the server accepts on
    /// it comes back in a `forwarded-tcpip` channel and is connected here to the forward's
    /// `host:hostPort`; `onEvent` hears of each (on the session's thread: return quickly).
    /// Returns the port the server listens on (the one it picked when ``SSHRemoteForward/port``
    /// is 0). Throws ``SSHFailure/Kind/protocolError`` when the server refuses (its
    /// `AllowTcpForwarding`, a port in use or privileged). A reconnected session asks again.
    @discardableResult
    public func startRemoteForwarding(_ forward: SSHRemoteForward,
                                      onEvent: (@Sendable (SSHForwardEvent) -> Void)? = nil) async throws(SSHFailure) -> Int {
        try await core.startRemoteForwarding(forward, onEvent: onEvent)
    }

    /// Serves the forwards of ``startForwarding(_:)`` and ``startRemoteForwarding(_:onEvent:)`` with no command (OpenSSH's `-N`) until
    /// the connection is lost (``SSHChannelEnd/lost(_:)``) or the task is cancelled
    /// (``SSHChannelEnd/closed``).
    public func runForwards() async -> SSHChannelEnd {
        await core.runForwards()
    }
}

/// An interactive channel with a pseudo-terminal (a shell or a command), from
/// ``SSHSession/openShell(terminal:command:environment:)``.
public final class SSHInteractiveChannel: Sendable {
    private let channel: any InteractiveChannelCalls

    init(_ channel: any InteractiveChannelCalls) {
        self.channel = channel
    }

    /// Tells the remote the terminal's new size (SIGWINCH). Safe from any thread.
    public func resize(columns: Int, rows: Int) {
        channel.resize(columns: columns, rows: rows)
    }

    /// Sends `data` as keyboard input. Safe from any thread.
    public func write(_ data: Data) {
        channel.write(data)
    }

    /// Ends the input (EOF).
    public func endInput() {
        channel.endInput()
    }

    /// Closes the channel; ``run(input:output:escapes:)`` then returns `.closed`.
    public func close() {
        channel.close()
    }

    /// Runs the channel until it ends: `input` (a descriptor, e.g. a raw-mode terminal, or
    /// nil for ``write(_:)`` only) goes to the remote, its output to `output`. The escape hatch
    /// for a terminal; the caller keeps owning both descriptors.
    ///
    /// With `escapes`, what is typed on `input` goes through OpenSSH's escape sequences first:
    /// `~.` ends the channel at once (``SSHChannelEnd/closed``, without waiting for the server,
    /// so it works on a hung connection), `~?` writes the list to `output`, `~~` sends one `~`.
    public func run(input: FileDescriptor?, output: FileDescriptor, escapes: SSHEscapes? = nil) async -> SSHChannelEnd {
        await channel.run(input: input, output: output, escapes: escapes)
    }

    /// Runs the channel until it ends, handing each piece of output to `onOutput` (on the
    /// session's thread); input comes from ``write(_:)``.
    public func run(onOutput: @escaping @Sendable (Data) -> Void) async -> SSHChannelEnd {
        await channel.run(onOutput: onOutput)
    }
}
