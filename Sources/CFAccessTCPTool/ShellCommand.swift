import AccessCore
import AccessTransport
import ArgumentParser
import CFAccessSSH
import CFAccessTCP
import FoundationEssentials
import Logging
import ToolDecisions
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell [user@]host [command…]`: the embedded SSH client (libssh; libssh2 for a
/// terminal while libssh < 0.11) over the tunnel, for machines without OpenSSH.
struct ShellCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "Open an SSH session through the tunnel with the built-in SSH client (no ssh needed).",
        discussion: """
        Without a command: an interactive shell on a pseudo-terminal. With a command (after the \
        destination, as with ssh, or after --): runs it, streams its stdout and stderr, forwards stdin, \
        and exits with its exit status. With -N: no command, only the -L forwards. ssh's letters mean \
        what they mean in ssh: -p -l -i -F -o -q -T -t -L -N.

        On an interactive session, after a newline: ~. disconnects, ~? lists the escapes, ~~ sends ~. \
        The local terminal's modes (interrupt, erase, …) go with the pseudo-terminal request: with a \
        libssh older than 0.11 such a session runs on libssh2, which can send them, unless RSA is \
        needed (a known RSA host key or an RSA-only server, an RSA key that logs in: libssh2 1.10 cannot), \
        then on libssh without them; --loglevel debug says which.

        ~/.ssh/config (or -F FILE) and /etc/ssh/ssh_config are read as ssh reads them: Host blocks \
        with HostName (the Access hostname), User, Port, IdentityFile, IdentitiesOnly, \
        ServerAliveInterval, ServerAliveCountMax, ConnectTimeout, StrictHostKeyChecking, \
        UserKnownHostsFile, GlobalKnownHostsFile, HashKnownHosts, HostKeyAlias, BatchMode, PubkeyAuthentication, \
        KbdInteractiveAuthentication, PasswordAuthentication, PreferredAuthentications, RemoteCommand, EscapeChar, \
        SendEnv, SetEnv, RequestTTY, LogLevel; -o Keyword=value wins over the files. Ciphers, KexAlgorithms, \
        HostKeyAlgorithms and MACs are refused (OpenSSH's default lists are offered). \
        Match blocks are skipped. LANG and LC_* are sent (SendEnv, as in Debian's ssh_config).

        Authentication, in OpenSSH's order with -i keys first: keys (-i and IdentityFile, a key's \
        -cert.pub certificate offered before it; the ssh-agent's keys from SSH_AUTH_SOCK; then \
        ~/.ssh/id_ed25519, id_ecdsa, id_rsa when no key is named), keyboard-interactive, password \
        (asked on the terminal, or PAM's Password: prompt; after it succeeds, it can be saved in the \
        system keyring through the Secret Service). With --short-lived-cert, or when the token \
        directory holds <host>-cf_key, the Access short-lived certificate (ssh-gen) is used first. \
        Host keys are checked against ~/.ssh/known_hosts under the Access hostname, as OpenSSH \
        checks them.

        Examples:
          cf-access-tcp shell me@ssh.example.com
          cf-access-tcp shell me@ssh.example.com uptime
          cf-access-tcp shell work                   (Host work / HostName ssh.example.com in ~/.ssh/config)
          cf-access-tcp shell me@ssh.example.com --tmux main     (reattached after a reconnect)
          cf-access-tcp shell me@ssh.example.com -N -L 8080:intranet:80
        """
    )

    @OptionGroup var flags: TunnelFlagsNamed<ShellFlagNames>

    @OptionGroup var account: SSHAccountOptions

    @OptionGroup var session: SSHSessionOptions

    @Flag(name: .customLong("accept-new"), help: "Add an unknown host key to known_hosts without asking (a changed key is still refused).")
    var acceptNew = false

    @Option(name: .customLong("known-hosts"), help: "The known_hosts file to check and add to (default: UserKnownHostsFile in ssh_config, else ~/.ssh/known_hosts and known_hosts2); the system's (GlobalKnownHostsFile, else /etc/ssh/ssh_known_hosts) is read too.")
    var knownHostsFile: String?

    @Option(name: .customLong("timeout"),
            help: "Seconds to connect (tunnel and SSH handshake) before \"Connection timed out.\" (default: ConnectTimeout in ssh_config, else 15).")
    var timeout: Int?

    @Option(name: .customLong("server-alive-interval"),
            help: "Seconds between SSH keepalives; three intervals without a byte from the server mean the connection is lost (default: ServerAliveInterval in ssh_config, else 10; 0 = off).")
    var serverAliveInterval: Int?

    @Flag(name: .customLong("short-lived-cert"),
          help: "Log in with the Access short-lived SSH certificate (as ssh-gen makes it; renewed when needed). Used without the flag when <token dir>/<host>-cf_key exists.")
    var shortLivedCert = false

    @Flag(name: .customLong("no-reconnect"), help: "Do not reconnect an interactive session after the connection is lost.")
    var noReconnect = false

    @Flag(name: .customLong("forget-password"), help: "Remove the saved password for user@host:port from the keyring, then exit.")
    var forgetPassword = false

    @Argument(help: "[user@]host (or ssh://[user@]host[:port]): the Access-protected hostname, or a Host of ~/.ssh/config whose HostName is.")
    var destination: String

    @Argument(parsing: .postTerminator, help: "The command to run (after the destination, or after --).")
    var command: [String] = []

    /// The default keepalive interval in seconds (`--server-alive-interval`, `ServerAliveInterval`).
    /// 10 s, so a dead link is noticed in about 30 s (three intervals): a person watches a
    /// frozen terminal, and a keepalive costs a few dozen bytes (README, "Keepalives").
    static let defaultServerAliveInterval = Int(SSHKeepalive().interval.components.seconds)
    /// The default connect timeout in seconds (`--timeout`, `ConnectTimeout`).
    static let defaultTimeout = 15

    /// Set while CommandLineCompatibility probes which options take a value (by parsing): the
    /// checks then fail silently, so the one line is written once, by the real parse.
    nonisolated(unsafe) static var probing = false

    /// The flags' own checks, before anything is read: a contradiction or a value out of range is
    /// one line and the usage status.
    func validate() throws {
        do {
            try session.check(command: command)
            if let timeout, !(1...600).contains(timeout) { throw ConfigurationError("--timeout must be between 1 and 600 seconds") }
            if let serverAliveInterval, !(0...3600).contains(serverAliveInterval) {
                throw ConfigurationError("--server-alive-interval must be between 0 (off) and 3600 seconds")
            }
        } catch {
            if Self.probing { throw ExitCode.validationFailure }
            throw usageFailure(error.message)
        }
    }

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        do {
            try session.refuseUnsupported()
        } catch {
            throw usageFailure(error.message)
        }
        if session.background && ProcessInfo.processInfo.environment[Background.readyVariable] == nil {
            // -f: the session runs in a second process of this tool, which says when it is up.
            throw ExitCode(Background.detach(arguments: Array(CommandLine.arguments.dropFirst())))
        }
        if account.nullInput {
            // -n: stdin is /dev/null, as in ssh.
            let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
            if null >= 0 {
                _ = dup2(null, 0)
                if null != 0 { close(null) }
            }
        }
        let environment = ProcessInfo.processInfo.environment
        let target: ShellTarget
        let host: SSHHostConfig
        let settings: TunnelSettings
        let logging: LoggingSetup
        let timeout: Int
        let serverAliveInterval: Int
        let forwards: [SSHLocalForward]
        let remoteForwards: [SSHRemoteForward]
        let jumpTarget: ShellTarget?
        do {
            let given = try ShellTarget(destination: destination, login: account.loginName, port: account.port, environment: environment)
            // ssh_config, as ssh reads it: the command line first, then the files.
            let userGiven = account.loginName != nil || destination.contains("@")
            // Host patterns match the host as typed, case and all (as in ssh).
            let typed = destination.lastIndex(of: "@").map { String(destination[destination.index(after: $0)...]) } ?? destination
            do {
                host = try SSHConfigResolver.standard(configFile: account.configFile, options: account.options, environment: environment)
                    .resolve(host: typed.lowercased() == given.host ? typed : given.host, user: userGiven ? given.user : nil,
                             port: given.givenPort)
            } catch {
                throw ConfigurationError("ssh_config: \(error.description)")
            }
            target = try ShellTarget(user: host.user ?? given.user, host: host.hostName, port: host.port ?? 22,
                                     configured: host.hostName != given.host)
            timeout = try self.timeout ?? host.connectTimeout.map { duration throws(ConfigurationError) in
                let seconds = Int(duration.components.seconds)
                guard (1...600).contains(seconds) else {
                    throw ConfigurationError("ConnectTimeout \(seconds) in ssh_config: the timeout must be between 1 and 600 seconds")
                }
                return seconds
            } ?? Self.defaultTimeout
            serverAliveInterval = self.serverAliveInterval ?? host.serverAliveInterval.map { Int($0.components.seconds) }
                ?? Self.defaultServerAliveInterval
            guard (0...3600).contains(serverAliveInterval) else {
                throw ConfigurationError("ServerAliveInterval \(serverAliveInterval) in ssh_config: the interval must be between 0 (off) and 3600 seconds")
            }
            // ClearAllForwardings (what scp and sftp pass): no forward at all.
            // (ssh_config's forwards were read, and checked, with the file.)
            forwards = host.clearAllForwardings == true ? [] : try session.forwards() + host.localForwards + host.dynamicForwards
            remoteForwards = host.clearAllForwardings == true ? [] : try session.parsedRemoteForwards() + host.remoteForwards
            for key in account.identity where !FileManager.default.isReadableFile(atPath: key) {
                throw ConfigurationError("-i \(key): no such readable key file")
            }
            // -J: the tunnel reaches the jump host; the destination is reached from there.
            let jumpText = account.jump ?? host.proxyJump.flatMap { $0.isEmpty ? nil : $0 }
            jumpTarget = try jumpText.map { value throws(ConfigurationError) in
                let parsed = try ShellPlan.jump(value)
                return try ShellTarget(user: parsed.user ?? target.user, host: parsed.host.lowercased(), port: parsed.port ?? 22,
                                       configured: false)
            }
            let tunnelHost = jumpTarget?.host ?? target.host
            if let hostname = flags.hostname, hostname.lowercased() != tunnelHost {
                throw ConfigurationError("--hostname \(hostname) differs from the destination's host \(tunnelHost): give the host once, as [user@]host")
            }
            var tunnelFlags = flags
            tunnelFlags.hostname = tunnelHost
            tunnelFlags.connectTimeout = timeout
            // -v: debug lines, unless --loglevel asked for another level.
            let level = account.verbose > 0 && flags.loglevel == "info" ? "debug" : flags.loglevel
            logging = try LoggingSetup(level: level, file: flags.logfile, directory: flags.logDirectory)
            settings = try TunnelSettings(flags: tunnelFlags, environment: environment, logger: logging.logger)
            if settings.listen != nil {
                throw ConfigurationError("--url cannot be used with shell: the session needs no local port")
            }
        } catch {
            throw usageFailure(error.message)
        }
        if account.printConfiguration {
            // ssh -G: the resolved settings, one `keyword value` line each, and no connection.
            print(ShellPlan.resolvedSettings(user: target.user, hostName: target.host, port: target.port,
                                             identityFiles: account.identity + host.identityFiles,
                                             userKnownHostsFiles: knownHostsFile.map { [$0] } ?? host.userKnownHostsFiles
                                                 ?? KnownHosts.defaultUserPaths(environment: environment),
                                             globalKnownHostsFiles: host.globalKnownHostsFiles ?? KnownHosts.systemPaths,
                                             batchMode: host.batchMode == true, proxyJump: jumpTarget.map { "\($0.user)@\($0.host):\($0.port)" }),
                  terminator: "")
            throw ExitCode(0)
        }
        if forgetPassword {
            throw ExitCode(await forget(target.account))
        }
        for block in host.skippedMatchBlocks {
            logging.logger.debug("ssh_config: Match blocks are not supported; skipped the one at \(block)")
        }
        // -W: stdout is the connection's, and ssh says nothing on stderr either.
        let isQuiet = account.quiet || host.isQuiet || session.stdioForward != nil
        // -q: nothing on the terminal but failures, so no log records either.
        if account.quiet { logging.terminal?.mute(true) }

        // Keys: the Access short-lived certificate first, then -i, then IdentityFile; OpenSSH's
        // default files only when no key is named (as ssh adds them).
        let certificate = try await shortLivedCertificate(settings: settings, environment: environment, logger: logging.logger)
        let (keys, named) = ShellPlan.keyFiles(certificate: certificate, identity: account.identity, identityFiles: host.identityFiles,
                                               isReadable: { FileManager.default.isReadableFile(atPath: $0) })

        // The flags and ssh_config become the library's policy settings; the tool supplies only the prompts.
        // BatchMode: nothing is asked (no passphrase, password or host-key question), as in ssh.
        let prompts = TerminalPrompts(quiet: isQuiet, batch: host.batchMode == true)
        // Every known_hosts file, as ssh reads them: the user's (the first is written to), then
        // the system's.
        let userFiles = knownHostsFile.map { [$0] } ?? host.userKnownHostsFiles ?? KnownHosts.defaultUserPaths(environment: environment)
        let knownHostsPath = userFiles.first ?? "/dev/null"
        let otherFiles = userFiles.dropFirst() + (host.globalKnownHostsFiles ?? KnownHosts.systemPaths)
        let checking: SSHHostKeyChecking = acceptNew ? .acceptNew : host.strictHostKeyChecking.map(SSHHostKeyChecking.init) ?? .ask
        // HostKeyAlias names the host in known_hosts; HashKnownHosts (Debian's default) hides
        // the names of the entries added.
        var hostKeyConfiguration = KnownHostsVerifier.Configuration(
            knownHosts: KnownHosts(path: knownHostsPath), otherKnownHosts: otherFiles.map(KnownHosts.init(path:)),
            host: host.hostKeyAlias ?? target.host, port: target.port, checking: checking)
        hostKeyConfiguration.hashesNewEntries = host.hashKnownHosts == true
        let verifier = KnownHostsVerifier(
            configuration: hostKeyConfiguration, prompt: prompts)
        let allowedMethods: SSHAuthenticationMethods
        let remote: String?
        do {
            allowedMethods = try ShellPlan.allowedMethods(publicKey: host.pubkeyAuthentication,
                                                          keyboardInteractive: host.keyboardInteractiveAuthentication,
                                                          password: host.passwordAuthentication, preferred: host.preferredAuthentications)
            remote = try ShellPlan.remoteCommand(commandLine: command, configured: host.remoteCommand)
        } catch {
            throw usageFailure(error.message)
        }
        var authenticationConfiguration = SSHOrderedAuthentication.Configuration(account: target.account,
                                 agentSocketPath: SSHOrderedAuthentication.Configuration.agentSocketPath(environment: environment),
                                 identityFiles: keys,
                                 defaultIdentityFiles: named ? [] : SSHOrderedAuthentication.Configuration.defaultIdentityFiles(environment: environment),
                                 identitiesOnly: account.identitiesOnly || host.identitiesOnly == true,
                                 // The keyring's D-Bus calls wait at most as long as the server may.
                                 passwordStore: SecretServiceStore(timeout: .seconds(timeout)))
        authenticationConfiguration.allowedMethods = allowedMethods
        let authentication = SSHOrderedAuthentication(configuration: authenticationConfiguration, prompts: prompts, logger: logging.logger)
        let keepalive = SSHKeepalive(interval: .seconds(serverAliveInterval), unansweredLimit: host.serverAliveCountMax ?? 3)
        var configuration = SSHSession.Configuration(hostKeyDelegate: verifier, timeout: .seconds(timeout), keepalive: keepalive)
        configuration.compression = account.compression || host.compression == true
        // -A (or ForwardAgent): the agent's socket, when there is one (ssh forwards none without).
        if let agent = ShellPlan.forwardedAgent(flag: session.forwardAgent, off: session.noForwardAgent, configured: host.forwardAgent,
                                                socket: host.forwardAgentSocket, environment: environment) {
            switch agent {
            case .socket(let path): configuration.agentForwarding = path
            case .unavailable(let why): if !isQuiet { writeStderr("cf-access-tcp: \(why); the agent is not forwarded") }
            }
        }

        // ssh's choice of a terminal: -T / -t / -tt (or RequestTTY), a shell by default, none when
        // stdin is not a terminal unless forced.
        let stdinIsTerminal = isatty(0) == 1
        let request = ShellPlan.terminalRequest(noTerminal: session.noTerminal, terminalRequests: session.terminalRequests,
                                                configured: host.requestTTY)
        // -N runs nothing: no terminal, and so no note about one.
        let (wantsTerminal, notice) = ShellPlan.wantsTerminal(request, hasCommand: remote != nil || session.noCommand || session.subsystem,
                                                              stdinIsTerminal: stdinIsTerminal)
        if let notice, !isQuiet { writeStderr(notice) }
        let mode: ShellRunner.Mode
        do {
            mode = try ShellPlan.mode(noCommand: session.noCommand, terminal: wantsTerminal && session.stdioForward == nil,
                                      command: remote, tmux: session.tmux,
                                      stdioForward: try session.stdioForward.map { value throws(ConfigurationError) in
                                          try ShellPlan.stdioForward(value)
                                      }, subsystem: session.subsystem)
        } catch {
            throw usageFailure(error.message)
        }
        let reconnects = ShellPlan.reconnects(noReconnect: noReconnect, hasCommand: remote != nil, noCommand: session.noCommand,
                                              stdinIsTerminal: stdinIsTerminal)
        let runner = ShellRunner(
            target: target, settings: settings, logger: logging.logger, terminalLog: logging.terminal,
            // Progress lines (Connecting…, Connected, Connection … closed.) only for an interactive
            // session on a terminal: ssh says nothing otherwise, and scripts, scp and sftp read stderr.
            environment: environment, sentEnvironment: host.environment(sending: environment),
            quiet: isQuiet || !ShellPlan.showsProgress(mode, stdinIsTerminal: stdinIsTerminal),
            prompts: prompts, authentication: authentication, session: configuration, mode: mode, tmux: session.tmux,
            reconnect: reconnects ? SSHReconnectPolicy() : .never,
            forwards: forwards, remoteForwards: remoteForwards, exitOnForwardFailure: host.exitOnForwardFailure == true,
            reportsForwards: !isQuiet, escapeCharacter: escapeCharacter(host),
            jump: jumpTarget.map { jump in
                // The jump host's key is checked like any host's, in the same files and mode.
                var check = hostKeyConfiguration
                check.host = jump.host
                check.port = jump.port
                var login = authenticationConfiguration
                login.account = jump.account
                var jumpSession = configuration
                // The agent goes to the destination only, as in ssh.
                jumpSession.agentForwarding = nil
                jumpSession.hostKeyDelegate = KnownHostsVerifier(configuration: check, prompt: prompts)
                return ShellRunner.Jump(target: jump, session: jumpSession,
                                        authentication: SSHOrderedAuthentication(configuration: login, prompts: prompts, logger: logging.logger))
            })
        let status = await runner.run()
        throw ExitCode(status)
    }

    /// The key file of the Access short-lived certificate, when `--short-lived-cert` asks for it
    /// or the token directory holds the host's `-cf_key`: renewed (logging in when needed) if it
    /// is missing or about to expire. Without the flag a failure is only noted: the other keys
    /// are tried. With it, a failure ends the run.
    private func shortLivedCertificate(settings: TunnelSettings, environment: [String: String],
                                       logger: Logger) async throws -> String? {
        // The tunnel's login when it logs in; else one with the same flags (a service token
        // cannot get a certificate: Access signs for a person's app token).
        let configuration: AccessLoginConfiguration
        do {
            var overrides: [ConnectOverride] = []
            if let connectTo = settings.options.connectTo {
                overrides.append(ConnectOverride(origin: settings.origin, target: connectTo))
            }
            configuration = try flags.login.configuration(caFile: flags.caFile, connectTo: overrides, environment: environment)
        } catch {
            if shortLivedCert { throw usageFailure(error.message) }
            return nil
        }
        let keyPath = configuration.tokenDirectory + "/" + ShortLivedCertificateRules.keyFileName(for: settings.origin)
        guard shortLivedCert || FileManager.default.fileExists(atPath: keyPath) else { return nil }
        guard let provider = settings.provider ?? (shortLivedCert ? AccessTokenProvider(
            configuration: configuration, logger: logger, browser: SystemBrowserOpener(environment: environment)) : nil) else {
            // Found, not asked for, and the tunnel does not log in (a service token): a good
            // certificate on disk is used, but no login starts to renew one.
            let text = FileManager.default.contents(atPath: keyPath + "-cert.pub").map { String(decoding: $0, as: UTF8.self) }
            if let text, let certificate = try? OpenSSHCertificate.parse(text),
               certificate.expiresAt.map({ $0.timeIntervalSinceNow > 60 }) ?? true {
                return keyPath
            }
            logger.debug("not using the short-lived SSH certificate: missing or expiring, and the tunnel does not log in",
                         metadata: ["key": "\(keyPath)"])
            return nil
        }
        do {
            let certificate = try await runAuthWork { () async throws(TunnelFailure) -> ShortLivedCertificate in
                try await provider.shortLivedCertificate(for: settings.origin)
            }
            logger.debug("using the Access short-lived SSH certificate", metadata: [
                "certificate": "\(certificate.certificatePath)", "principals": "\(certificate.principals.joined(separator: ","))",
            ])
            return certificate.privateKeyPath
        } catch {
            guard shortLivedCert else {
                logger.info("not using the short-lived SSH certificate", metadata: ["reason": "\(error.message)"])
                return nil
            }
            writeStderr("cf-access-tcp: \(error.withFlags)")
            throw ExitStatus(error).code
        }
    }

    /// The escape character: `-e`, else `EscapeChar`, else `~`; nil for `none`.
    private func escapeCharacter(_ host: SSHHostConfig) -> UInt8? {
        guard let value = session.escapeChar ?? host.escapeChar else { return UInt8(ascii: "~") }
        return SSHConfigResolver.escapeCharacter(value)
    }

    private func forget(_ account: SSHAccount) async -> Int32 {
        do {
            if try await SecretServiceStore().remove(for: account) {
                writeStderr("cf-access-tcp: removed the saved password for \(account)")
            } else {
                writeStderr("cf-access-tcp: no saved password for \(account)")
            }
            return ExitStatus.success.rawValue
        } catch {
            writeStderr("cf-access-tcp: cannot reach the keyring: \(error.reason)")
            return ExitStatus.unavailable.rawValue
        }
    }
}

/// Who and where: `[user@]host` or `ssh://[user@]host[:port]` (as OpenSSH reads them), with
/// `-l` and `-p` (which win over the URL's).
///
/// A port after a bare host (`me@host:22`) is refused: OpenSSH would take `host:22` as a host
/// name and fail to resolve it, and as an Access hostname it would name an edge port; either
/// way the known_hosts entry and the saved password would be keyed to a name that is no host.
/// The host must be a host name (letters, digits, `-`, `_`, `.`; IDN names become `xn--`).
struct ShellTarget: Sendable {
    let user: String
    let host: String
    let port: Int
    /// The port the command line gave (`-p`, else the `ssh://` URL's), which wins over ssh_config's
    /// `Port` as in ssh; nil when neither did.
    let givenPort: Int?

