import AccessTransport
import ArgumentParser
import CFAccessTCP
import FoundationEssentials
import Glibc

/// The login flags the tunnel and the login subcommands share.
struct LoginFlags: ParsableArguments {
    @Option(name: .customLong("token-dir"),
            help: "Token cache directory (default ~/.cloudflared, shared with cloudflared; env CF_ACCESS_TCP_TOKEN_DIR).")
    var tokenDir: String?

    @Option(name: .customLong("resolve"),
            help: "HOST:PORT:ADDRESS: connect to ADDRESS for HOST:PORT, like curl --resolve (repeatable).")
    var resolve: [String] = []

    @Option(name: .customLong("transfer-url"),
            help: ArgumentHelp("Base URL of the login transfer service (default https://login.cloudflareaccess.org).",
                               visibility: .hidden))
    var transferURL: String?

    @Flag(name: .customLong("no-browser"),
          help: "Do not open a browser: print the login URL and a QR code to finish the login on another device.")
    var noBrowser = false

    @Flag(name: .customLong("fedramp"), help: "Use Cloudflare's FedRAMP login service.")
    var fedRAMP = false

    @Flag(name: .customLong("auto-close"),
          help: "Let the browser page close itself after the login (cloudflared's --auto-close).")
    var autoClose = false

    @Option(name: .customLong("transfer-polls"), help: ArgumentHelp("Polls of the transfer service (default 10).", visibility: .hidden))
    var transferPolls: Int = 10

    @Option(name: .customLong("transfer-poll-interval"),
            help: ArgumentHelp("Seconds between polls after a \"not yet\" (default 1).", visibility: .hidden))
    var transferPollInterval: Double = 1

    /// The `--resolve` overrides, checked.
    func resolveOverrides() throws(ConfigurationError) -> [ResolveOverride] {
        var overrides: [ResolveOverride] = []
        for raw in resolve { overrides.append(try ResolveOverride.parse(raw)) }
        return overrides
    }

    /// The login configuration these flags describe.
    func configuration(caFile: String?, connectTo: [ConnectOverride] = [],
                       environment: [String: String]) throws(ConfigurationError) -> AccessLoginConfiguration {
        let overrides = try resolveOverrides()
        if let transferURL {
            guard transferURL.lowercased().hasPrefix("https://"), transferURL.count > "https://".count else {
                throw ConfigurationError("--transfer-url must be an https:// URL, e.g. https://login.cloudflareaccess.org")
            }
        }
        guard (1...100).contains(transferPolls) else {
            throw ConfigurationError("--transfer-polls must be between 1 and 100")
        }
        guard transferPollInterval >= 0 && transferPollInterval <= 60 else {
            throw ConfigurationError("--transfer-poll-interval must be between 0 and 60 seconds")
        }
        let directory = tokenDir ?? FileTokenStore.defaultDirectory(environment: environment)
        var configuration = AccessLoginConfiguration(tokenDirectory: directory, caFile: caFile, resolve: overrides,
                                                     connectTo: connectTo, transferBaseURL: transferURL,
                                                     noBrowser: noBrowser, fedRAMP: fedRAMP,
                                                     maximumPolls: transferPolls,
                                                     pollInterval: .seconds(transferPollInterval))
        configuration.closeInterstitial = autoClose
        return configuration
    }
}

/// The flags every login subcommand shares.
struct AuthFlags: ParsableArguments {
    @OptionGroup var login: LoginFlags

    @Option(name: .customLong("ca-file"),
            help: "PEM file of CA certificates to trust instead of the system store (and of SSL_CERT_FILE, SSL_CERT_DIR, which are honoured without it).")
    var caFile: String?

    @Option(name: [.customLong("loglevel"), .customLong("log-level")], help: "debug, info, warn, error or fatal.")
    var loglevel: String = "info"

    /// The login configuration these flags describe.
    func configuration(environment: [String: String]) throws(ConfigurationError) -> AccessLoginConfiguration {
        try checkCAFile(caFile)
        return try login.configuration(caFile: caFile, environment: environment)
    }
}

/// The flags of `token` and `logout`, which read and remove cached tokens (and look the
/// application up) but never log in: no browser or login-service flags.
struct CacheFlags: ParsableArguments {
    @Option(name: .customLong("token-dir"),
            help: "Token cache directory (default ~/.cloudflared, shared with cloudflared; env CF_ACCESS_TCP_TOKEN_DIR).")
    var tokenDir: String?

