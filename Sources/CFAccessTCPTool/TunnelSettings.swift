import AccessCore
import AccessTransport
import CFAccessTCP
import Logging

/// The tunnel's settings from flags, falling back to cloudflared's environment variables.
struct TunnelSettings {
    let hostname: String
    let origin: OriginURL
    let method: AuthenticationMethod
    let options: AccessTunnel.Options
    /// The address to listen on (nil: stdin/stdout, ProxyCommand mode, unless a socket was
    /// handed over).
    let listen: ListenAddress?
    /// A listening socket systemd handed over (`LISTEN_FDS`): the listener accepts on it.
    let listeningSocket: ListeningSocket?
    /// `--service-token-secret-file`, read again on SIGHUP.
    let secretFile: String?
    /// Listener mode: an address, or a socket handed over.
    var listens: Bool { listen != nil || listeningSocket != nil }
    /// The built-in login, when the method uses it.
    let provider: AccessTokenProvider?

    init<Names>(flags: TunnelFlagsNamed<Names>, environment: [String: String], logger: Logger) throws(ConfigurationError) {
        func pick(_ flag: String?, _ variable: String) -> String? {
            if let flag { return flag }
            if let value = environment[variable], !value.isEmpty { return value }
            return nil
        }
        guard let rawHost = pick(flags.hostname, "TUNNEL_SERVICE_HOSTNAME") else {
            throw ConfigurationError("--hostname is required: the Access application's hostname, e.g. --hostname ssh.example.com")
        }
        hostname = rawHost
        origin = try OriginURL.parse(rawHost)
        try Self.checkCombinations(flags, environment: environment)
        // From here on the process may hold a secret: no core dumps unless asked for.
        if !flags.allowCoreDumps { SecretMemory.protect() }

        let id = pick(flags.serviceTokenID, "TUNNEL_SERVICE_TOKEN_ID")
        secretFile = flags.serviceTokenSecretFile
        var secret = pick(flags.serviceTokenSecret, "TUNNEL_SERVICE_TOKEN_SECRET")
        if let file = flags.serviceTokenSecretFile {
            guard flags.serviceTokenSecret == nil else {
                throw ConfigurationError("--service-token-secret and --service-token-secret-file were both given: give one")
            }
            secret = try Self.secret(fromFile: file)
        }
        var serviceToken: ServiceToken?
        switch (id, secret) {
        case let (id?, secret?):
            serviceToken = try ServiceToken(clientID: id, clientSecret: secret)
        case (.some, nil):
            throw ConfigurationError("--service-token-id was given without --service-token-secret: give both, or neither")
        case (nil, .some):
            throw ConfigurationError("--service-token-secret was given without --service-token-id: give both, or neither")
        case (nil, nil):
            serviceToken = nil
        }
        let accessToken = pick(flags.accessToken, "CF_ACCESS_TOKEN")
        let connectTo = try flags.connectTo.map { raw throws(ConfigurationError) in try ConnectTarget.parse(raw) }
        let resolve = try flags.login.resolveOverrides()
        var pins: [PublicKeyPin] = []
        for raw in flags.pin { pins += try PublicKeyPin.parseList(raw) }
        // Without a service token or an access token, or with --fallback-oauth, log in as
        // cloudflared does: cached token, org-token exchange, browser or device login.
        let needsLogin = (serviceToken == nil && accessToken == nil) || (serviceToken != nil && flags.fallbackOAuth)
        if needsLogin {
            var overrides: [ConnectOverride] = []
            if let connectTo { overrides.append(ConnectOverride(origin: origin, target: connectTo)) }
            var configuration = try flags.login.configuration(caFile: flags.caFile, connectTo: overrides,
                                                              environment: environment)
            configuration.pins = pins
            configuration.pinnedHost = origin.host
            provider = AccessTokenProvider(configuration: configuration, logger: logger,
                                           browser: SystemBrowserOpener(environment: environment))
        } else {
            provider = nil
        }
        if let serviceToken {
            method = provider.map { .serviceTokenWithOAuthFallback(serviceToken, $0) } ?? .serviceToken(serviceToken)
        } else if let accessToken {
            method = .accessToken(accessToken)
        } else if let provider {
            method = .oauth(provider)
        } else {
            method = .none
        }
        let destination = pick(flags.destination, "TUNNEL_SERVICE_DESTINATION")
        var extra: [HeaderField] = []
        for raw in flags.header { extra.append(try HeaderField.parse(raw)) }
        // Validate the whole request now, so a bad header or token fails before any dial.
        _ = try RequestBuilder.upgradeRequest(
            origin: origin, userAgent: Version.userAgent, serviceToken: serviceToken,
            accessToken: serviceToken == nil ? accessToken : nil, destination: destination, extraHeaders: extra)

        listeningSocket = SocketActivation.socket(environment: environment, allowNonLoopback: flags.allowNonLoopback)
        // A socket handed over wins over --url: one unit file serves both ways of starting.
        listen = listeningSocket != nil ? nil : try pick(flags.url, "TUNNEL_SERVICE_URL").map { raw throws(ConfigurationError) in
            try ListenAddress.parse(raw, allowNonLoopback: flags.allowNonLoopback)
        }
        // NO_PROXY names the Access hostname, as curl matches the URL's host (not --connect-to).
        let proxy = try ProxySettings.fromEnvironment(environment, host: origin.host, port: origin.effectivePort)
        let options = AccessTunnel.Options(
            connectTo: connectTo, caFile: flags.caFile, extraHeaders: extra, destination: destination,
            listenAddress: listen ?? .loopbackAnyPort, connectTimeout: .seconds(flags.connectTimeout),
            retry: RetryPolicy(maxAttempts: flags.retries + 1, delays: RetryPolicy.standard.delays),
            limits: ListenerLimits(maxConcurrentConnections: flags.maxConnections,
                                   stopAcceptingAfterFirstConnection: flags.singleConnection,
                                   idleExit: flags.exitWhenIdle > 0 ? .seconds(flags.exitWhenIdle) : nil,
                                   maxCarrierThreads: flags.threads,
                                   spareConnectionLifetime: Self.spareLifetime(flags.spareLifetime)),
            keepaliveInterval: .seconds(flags.keepalive), resolveOverrides: resolve, proxy: proxy,
            halfCloseLinger: .seconds(flags.halfCloseLinger), listensWhenEdgeUnreachable: !flags.failFast,
            pins: pins, listeningSocket: listeningSocket)
        // The ranges are the library's (AccessTunnel.Options.validate); the words name our flags.
        do {
            try options.validate()
        } catch {
            let flag: String
            switch error.field {
            case .connectTimeout: flag = "--connect-timeout"
            case .keepaliveInterval: flag = "--keepalive"
            case .halfCloseLinger: flag = "--half-close-linger"
            case .retries: flag = "--retries"
            case .maxConcurrentConnections: flag = "--max-connections"
            case .maxCarrierThreads: flag = "--threads"
            case .spareConnectionLifetime:
                throw ConfigurationError("--spare-lifetime must be between 0 (no spare) and 300 seconds")
            }
            throw ConfigurationError("\(flag) must be \(error.allowed)")
        }
        self.options = options
    }