    init(destination: String, login: String?, port: Int?, environment: [String: String]) throws(ConfigurationError) {
        var rest = destination
        var urlPort: Int?
        let isURL = rest.lowercased().hasPrefix("ssh://")
        if isURL {
            rest.removeFirst(6)
            if rest.hasSuffix("/") { rest.removeLast() }
        }
        var host = rest
        var user: String?
        if let at = rest.lastIndex(of: "@") {
            user = String(rest[..<at])
            host = String(rest[rest.index(after: at)...])
        }
        if isURL, let colon = host.lastIndex(of: ":") {
            guard let number = Int(host[host.index(after: colon)...]), (1...65535).contains(number) else {
                throw ConfigurationError("the destination \(destination) has no valid port after ':' (1 to 65535)")
            }
            urlPort = number
            host = String(host[..<colon])
        }
        if let login { user = login }
        if !isURL, let colon = host.firstIndex(of: ":") {
            let name = host[..<colon], given = host[host.index(after: colon)...]
            let who = user.map { "\($0)@" } ?? ""
            throw ConfigurationError("the destination \(host) is not a host name: give the port with -p \(given), "
                                     + "or write ssh://\(who)\(name):\(given)")
        }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "/" }) else {
            throw ConfigurationError("the destination must be [user@]host, e.g. me@ssh.example.com")
        }
        guard host.allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) }),
              let origin = try? OriginURL.parse(host), origin.port == nil, origin.path == "/" else {
            throw ConfigurationError("the destination's host \(host) is not a host name: give [user@]host, e.g. me@ssh.example.com")
        }
        host = origin.host
        let portFlag = port
        let port = port ?? urlPort ?? 22
        guard (1...65535).contains(port) else {
            throw ConfigurationError("-p must be a port between 1 and 65535")
        }
        let fallback = environment["USER"].flatMap { $0.isEmpty ? nil : $0 }
            ?? getpwuid(getuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } }
        guard let name = user ?? fallback, !name.isEmpty, !name.contains(where: { $0.isWhitespace || $0.isNewline }) else {
            throw ConfigurationError("no user to log in as: give user@host or -l USER")
        }
        self.user = name
        self.host = host.lowercased()
        self.port = port
        self.givenPort = portFlag ?? urlPort
    }

    /// The target ssh_config resolved to: `host` is its `HostName` (when `configured`, the
    /// message names ssh_config), `port` its `Port`.
    init(user: String, host: String, port: Int, configured: Bool) throws(ConfigurationError) {
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "/" }) else {
            throw ConfigurationError(configured ? "HostName \(host) in ssh_config is not a host name"
                                                : "the destination must be [user@]host, e.g. me@ssh.example.com")
        }
        guard (1...65535).contains(port) else {
            throw ConfigurationError("-p must be a port between 1 and 65535")
        }
        guard !user.isEmpty, !user.contains(where: { $0.isWhitespace || $0.isNewline }) else {
            throw ConfigurationError("no user to log in as: give user@host or -l USER")
        }
        self.user = user
        self.host = host.lowercased()
        self.port = port
        self.givenPort = port
    }

    /// `user@host:port`: the keyring's key and the prompts' account.
    var account: SSHAccount { SSHAccount(user: user, host: host, port: port) }
}

