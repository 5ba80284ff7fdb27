import SystemPackage

extension SSHSession {
    /// How a session checks the server and how long it waits: the host-key delegate (required,
    /// as swift-nio-ssh requires one), the time each request may take and the keepalives.
    ///
    /// ```swift
    /// let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: path),
    ///                                                        host: "ssh.example.com"))
    /// let ssh = try SSHSession(stream: stream, configuration: .init(hostKeyDelegate: verifier,
    ///                                                              timeout: .seconds(10)))
    /// ```
    public struct Configuration: Sendable {
        /// Decides whether the server's host key is trusted, before any credential is sent.
        public var hostKeyDelegate: any SSHHostKeyDelegate
        /// How long the handshake and each authentication or channel request may take.
        public var timeout: Duration
        /// SSH keepalives while a channel runs, and when silence means the connection is lost.
        public var keepalive: SSHKeepalive
        /// Whether the session will open a terminal (``SSHSession/openShell(terminal:command:environment:)``).
        /// With a libssh older than 0.11, which cannot send terminal modes, such a session runs on
        /// libssh2, which sends them (see ``SSHSession``). False by default.
        public var opensTerminal: Bool
        /// Whether the session asks for zlib compression (ssh's `-C`, `Compression yes`); the
        /// server decides. False by default.
        public var compression = false
        /// Agent forwarding (ssh's `-A`, `ForwardAgent`): the ssh-agent socket that the server's
        /// agent requests are carried to (the value of `SSH_AUTH_SOCK`, or `IdentityAgent`); nil,
        /// the default: none. While a session channel runs, the server (and anyone with root on
        /// it) can then sign with every key of that agent: only for servers trusted as much as
        /// this machine. Such a session runs on libssh, since libssh2 1.10 cannot accept the
        /// agent's channels (see ``SSHSession``).
        public var agentForwarding: String?
        /// Opens a second connection to the same SSH server (for the tool: a second tunnel
        /// stream), on which ``SSHSession/handshake()`` reads the server's host certificate when
        /// the host-key delegate asks for certificates (a `@cert-authority` line names the host):
        /// neither linked library takes a certificate in its own key exchange. nil, the default:
        /// no certificate is read, and the plain key alone is judged. A connection that cannot be
        /// opened (nil) or a server with no certificate leaves the plain key too.
        public var hostCertificateConnection: (@Sendable () async -> SSHCertificateConnection?)?
        /// The SSH library to run on, chosen by hand (tests); nil: as ``opensTerminal`` says.
        package var engine: SSHEngineKind?

        /// A configuration with every setting; `timeout` 15 s and keepalives every 10 s by default.
        public init(hostKeyDelegate: any SSHHostKeyDelegate, timeout: Duration = .seconds(15),
                    keepalive: SSHKeepalive = SSHKeepalive(), opensTerminal: Bool = false) {
            self.hostKeyDelegate = hostKeyDelegate
            self.timeout = timeout
            self.keepalive = keepalive
            self.opensTerminal = opensTerminal
            self.engine = nil
        }
    }
}

/// SSH keepalives (OpenSSH's `ServerAliveInterval` and `ServerAliveCountMax`): a request that
/// asks for a reply every `interval` while a channel runs; when the server has sent nothing for
/// `unansweredLimit` intervals, the connection is lost even if no socket error says so.
///
/// A pure value: ``isConnectionLost(silence:)`` is the whole rule, so it can be checked without
/// a connection.
public struct SSHKeepalive: Sendable, Equatable {
    /// Time between keepalive requests; zero (or less) turns them off. Counted in whole
    /// seconds, at least 2 (the floor of libssh2, the engine before libssh, kept so the timing
    /// did not change with the engine), so the interval is rounded up to that.
    public var interval: Duration
    /// How many intervals without a byte from the server mean the connection is lost.
    public var unansweredLimit: Int

    /// Keepalives every `interval` (default 10 s); lost after `unansweredLimit` (default 3)
    /// intervals without a byte from the server, so a dead link is noticed in about 30 s. (A
    /// session tool is watched by a person: 90 s or more of a frozen terminal before the
    /// reconnect starts is what users complained about; a keepalive costs a few dozen bytes.)
    public init(interval: Duration = .seconds(10), unansweredLimit: Int = 3) {
        self.interval = interval
        self.unansweredLimit = unansweredLimit
    }

    /// No keepalives, and silence never counts as a loss.
    public static let off = SSHKeepalive(interval: .zero)

    /// Whether keepalives are sent.
    public var isEnabled: Bool { interval > .zero }

    /// The interval in whole seconds (0 when off).
    var librarySeconds: UInt32 {
        guard isEnabled else { return 0 }
        return UInt32(min(Double(UInt32.max), interval.seconds.rounded(.up)))
    }

    /// The real time between keepalives: whole seconds, at least 2.
    public var effectiveInterval: Duration {
        guard isEnabled else { return .zero }
        return .seconds(max(2, Int(librarySeconds)))
    }

    /// How long silence may last before the connection counts as lost: `unansweredLimit`
    /// intervals, plus a second for the last reply on its way. Nil when keepalives are off.
    public var lossAfter: Duration? {
        guard isEnabled else { return nil }
        return effectiveInterval * max(1, unansweredLimit) + .seconds(1)
    }

    /// Whether `silence` (the time since the server last sent a byte) means the connection is
    /// lost: longer than ``lossAfter``.
    public func isConnectionLost(silence: Duration) -> Bool {
        guard let lossAfter else { return false }
        return silence > lossAfter
    }

    /// How much more silence, after `silence` so far, makes the connection lost (zero once it
    /// is); nil when keepalives are off. A running channel checks again no later than this, so
    /// a loss is noticed when the rule says, not at the next keepalive.
    public func remainingBeforeLoss(silence: Duration) -> Duration? {
        guard let lossAfter else { return nil }
        return max(.zero, lossAfter - silence)
    }
}

extension Duration {
    /// The duration in seconds, with fractions.
    var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
}

/// A second connection to a session's SSH server, from
/// ``SSHSession/Configuration/hostCertificateConnection``: the socket, and how to close it with
/// whatever carries it (a tunnel).
public struct SSHCertificateConnection: Sendable {
    /// A connected stream socket to the server.
    public let fileDescriptor: FileDescriptor
    /// Closes the socket and what carries it; called once the certificate was read.
    public let close: @Sendable () async -> Void

    /// A connection on `fileDescriptor`, closed by `close`.
    public init(fileDescriptor: FileDescriptor, close: @escaping @Sendable () async -> Void) {
        self.fileDescriptor = fileDescriptor
        self.close = close
    }
}