    /// The service token secret in `file`: its first line without surrounding white space (a
    /// file written by `echo` or an editor ends with a newline).
    /// `--spare-lifetime`: unset is the listener's default, 0 no spare, else that many seconds
    /// (the library checks the range).
    static func spareLifetime(_ seconds: Int?) -> Duration? {
        guard let seconds else { return ListenerLimits.defaultSpareLifetime }
        return seconds == 0 ? nil : .seconds(seconds)
    }

    static func secret(fromFile file: String) throws(ConfigurationError) -> String {
        guard let bytes = FileDescriptors.readSmallFile(file, limit: 64 << 10) else {
            throw ConfigurationError("cannot read the service token secret from --service-token-secret-file \(file): "
                                     + "\(SystemError.current().text); give a readable file holding the secret")
        }
        let firstLine = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).first ?? ""
        let scalars = firstLine.unicodeScalars.drop { $0.properties.isWhitespace }
        var secret = String(String.UnicodeScalarView(scalars))
        while let last = secret.unicodeScalars.last, last.properties.isWhitespace { secret.unicodeScalars.removeLast() }
        guard !secret.isEmpty else {
            throw ConfigurationError("--service-token-secret-file \(file) is empty: put the secret on its first line")
        }
        return secret
    }

    /// Flags that contradict each other, or numbers below zero, are refused before anything else
    /// (issue 12.12), each with one line that says what to do.
    static func checkCombinations<Names>(_ flags: TunnelFlagsNamed<Names>, environment: [String: String]) throws(ConfigurationError) {
        let numbers: [(String, Int?)] = [("--connect-timeout", flags.connectTimeout), ("--keepalive", flags.keepalive),
                                         ("--retries", flags.retries), ("--max-connections", flags.maxConnections),
                                         ("--exit-when-idle", flags.exitWhenIdle)]
        for case let (flag, value?) in numbers where value < 0 {
            throw ConfigurationError("\(flag) must be ≥ 0 (got \(value))")
        }
        try checkCAFile(flags.caFile)
        let listening = flags.url != nil || !(environment["TUNNEL_SERVICE_URL"] ?? "").isEmpty
            || SocketActivation.socket(environment: environment, allowNonLoopback: true) != nil
        if !listening {
            if flags.exitWhenIdle > 0 {
                throw ConfigurationError("--exit-when-idle needs --url (or a socket from systemd): stdin/stdout ends with its one connection")
            }
            if flags.singleConnection {
                throw ConfigurationError("--single-connection needs --url: without it stdin/stdout is already one connection")
            }
            if flags.maxConnections != nil {
                throw ConfigurationError("--max-connections needs --url: without it stdin/stdout is already one connection")
            }
            if flags.threads != nil {
                throw ConfigurationError("--threads needs --url: without it stdin/stdout is one connection on one thread")
            }
            if flags.spareLifetime != nil {
                throw ConfigurationError("--spare-lifetime needs --url: without it stdin/stdout is one connection, with no next one to dial ahead for")
            }
        }
        let hasServiceToken = flags.serviceTokenID != nil || flags.serviceTokenSecret != nil
        if flags.accessToken != nil && hasServiceToken {
            throw ConfigurationError("--access-token and a service token were both given: "
                                     + "give one credential (the service token, or the access token)")
        }
    }
}