/// ssh's letters that pick the account, the keys and the ssh_config: `-p -l -i -F -o -q`,
/// `--identities-only`.
struct SSHAccountOptions: ParsableArguments {
    @Flag(name: .customShort("v"), help: "Verbose, like ssh -v: debug lines on stderr (-vv the same; --loglevel and --logfile still win).")
    var verbose: Int

    @Flag(name: .customShort("G"),
          help: "Print the settings the session would use (ssh_config resolved: user, hostname, port, key and known_hosts files) and exit without connecting, like ssh -G (git asks its ssh program this way before it passes a port).")
    var printConfiguration = false

    @Option(name: .customShort("J", allowingJoined: true),
            help: ArgumentHelp("Go through a jump host, like ssh -J: the tunnel reaches it (an Access-protected host), and its SSH server opens the way to the destination (ProxyJump in ssh_config).",
                               valueName: "[user@]host[:port]"))
    var jump: String?

    @Flag(name: .customShort("n"), help: "Read stdin from /dev/null, like ssh -n (for a command run in the background).")
    var nullInput = false

    @Flag(name: .customShort("C"), help: "Ask for compression, like ssh -C (Compression in ssh_config).")
    var compression = false

    @Option(name: .customShort("p", allowingJoined: true),
            help: "The SSH port the known_hosts entry and the saved password are keyed to (default: Port in ssh_config, else 22).")
    var port: Int?

