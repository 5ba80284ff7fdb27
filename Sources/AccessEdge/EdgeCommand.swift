import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1

/// `cf-access-edge`: a local stand-in for the Cloudflare Access edge, for tests and benchmarks.
@main
struct EdgeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cf-access-edge",
        abstract: "Local Cloudflare Access edge emulator: WebSocket-to-TCP tunnels behind Access-style checks.",
        subcommands: [Serve.self, Certs.self, SSHCA.self, Target.self]
    )
}

extension EdgeCommand {
    /// `serve`: the TLS WebSocket edge.
    struct Serve: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve WebSocket tunnels over TLS with Access-style credential checks, and Cloudflare's "
                + "side of the login protocol (metadata, JWKS, cli page, transfer, org-token exchange).",
            discussion: "Every endpoint, knob and admin call is described in reference/EMULATOR.md."
        )

        @Option(help: "Address to listen on, HOST:PORT (port 0 picks a free one).")
        var listen = "127.0.0.1:0"

        @Option(help: "PEM certificate chain file.")
        var cert: String

        @Option(help: "PEM private key file.")
        var key: String

        @Option(help: "Fixed TCP target HOST:PORT. Without it, Cf-Access-Jump-Destination picks the target (a bastion).")
        var target: String?

        @Option(name: .customLong("allow-destination"),
                help: "Without --target: a Cf-Access-Jump-Destination HOST:PORT the bastion may reach (repeatable); others get 502.")
        var allowDestinations: [String] = []

        @Option(name: .customLong("site"),
                help: "HOST=ADDR:PORT: one more listener that serves only HOST, with the certificate from --site-certs (repeatable).")
        var sites: [String] = []

        @Option(name: .customLong("site-certs"),
                help: "Directory of per-host certificates (<host>.pem, <host>-key.pem from `certs --per-host`) for --site.")
        var siteCerts: String?

        @Option(name: .customLong("ssh-ca-key"),
                help: "The SSH user CA's private key (from `cf-access-edge ssh-ca`); default: one made at the first use.")
        var sshCAKey: String?

        @Option(name: .customLong("ssh-cert-ttl"), help: "Lifetime of a short-lived SSH certificate, in seconds.")
        var sshCertTTL = 180

        @Option(name: .customLong("cert-sign-mode"),
                help: "ok: cert_sign signs; refuse: it answers 403 as for an application without short-lived certificates.")
        var certSignMode: CertSignMode = .ok

        @Option(name: .customLong("service-token"), help: "Accepted service token ID:SECRET (repeatable).")
        var serviceTokens: [String] = []

        @Option(name: .customLong("app-token"), help: "Accepted Cf-Access-Token value (repeatable).")
        var appTokens: [String] = []

        @Option(help: "Access team name: the auth domain is <team>.cloudflareaccess.com.")
        var team = "emulator"

        @Option(name: .customLong("force-status"), help: "Answer every WebSocket upgrade with this HTTP status.")
        var forceStatus: Int?

        @Option(name: .customLong("idle-timeout"),
                help: "Close a tunnel after this many seconds without frames either way (0 = never).")
        var idleTimeout: Double = 0

        @Flag(help: "Log each upgrade and tunnel event to stderr.")
        var verbose = false

        @Flag(name: .customLong("ignore-pings"), help: "Count WebSocket pings but never answer them (a dead path, for keepalive tests).")
        var ignorePings = false

        // MARK: Login protocol (reference/EMULATOR.md)

        @Option(help: "Application AUD (64 hex digits by default; any non-empty text without spaces).")
        var aud = AuthSettings.defaultAudience

        @Option(name: .customLong("app-hostname"),
                help: "Metadata app_hostname claim (empty: clients use the hostname).")
        var appHostname = ""

        @Option(name: .customLong("metadata-mode"),
                help: "How app discovery answers: a good JWT, or a fault for client tests.")
        var metadataMode: MetadataMode = .ok

        @Option(name: .customLong("transfer-mode"),
                help: "How the transfer service answers polls: normally, or a fault for client tests.")
        var transferMode: TransferMode = .ok

        @Option(name: .customLong("login-mode"),
                help: "auto: opening the cli page completes the login; manual: only POST /cdn-cgi/edge/admin/complete does.")
        var loginMode: LoginMode = .auto

        @Option(name: .customLong("rotate-kid-after"),
                help: "Rotate the signing key after this many metadata JWTs signed with it (0 = never).")
        var rotateKidAfter = 0

        @Option(name: .customLong("token-ttl"), help: "App token lifetime in seconds.")
        var tokenTTL = 3600

        @Option(name: .customLong("org-token-ttl"), help: "Org token lifetime in seconds.")
        var orgTokenTTL = 86_400

        @Option(name: .customLong("login-email"), help: "Email claim of the emulated signed-in user.")
        var loginEmail = "user@example.test"

        @Option(name: .customLong("transfer-hold"),
                help: "Seconds a transfer poll for an unfinished login is held open, as Cloudflare's service does (0 = answer at once).")
        var transferHold = 20

        @Option(name: .customLong("app-session-layout"),
                help: "app: the app host's login redirect sets CF_AppSession (Cloudflare's layout); team: the team domain's redirect does.")
        var appSessionLayout: AppSessionLayout = .app

        func validate() throws {
            _ = try checkedOptions()
        }

        func run() throws {
            let options = try checkedOptions()
            let stats = EdgeStats()
            let authority = try AccessAuthority(settings: options.settings, stats: stats)
            let configuration = options.configuration(authority: authority)
            var server: EdgeServer?
            try ServerLifecycle.run(
                address: configuration.listen,
                start: { group in
                    let made = server ?? EdgeServer(configuration: configuration, stats: stats, group: group)
                    return try made.start()
                },
                sites: { group in
                    let made = EdgeServer(configuration: configuration, stats: stats, group: group)
                    server = made
                    return try made.startSites()
                },
                announce: { "cf-access-edge listening on \($0)" }
            )
        }

        /// The options, checked; the signing key is only made in `run`.
        private struct CheckedOptions {
            var listen: HostPort
            var cert: String
            var key: String
            var fixedTarget: HostPort?
            var serviceTokens: [ServiceToken]
            var appTokens: Set<String>
            var forcedStatus: HTTPResponseStatus?
            var tunnel: TunnelSettings
            var settings: AuthSettings
            var allowedDestinations: [HostPort]
            var sites: [EdgeSite]

            func configuration(authority: AccessAuthority) -> EdgeServerConfiguration {
                var policy = AccessPolicy(fixedTarget: fixedTarget, serviceTokens: serviceTokens,
                                          appTokens: appTokens, authority: authority, forcedStatus: forcedStatus)
                policy.allowedDestinations = allowedDestinations
                var configuration = EdgeServerConfiguration(listen: listen, certificatePath: cert, keyPath: key,
                                                            policy: policy, tunnel: tunnel)
                configuration.sites = sites
                return configuration
            }
        }

        private func checkedOptions() throws -> CheckedOptions {
            guard let listenAddress = HostPort(parsing: listen, allowsZeroPort: true) else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            var fixedTarget: HostPort?
            if let target {
                guard let parsed = HostPort(parsing: target) else {
                    throw ValidationError("--target must be HOST:PORT with a port 1-65535, got '\(target)'")
                }
                fixedTarget = parsed
            }
            let tokens = try serviceTokens.map { text -> ServiceToken in
                guard let token = ServiceToken(parsing: text) else {
                    throw ValidationError("--service-token must be ID:SECRET, got '\(text)'")
                }
                return token
            }
            if appTokens.contains(where: \.isEmpty) {
                throw ValidationError("--app-token must not be empty")
            }
            guard !team.isEmpty, team.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                throw ValidationError("--team must be letters, digits and '-', got '\(team)'")
            }
            var forced: HTTPResponseStatus?
            if let forceStatus {
                guard (200...599).contains(forceStatus) else {
                    throw ValidationError("--force-status must be an HTTP status 200-599, got \(forceStatus)")
                }
                forced = HTTPResponseStatus(statusCode: forceStatus)
            }
            guard idleTimeout >= 0, idleTimeout.isFinite else {
                throw ValidationError("--idle-timeout must be a number of seconds >= 0")
            }
            let idle: TimeAmount? = idleTimeout > 0 ? .nanoseconds(Int64(idleTimeout * 1e9)) : nil
            guard !aud.isEmpty, !aud.contains(where: { $0.isWhitespace || $0 == "&" || $0 == "#" }) else {
                throw ValidationError("--aud must be non-empty, without spaces, '&' or '#'")
            }
            guard appHostname.isEmpty || CertificateFactory.isValidHost(appHostname) else {
                throw ValidationError("--app-hostname '\(appHostname)' is not a host name")
            }
            guard rotateKidAfter >= 0 else { throw ValidationError("--rotate-kid-after must be >= 0") }
            guard tokenTTL > 0 else { throw ValidationError("--token-ttl must be > 0 seconds") }
            guard orgTokenTTL > 0 else { throw ValidationError("--org-token-ttl must be > 0 seconds") }
            guard loginEmail.contains("@") else { throw ValidationError("--login-email must be an email address") }
            guard (0...300).contains(transferHold) else { throw ValidationError("--transfer-hold must be between 0 and 300") }
            let destinations = try allowDestinations.map { text -> HostPort in
                guard let parsed = HostPort(parsing: text) else {
                    throw ValidationError("--allow-destination must be HOST:PORT with a port 1-65535, got '\(text)'")
                }
                return parsed
            }
            if fixedTarget != nil && !destinations.isEmpty {
                throw ValidationError("--allow-destination is for a bastion (no --target): give one or the other")
            }
            var siteList: [EdgeSite] = []
            for text in sites {
                let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2, CertificateFactory.isValidHost(parts[0]),
                      let address = HostPort(parsing: parts[1], allowsZeroPort: true) else {
                    throw ValidationError("--site must be HOST=ADDR:PORT, got '\(text)'")
                }
                guard let siteCerts else {
                    throw ValidationError("--site needs --site-certs DIR (made by `cf-access-edge certs --per-host`)")
                }
                let host = parts[0].lowercased()
                let files = CertificateFactory.perHostFiles(directory: URL(fileURLWithPath: siteCerts), host: host)
                for file in [files.certificate, files.key] where !FileManager.default.fileExists(atPath: file) {
                    throw ValidationError("--site \(host): \(file) does not exist (make it with `cf-access-edge certs --per-host`)")
                }
                siteList.append(EdgeSite(host: host, listen: address, certificatePath: files.certificate, keyPath: files.key))
            }
            guard (1...86_400).contains(sshCertTTL) else { throw ValidationError("--ssh-cert-ttl must be 1-86400 seconds") }
            if let sshCAKey, !FileManager.default.isReadableFile(atPath: sshCAKey) {
                throw ValidationError("--ssh-ca-key \(sshCAKey) cannot be read")
            }
            var settings = AuthSettings(team: team.lowercased(), audience: aud, appHostname: appHostname,
                                        metadataMode: metadataMode, transferMode: transferMode,
                                        loginMode: loginMode, rotateKidAfter: rotateKidAfter,
                                        appTokenTTL: tokenTTL, orgTokenTTL: orgTokenTTL, email: loginEmail)
            settings.transferHoldSeconds = transferHold
            settings.appSessionLayout = appSessionLayout
            settings.sshCAKeyPath = sshCAKey
            settings.sshCertificateTTL = sshCertTTL
            settings.certSignMode = certSignMode
            return CheckedOptions(listen: listenAddress, cert: cert, key: key, fixedTarget: fixedTarget,
                                  serviceTokens: tokens, appTokens: Set(appTokens), forcedStatus: forced,
                                  tunnel: TunnelSettings(idleTimeout: idle, log: EdgeLog(verbose: verbose), answerPings: !ignorePings),
                                  settings: settings, allowedDestinations: destinations, sites: siteList)
        }
    }

    /// `certs`: a test CA and server certificate, made with openssl.
    struct Certs: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a test CA and a server certificate for the given hosts (uses openssl)."
        )

        @Option(help: "Directory to write ca.pem, ca-key.pem, server.pem and server-key.pem into.")
        var out: String

        @Option(name: .customLong("host"), help: "Host name or IP for the server certificate (repeatable).")
        var hosts: [String] = []

        @Flag(name: .customLong("per-host"),
              help: "Also write <host>.pem and <host>-key.pem for each --host, valid for that host only (for serve --site).")
        var perHost = false

        func validate() throws {
            guard !out.isEmpty else { throw ValidationError("--out must not be empty") }
            guard !hosts.isEmpty else { throw ValidationError("at least one --host is required") }
            for host in hosts where !CertificateFactory.isValidHost(host) {
                throw ValidationError("--host '\(host)' is not a DNS name or IP address")
            }
        }

        func run() throws {
            let directory = URL(fileURLWithPath: out, isDirectory: true)
            var factory = CertificateFactory(directory: directory, hosts: hosts)
            factory.perHost = perHost
            try factory.generate()
            Console.announce("certs written to \(out)")
        }
    }

    /// `ssh-ca`: the SSH user CA key pair for `serve --ssh-ca-key` (sshd's `TrustedUserCAKeys`).
    struct SSHCA: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ssh-ca",
            abstract: "Write an SSH user CA key pair (ssh-ca, ssh-ca.pub; uses ssh-keygen) and print its public key.",
            discussion: "Give DIR/ssh-ca to `serve --ssh-ca-key`; put the printed line in sshd's TrustedUserCAKeys file."
        )

        @Option(help: "Directory to write ssh-ca and ssh-ca.pub into.")
        var out: String

        func run() throws {
            print(try SSHUserCA.make(in: URL(fileURLWithPath: out, isDirectory: true)))
        }
    }

    /// `target`: a plain TCP test server.
    struct Target: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a plain TCP test server: echo, sink, or source."
        )

        @Argument(help: "echo | sink | source")
        var kind: TargetKind

        @Option(help: "Address to listen on, HOST:PORT (port 0 picks a free one).")
        var listen = "127.0.0.1:0"

        @Option(help: "Bytes each source connection sends (default 1 GiB).")
        var bytes: Int = 1 << 30

        func validate() throws {
            guard HostPort(parsing: listen, allowsZeroPort: true) != nil else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            guard bytes >= 0 else { throw ValidationError("--bytes must be >= 0") }
        }

        func run() throws {
            guard let address = HostPort(parsing: listen, allowsZeroPort: true) else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            let server = TargetServer(kind: kind, listen: address, sourceBytes: bytes)
            let kind = self.kind
            try ServerLifecycle.run(
                address: address,
                start: { try server.start(group: $0) },
                announce: { "cf-access-edge target \(kind.rawValue) listening on \($0)" }
            )
        }
    }
}
