import CFAccessTCP

/// The tunnel's settings from flags, falling back to cloudflared's environment variables.
struct TunnelSettings {
    let carrier: CarrierConfiguration
    /// nil = stdin/stdout (ProxyCommand mode).
    let listen: ListenAddress?

    init(flags: TunnelFlags, environment: [String: String]) throws(ConfigurationError) {
        func pick(_ flag: String?, _ variable: String) -> String? {
            if let flag { return flag }
            if let value = environment[variable], !value.isEmpty { return value }
            return nil
        }
        guard let rawHost = pick(flags.hostname, "TUNNEL_SERVICE_HOSTNAME") else {
            throw ConfigurationError("--hostname is required: the Access application's hostname, e.g. --hostname ssh.example.com")
        }
        let origin = try OriginURL.parse(rawHost)

        let id = pick(flags.serviceTokenID, "TUNNEL_SERVICE_TOKEN_ID")
        let secret = pick(flags.serviceTokenSecret, "TUNNEL_SERVICE_TOKEN_SECRET")
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
        let destination = pick(flags.destination, "TUNNEL_SERVICE_DESTINATION")
        var extra: [HeaderField] = []
        for raw in flags.header { extra.append(try HeaderField.parse(raw)) }
        let request = try RequestBuilder.upgradeRequest(
            origin: origin, userAgent: Version.userAgent, serviceToken: serviceToken,
            accessToken: accessToken, destination: destination, extraHeaders: extra)

        let connectTo = try flags.connectTo.map { raw throws(ConfigurationError) in try ConnectTarget.parse(raw) }
        guard (1...600).contains(flags.connectTimeout) else {
            throw ConfigurationError("--connect-timeout must be between 1 and 600 seconds")
        }
        let credential: CredentialKind = serviceToken != nil ? .serviceToken : (accessToken != nil ? .accessToken : .none)
        carrier = CarrierConfiguration(request: request, connectTo: connectTo, caFile: flags.caFile,
                                       credential: credential, handshakeTimeoutSeconds: flags.connectTimeout)
        listen = try pick(flags.url, "TUNNEL_SERVICE_URL").map { raw throws(ConfigurationError) in
            try ListenAddress.parse(raw, allowNonLoopback: flags.allowNonLoopback)
        }
    }
}