    @Option(name: .customShort("l", allowingJoined: true), help: "The user to log in as (default: user@ of the destination, else User in ssh_config, else $USER).")
    var loginName: String?

    @Option(name: .customShort("i", allowingJoined: true), help: "A private key file to try first (repeatable); its -cert.pub certificate is offered too.")
    var identity: [String] = []

    @Flag(name: .customLong("identities-only"),
          help: "Use only the -i keys (and the default key files), not the agent's other keys (OpenSSH's IdentitiesOnly).")
    var identitiesOnly = false

    @Option(name: .customShort("F", allowingJoined: true),
            help: "The ssh_config file to read instead of ~/.ssh/config and /etc/ssh/ssh_config (none: no file).")
    var configFile: String?

    @Option(name: .customShort("o", allowingJoined: true),
            help: "An ssh_config option, Keyword=value, e.g. -o User=me (repeatable; wins over the files).")
    var options: [String] = []

    @Flag(name: .customShort("q"), help: "Quiet: no \"Connecting…\", \"Connected\", \"Connection … closed.\" or other informational lines.")
    var quiet = false
}

/// ssh's letters that pick what runs and how: `-T -t -N -L`, and `--tmux`.
struct SSHSessionOptions: ParsableArguments {
    @Flag(name: .customShort("T"), help: "No pseudo-terminal, like ssh -T (without a command: the login shell reads stdin).")
    var noTerminal = false