    @Option(name: .customLong("resolve"),
            help: "HOST:PORT:ADDRESS: connect to ADDRESS for HOST:PORT, like curl --resolve (repeatable).")
    var resolve: [String] = []

    @Option(name: .customLong("ca-file"),
            help: "PEM file of CA certificates to trust instead of the system store (and of SSL_CERT_FILE, SSL_CERT_DIR, which are honoured without it).")
    var caFile: String?

    @Option(name: [.customLong("loglevel"), .customLong("log-level")], help: "debug, info, warn, error or fatal.")
    var loglevel: String = "info"

    /// `access --fedramp token …` is cloudflared's spelling; reading the cache needs no login
    /// service, so it changes nothing here.
    @Flag(name: .customLong("fedramp"), help: ArgumentHelp("Accepted for cloudflared's `access --fedramp`; no effect here.",
                                                          visibility: .private))
    var fedRAMP = false

    /// The configuration of the token cache and the application lookup.
    func configuration(environment: [String: String]) throws(ConfigurationError) -> AccessLoginConfiguration {
        try checkCAFile(caFile)
        var overrides: [ResolveOverride] = []
        for raw in resolve { overrides.append(try ResolveOverride.parse(raw)) }
        return AccessLoginConfiguration(tokenDirectory: tokenDir ?? FileTokenStore.defaultDirectory(environment: environment),
                                        caFile: caFile, resolve: overrides)
    }
}

/// A `--ca-file` must name a readable regular file: said plainly, instead of a TLS failure
/// ("unable to get local issuer certificate") at the first connection.
func checkCAFile(_ path: String?) throws(ConfigurationError) {
    guard let path else { return }
    var info = stat()
    guard stat(path, &info) == 0 else {
        throw ConfigurationError("--ca-file \(path): \(SystemError.current().text); give a readable PEM file of CA certificates")
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
        throw ConfigurationError("--ca-file \(path) is not a regular file; give a readable PEM file of CA certificates")
    }
    guard access(path, R_OK) == 0 else {
        throw ConfigurationError("--ca-file \(path) cannot be read (\(SystemError.current().text)); "
                                 + "give a readable PEM file of CA certificates")
    }
}

/// Runs the login work of `login`, `token` and `logout`, with Ctrl-C and SIGTERM removing any
/// held login lock before the process exits.
func runAuthWork<T: Sendable>(_ body: () async throws(TunnelFailure) -> T) async throws(TunnelFailure) -> T {
    // The login work holds tokens: no core dumps (issue 12.10).
    SecretMemory.protect()
    let signals = handleInterrupts { sig in
        FileLoginLock.releaseAllHeld()
        writeStderr("\ncf-access-tcp: login cancelled")
        exit(ExitStatus(signal: sig).rawValue)
    }
    defer { signals.forEach { $0.cancel() } }
    return try await body()
}

/// Sets up logging and the token provider for a login subcommand.
func makeProvider(flags: AuthFlags) throws -> AccessTokenProvider {
    try makeProvider(loglevel: flags.loglevel) { environment throws(ConfigurationError) in
        try flags.configuration(environment: environment)
    }
}

/// Sets up logging and the token provider for `token` and `logout`.
func makeProvider(flags: CacheFlags) throws -> AccessTokenProvider {
    try makeProvider(loglevel: flags.loglevel) { environment throws(ConfigurationError) in
        try flags.configuration(environment: environment)
    }
}

private func makeProvider(
    loglevel: String,
    configuration make: ([String: String]) throws(ConfigurationError) -> AccessLoginConfiguration
) throws -> AccessTokenProvider {
    let environment = ProcessInfo.processInfo.environment
    let logging: LoggingSetup
    let configuration: AccessLoginConfiguration
    do {
        logging = try LoggingSetup(level: loglevel, file: nil, directory: nil)
        configuration = try make(environment)
    } catch {
        throw usageFailure(error.withFlags)
    }
    return AccessTokenProvider(configuration: configuration, logger: logging.logger,
                               browser: SystemBrowserOpener(environment: environment))
}

/// Parses a positional application URL.
func parseApplicationURL(_ raw: String) throws -> OriginURL {
    do {
        return try OriginURL.parse(raw)
    } catch {
        throw usageFailure(error.message { $0 == .hostname ? "the URL" : $0.flag })
    }
}
