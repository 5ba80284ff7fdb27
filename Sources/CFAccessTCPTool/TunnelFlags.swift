import ArgumentParser

/// The names of the two tunnel flags that have short letters in cloudflared (`-T`, `-L`): `shell`
/// leaves the letters to their ssh meanings (`-T` no terminal, `-L` forwarding).
protocol TunnelFlagNames {
    /// `--hostname` and its aliases.
    static var hostname: NameSpecification { get }
    /// `--url` and its aliases.
    static var url: NameSpecification { get }
    /// Whether `--url` shows in the help (`shell` refuses it).
    static var urlVisibility: ArgumentVisibility { get }
}

/// cloudflared's names: `-T` is `--hostname`, `-L` is `--url`.
enum CloudflaredFlagNames: TunnelFlagNames {
    static var hostname: NameSpecification { [.customLong("hostname"), .customShort("T"), .customLong("tunnel-host")] }
    static var url: NameSpecification { [.customLong("url"), .customLong("listener"), .customShort("L")] }
    static var urlVisibility: ArgumentVisibility { .default }
}

/// `shell`'s names: the long ones only.
enum ShellFlagNames: TunnelFlagNames {
    static var hostname: NameSpecification { [.customLong("hostname"), .customLong("tunnel-host")] }
    static var url: NameSpecification { [.customLong("url"), .customLong("listener")] }
    static var urlVisibility: ArgumentVisibility { .hidden }
}

/// The flags of `cloudflared access tcp`, with its aliases, plus ours.
typealias TunnelFlags = TunnelFlagsNamed<CloudflaredFlagNames>

/// The tunnel flags, with `Names` for the two that have short letters.
struct TunnelFlagsNamed<Names: TunnelFlagNames>: ParsableArguments {
    @Option(name: Names.hostname,
            help: "The Access-protected hostname, e.g. ssh.example.com (env TUNNEL_SERVICE_HOSTNAME).")
    var hostname: String?

    @Option(name: Names.url,
            help: ArgumentHelp("Listen on this local address, e.g. 127.0.0.1:2222 (0 = any free port); without it stdin/stdout is the connection (env TUNNEL_SERVICE_URL).",
                               visibility: Names.urlVisibility))
    var url: String?

    @Option(name: [.customLong("header"), .customShort("H")],
            help: "Extra request header \"Name: value\" (repeatable; a name given twice sends both values, as cloudflared does).")
    var header: [String] = []

    @Option(name: [.customLong("service-token-id"), .customLong("id")],
            help: "Access service token client ID (env TUNNEL_SERVICE_TOKEN_ID).")
    var serviceTokenID: String?

    @Option(name: [.customLong("service-token-secret"), .customLong("secret")],
            help: "Access service token client secret (env TUNNEL_SERVICE_TOKEN_SECRET; prefer the environment: flags show in `ps`).")
    var serviceTokenSecret: String?

    @Flag(name: .customLong("fallback-oauth"),
          help: "If Access rejects the service token, log in with the browser instead (off by default).")
    var fallbackOAuth = false

    @OptionGroup(title: "Login (used when no service token or access token is given)")
    var login: LoginFlags

    @Option(name: .customLong("access-token"),
            help: "An Access application token (JWT) to send as Cf-Access-Token (env CF_ACCESS_TOKEN).")
    var accessToken: String?

    @Option(name: .customLong("destination"),
            help: "host:port the edge should reach, sent as Cf-Access-Jump-Destination (env TUNNEL_SERVICE_DESTINATION).")
    var destination: String?

    @Option(name: .customLong("connect-to"),
            help: "Dial host[:port] instead of the hostname, keeping the hostname for Host, SNI and certificate checks.")
    var connectTo: String?

    @Option(name: .customLong("ca-file"),
            help: "PEM file of CA certificates to trust instead of the system store (and of SSL_CERT_FILE, SSL_CERT_DIR, which are honoured without it).")
    var caFile: String?

    @Flag(name: .customLong("allow-non-loopback"),
          help: "Allow --url on a non-loopback address (exposes the tunnel to the network).")
    var allowNonLoopback = false

    @Option(name: .customLong("connect-timeout"), parsing: .unconditional, help: "Seconds allowed to open the WebSocket.")
    var connectTimeout: Int = 15

    @Option(name: .customLong("keepalive"), parsing: .unconditional, help: "Seconds of silence before a WebSocket ping keeps an idle tunnel alive; 0 turns pings off.")
    var keepalive: Int = 30

    @Option(name: .customLong("half-close-linger"), parsing: .unconditional, help: "Seconds the edge's reply still reaches the local side after it finished sending (stdin EOF), unless the edge closes first; 0 closes at once.")
    var halfCloseLinger: Int = 5

    @Option(name: .customLong("retries"), parsing: .unconditional, help: "Retries of a failed connect (network errors only), after 1 s, 5 s, 15 s.")
    var retries: Int = 0

    @Option(name: .customLong("max-connections"), parsing: .unconditional, help: "With --url: connections bridged at once; more are refused (default unlimited).")
    var maxConnections: Int?

    @Option(name: .customLong("threads"), parsing: .unconditional,
            help: "With --url: most threads that carry the connections, each its share (default: one per core, started as connections come).")
    var threads: Int?

    @Option(name: .customLong("spare-lifetime"), parsing: .unconditional,
            help: "With --url: seconds a spare connection to the edge (TCP and TLS, dialled after a connection carried bytes) waits for the next local connection, which then skips those handshakes; 0: no spare.")
    var spareLifetime: Int?

    @Flag(name: .customLong("single-connection"), help: "With --url: stop listening after the first connection.")
    var singleConnection = false

    @Option(name: .customLong("pin"),
            help: "Pin the edge's public key: sha256//BASE64 (curl's --pinnedpubkey form; several separated by commas, or --pin again). The dial fails unless the edge's leaf or another certificate of its chain carries one; the login's HTTPS to the same host is pinned too.")
    var pin: [String] = []

    @Option(name: .customLong("service-token-secret-file"),
            help: "Read the service token secret from this file (its first line; for systemd credentials, and so that ps never shows it).")
    var serviceTokenSecretFile: String?

    @Option(name: .customLong("exit-when-idle"), parsing: .unconditional,
            help: "Listener: exit (0) after this many seconds with no connection open; 0 never does. For socket activation, where systemd starts the tool again on the next connection.")
    var exitWhenIdle: Int = 0

    @Flag(name: .customLong("fail-fast"),
          help: "With --url: exit at start (69) when the edge cannot be reached, instead of listening all the same and dialling the edge for each connection as it comes.")
    var failFast = false

    @Flag(name: .customLong("allow-core-dumps"),
          help: "Let the process write core dumps (off: they could hold the service token secret or a token).")
    var allowCoreDumps = false

    @Option(name: [.customLong("loglevel"), .customLong("log-level")], help: "debug, info, warn, error or fatal.")
    var loglevel: String = "info"

    @Option(name: .customLong("logfile"), help: "Write logs to this file (0600) instead of stderr.")
    var logfile: String?

    @Option(name: .customLong("log-directory"), help: "Write logs to cf-access-tcp.log in this directory (made 0700 if missing, as cloudflared makes it).")
    var logDirectory: String?
}

extension TunnelFlagsNamed {
    /// Logs go to a file (`--logfile` or `--log-directory`), so each failure line goes there too.
    var writesLogFile: Bool { logfile != nil || logDirectory != nil }
}