    @Flag(name: .customShort("t"),
          help: "A pseudo-terminal even for a command, like ssh -t (full-screen programs); -tt even when stdin is not a terminal.")
    var terminalRequests: Int

    @Option(name: .customShort("L", allowingJoined: true),
            help: ArgumentHelp("Forward a local port over the SSH session, like ssh -L: connections to port (on the loopback addresses unless bind_address is given; * for all) reach host:hostport as the server sees it (repeatable).",
                               valueName: "[bind_address:]port:host:hostport"))
    var localForwards: [String] = []

    @Option(name: .customShort("D", allowingJoined: true),
            help: ArgumentHelp("Dynamic forwarding, like ssh -D: a SOCKS4/SOCKS5 proxy on port (loopback unless bind_address is given); each connection goes where its client asks, as the server sees it (repeatable).",
                               valueName: "[bind_address:]port"))
    var dynamicForwards: [String] = []

    @Flag(name: .customShort("N"), help: "Run no command, only forward ports (-L -D -R), like ssh -N.")
    var noCommand = false

    @Option(name: .customLong("tmux"), help: "Run `tmux new-session -A -s NAME` remotely, so a reconnect puts you back in the same session.")
    var tmux: String?

    @Flag(name: .customShort("f"), help: "Go to the background once the session is up (after any question on the terminal), like ssh -f; with a command or -N.")
    var background = false

    @Flag(name: .customShort("A"),
          help: "Agent forwarding, like ssh -A: the server may use the keys of your ssh-agent (SSH_AUTH_SOCK) while the session lasts; only for hosts you trust as much as this machine.")
    var forwardAgent = false

    @Flag(name: .customShort("a"), help: "No agent forwarding, like ssh -a (overrides ForwardAgent in ssh_config).")
    var noForwardAgent = false

    @Option(name: .customShort("R", allowingJoined: true),
            help: ArgumentHelp("Forward a remote port back here, like ssh -R: connections to port on the server (its loopback unless bind_address is given) reach host:hostport as this machine sees it; port 0 lets the server pick (repeatable).",
                               valueName: "[bind_address:]port:host:hostport"))
    var remoteForwards: [String] = []

    @Flag(name: [.customShort("X"), .customShort("Y")], help: "X11 forwarding, ssh's -X and -Y: not supported (refused, not ignored).")
    var forwardX11 = false

    @Flag(name: .customShort("s"), help: "The command names a subsystem (e.g. sftp), like ssh -s.")
    var subsystem = false

    @Flag(name: .customShort("x"), help: "No X11 forwarding, like ssh -x (this client never forwards X11).")
    var noX11 = false

    @Option(name: .customShort("W", allowingJoined: true),
            help: ArgumentHelp("Carry stdin and stdout to host:port as the SSH server sees it, like ssh -W (a ProxyCommand for another ssh).",
                               valueName: "host:port"))
    var stdioForward: String?

    @Option(name: .customShort("e", allowingJoined: true),
            help: "The escape character of an interactive session, like ssh -e: a character, ^ and a letter, or none (default ~; EscapeChar in ssh_config).")
    var escapeChar: String?

    /// The checks of these flags alone (before ssh_config is read): one line each.
    func check(command: [String]) throws(ConfigurationError) {
        // (The value itself is read in run(): CommandLineCompatibility tells the options that take
        // a value by parsing `-W 1`, which must get past these checks.)
        if stdioForward != nil {
            guard command.isEmpty, tmux == nil, terminalRequests == 0, !noCommand, localForwards.isEmpty, dynamicForwards.isEmpty,
                  remoteForwards.isEmpty else {
                throw ConfigurationError("-W carries stdin and stdout only: give it without a command, -N, -L, -D, -R, -t or --tmux")
            }
        }
        if background && command.isEmpty && !noCommand {
            throw ConfigurationError("Cannot fork into background without a command to execute (give one, or -N).")
        }
        if let escapeChar, SSHConfigResolver.escapeCharacter(escapeChar) == nil, escapeChar.lowercased() != "none" {
            throw ConfigurationError("-e \(escapeChar): give one character, ^ and a letter, or none")
        }
        guard noTerminal == false || terminalRequests == 0 else {
            throw ConfigurationError("-T (no terminal) and -t (a terminal) contradict each other: give one")
        }
        guard tmux == nil || command.isEmpty else {
            throw ConfigurationError("--tmux starts a session of its own: give either --tmux or a command")
        }
        if let tmux, tmux.isEmpty || tmux.contains(where: { !($0.isLetter || $0.isNumber || "-_.".contains($0)) }) {
            throw ConfigurationError("--tmux NAME may only use letters, digits, '-', '_' and '.'")
        }
        if tmux != nil && noTerminal {
            throw ConfigurationError("--tmux needs a terminal: leave out -T")
        }
        if noCommand {
            guard command.isEmpty, tmux == nil, terminalRequests == 0 else {
                throw ConfigurationError("-N runs no command: give -N without a command, --tmux or -t")
            }
        }
    }

    /// ssh's letters this client does not do: refused in one line, never ignored. (Not in
    /// `check`: `-R` takes a value, which CommandLineCompatibility finds by parsing `-R 1`.)
    func refuseUnsupported() throws(ConfigurationError) {
        if forwardX11 {
            throw ConfigurationError("-X and -Y (X11 forwarding) are not supported; use ssh with ProxyCommand for it")
        }
    }

    /// The `-R` forwards, parsed.
    func parsedRemoteForwards() throws(ConfigurationError) -> [SSHRemoteForward] {
        try remoteForwards.map { spec throws(ConfigurationError) in
            do {
                return try SSHRemoteForward(parsing: spec)
            } catch {
                if error.message.hasPrefix("Remote dynamic") { throw ConfigurationError(error.message) }
                throw ConfigurationError("-R \(spec): expected [bind_address:]port:host:hostport, e.g. -R 8080:localhost:80")
            }
        }
    }

    /// The `-L` and `-D` forwards, parsed.
    func forwards() throws(ConfigurationError) -> [SSHLocalForward] {
        let local = try localForwards.map { spec throws(ConfigurationError) in
            do {
                return try SSHLocalForward(parsing: spec)
            } catch {
                throw ConfigurationError("-L \(spec): expected [bind_address:]port:host:hostport, e.g. -L 8080:localhost:80")
            }
        }
        return try local + dynamicForwards.map { spec throws(ConfigurationError) in
            do {
                return try SSHLocalForward(parsingDynamic: spec)
            } catch {
                throw ConfigurationError("-D \(spec): expected [bind_address:]port, e.g. -D 1080")
            }
        }
    }
}
