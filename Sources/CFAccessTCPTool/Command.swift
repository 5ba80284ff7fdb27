import AccessCore
import AccessTransport
import ArgumentParser
import CFAccessTCP
import Dispatch
import FoundationEssentials
import Glibc
import Logging

/// `cf-access-tcp`: reach a TCP service (SSH above all) protected by Cloudflare Access.
@main
struct RootCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cf-access-tcp",
        abstract: "Reach TCP services (SSH above all) protected by Cloudflare Access.",
        discussion: """
        A drop-in for `cloudflared access tcp|ssh`: every local connection gets its own WebSocket \
        to the Access-protected hostname.

        Examples:
          ssh_config:   ProxyCommand cf-access-tcp --hostname %h
          listener:     cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:2222
                        ssh -p 2222 user@127.0.0.1
          service token: TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \\
                        cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:0
          cloudflared spelling: cf-access-tcp access ssh --hostname ssh.example.com
          config file:  cf-access-tcp --config FILE (else ~/.cloudflared/config.yml, as cloudflared):
                        its hostname, url, service-token-id, … keys, and forwarders: (one listener each)
        """,
        version: VersionReport.short,
        subcommands: [TCPCommand.self, AccessCommand.self, ForwardCommand.self, LoginCommand.self, TokenCommand.self,
                      LogoutCommand.self, SSHConfigCommand.self, SSHGenCommand.self, ShellCommand.self],
        defaultSubcommand: TCPCommand.self
    )

    /// `--version` (also `-v`, `-V` and `version`, cloudflared's spellings) prints the long report —
    /// commit and C library versions — before the argument parser sees anything, as do
    /// `version --short` and `update` their one line (`VersionReport.earlyAnswer`); the rest is
    /// parsed with cloudflared's spellings too (`access --fedramp tcp …`, see
    /// `CommandLineCompatibility`), and with cloudflared's `config.yml` (`ConfigFile`).
    static func main() async {
        ToolProcess.sanitiseStandardDescriptors()
        ToolProcess.refuseTooFewDescriptors()
        ToolProcess.reserveMainQueueDescriptor()
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let answer = VersionReport.earlyAnswer(to: arguments) {
            print(answer)
            return
        }
        let outcome: ConfigFile.Outcome
        do {
            outcome = try ConfigFile.apply(to: CommandLineCompatibility.rewrite(arguments),
                                           environment: ProcessInfo.processInfo.environment)
        } catch {
            Glibc.exit(usageFailure(error.withFlags).rawValue)
        }
        switch outcome {
        case .arguments(let rewritten):
            await main(rewritten)
        case .forwarders(let lists):
            do {
                try await TCPCommand.runForwarders(lists)
            } catch {
                TCPCommand.exit(withError: error)
            }
        }
    }
}

/// `cf-access-tcp access tcp|ssh|rdp|smb …`, the spelling of `cloudflared access …`.
struct AccessCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "cloudflared-compatible spelling: `access tcp|ssh|rdp|smb`.",
        discussion: "cloudflared's `access --fedramp <subcommand> …` works too: --fedramp goes to the subcommand.",
        subcommands: [TCPCommand.self, LoginCommand.self, TokenCommand.self, LogoutCommand.self,
                      SSHConfigCommand.self, SSHGenCommand.self, CurlCommand.self]
    )
}

/// `cf-access-tcp forward tcp|ssh …`: the older spelling of `cloudflared forward`, the same tunnel.
struct ForwardCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forward",
        abstract: "cloudflared's older spelling: `forward tcp|ssh` is `access tcp|ssh`.",
        subcommands: [TCPCommand.self]
    )
}

/// The tunnel itself.
struct TCPCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tcp",
        abstract: "Bridge stdin/stdout (ProxyCommand) or a local listener to the Access-protected host.",
        discussion: """
        Without --url, stdin/stdout is the connection (ssh ProxyCommand); with --url, a listener on \
        127.0.0.1 bridges every accepted connection. Environment: TUNNEL_SERVICE_HOSTNAME, \
        TUNNEL_SERVICE_URL, TUNNEL_SERVICE_TOKEN_ID, TUNNEL_SERVICE_TOKEN_SECRET, \
        TUNNEL_SERVICE_DESTINATION, CF_ACCESS_TOKEN.

        Examples:
          cf-access-tcp --hostname ssh.example.com                       (ProxyCommand)
          cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:2222  (listener)
          cf-access-tcp --hostname ssh.example.com --id ID --secret SECRET --url localhost:0
        """,
        aliases: ["ssh", "rdp", "smb"]
    )

    @OptionGroup var flags: TunnelFlags

    @Argument(help: ArgumentHelp("The listen address, as --url (cloudflared's `access tcp --hostname H 127.0.0.1:2222`).",
                                 valueName: "listener"))
    var listener: String?

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var flags = self.flags
        if let listener {
            guard flags.url == nil || flags.url == listener else {
                throw usageFailure("two listen addresses were given (--url \(flags.url ?? "") and \(listener)): give one")
            }
            flags.url = listener
        }
        let environment = ProcessInfo.processInfo.environment
        let logging: LoggingSetup
        let settings: TunnelSettings
        do {
            // Every flag is checked before the log file is touched: a usage error creates or
            // changes no file (issue 12.4).
            _ = try TunnelSettings(flags: flags, environment: environment,
                                   logger: Logger(label: "cf-access-tcp", factory: { _ in SwiftLogNoOpLogHandler() }))
            try LoggingSetup.checkLevel(flags.loglevel)
            logging = try LoggingSetup(level: flags.loglevel, file: flags.logfile, directory: flags.logDirectory)
            settings = try TunnelSettings(flags: flags, environment: environment, logger: logging.logger)
        } catch {
            throw usageFailure(error.withFlags)
        }
        let logger = logging.logger
        if settings.listeningSocket != nil { SocketActivation.forgetVariables() }
        let report = FailureReport(logger: logger, toLogFile: flags.writesLogFile)
        let transport = LiveTunnelTransport(logger: logger) { message in report.line(message) }
        let tunnel = AccessTunnel(options: settings.options, logger: logger, transport: transport)
        // Ctrl-C or SIGTERM: a login in progress leaves no lock behind; a running listener
        // closes its connections first; anything else ends at once.
        let stop = OneShot<Void>()
        let listening = LockedBox(false)
        let signals = handleInterrupts { sig in
            let held = FileLoginLock.releaseAllHeld()
            if listening.withLock({ $0 }) {
                stop.signal()
            } else {
                if held > 0 { writeStderr("\ncf-access-tcp: login cancelled") }
                Glibc.exit(ExitStatus(signal: sig).rawValue)
            }
        }
        defer { withExtendedLifetime(signals) {} }
        if settings.listens {
            // Two descriptors per connection: the soft limit goes up toward the hard one first.
            if let limits = ToolProcess.raiseDescriptorLimit() {
                report.logger.debug("open-file limit \(limits.after) (it was \(limits.before))")
            }
            try await serveListener(tunnel, settings: settings, listening: listening, stop: stop, report: report,
                                    environment: environment)
        } else {
            try await serveStdio(tunnel, settings: settings, report: report)
        }
    }

    /// ProxyCommand mode: the tunnel is stdin/stdout. When both are pipes or sockets (as ssh
    /// gives them), the carrier loop reads and writes them itself; otherwise (a terminal, a
    /// file, /dev/null) `StdioBridge`'s two threads copy between them and a socket pair.
    ///
    /// Exit status: 0 when either side closed cleanly; otherwise one plain line on stderr (and in
    /// the log file) naming what happened, and the status ``ExitStatus`` gives its ``TunnelEnd``.
    private func serveStdio(_ tunnel: AccessTunnel, settings: TunnelSettings, report: FailureReport) async throws {
        let joined = LocalPair.canServe(input: STDIN_FILENO, output: STDOUT_FILENO)
        report.logger.debug(joined ? "stdin and stdout are pipes or sockets: the carrier reads and writes them itself"
                                   : "stdin or stdout is not a pipe or a socket: two threads copy them through a socket pair")
        let stream: TunnelStream
        let notice = SlowDialNotice.watch(tunnel, host: settings.origin.host, logger: report.logger)
        defer { notice.cancel() }
        do {
            if joined {
                stream = try await tunnel.openStream(hostname: settings.hostname, method: settings.method, joining: LocalPair())
            } else {
                stream = try await tunnel.openStream(hostname: settings.hostname, method: settings.method)
            }
            notice.cancel()
        } catch {
            report.failure(error)
            // Let the session's tasks settle before the process exits under them.
            await tunnel.disconnect()
            throw ExitStatus(error).code
        }
        let end: TunnelEnd?
        if joined {
            ToolProcess.detachStandardInputAndOutput()
            // The carrier reports the end once it has closed stdin and stdout (its duplicates).
            end = await stream.ended
        } else {
            end = await pumpStdio(stream, host: settings.origin.host)
        }
        await tunnel.disconnect()
        if let end, !end.isClean {
            report.line(end.message(host: settings.origin.host))
            throw ExitStatus(end).code
        }
        throw ExitCode.success
    }

    /// Copies between stdin/stdout and the stream's socket on two threads until the tunnel
    /// ended; how it ended (a failed write to stdout as `localIOFailed`).
    private func pumpStdio(_ stream: TunnelStream, host: String) async -> TunnelEnd? {
        let finished = OneShot<Void>()
        let outcome = LockedBox(StdioBridge.Outcome.ended)
        StdioBridge.pump(socket: stream.releaseFileDescriptor().rawValue) { result in
            outcome.withLock { $0 = result }
            finished.signal()
        }
        await finished.wait()
        // The bridge reports why the tunnel ended once its WebSocket is gone (bounded).
        let end = await stream.ended(within: 5)
        if case .outputFailed(let code) = outcome.withLock({ $0 }) {
            return .localIOFailed(detail: "cannot write to stdout: \(SystemError(code).text)")
        }
        return end
    }

    /// Listener mode: until SIGINT/SIGTERM (exit 0), or, with `--single-connection`, until its
    /// one connection ended (exit status of how it ended; each failed connection's line is
    /// already reported), or with `--exit-when-idle` once idle (exit 0). Under systemd it says
    /// `READY=1` once listening and `STOPPING=1` when it starts to stop (`Type=notify`).
    private func serveListener(_ tunnel: AccessTunnel, settings: TunnelSettings, listening: LockedBox<Bool>,
                               stop: OneShot<Void>, report: FailureReport, environment: [String: String]) async throws {
        let port: UInt16
        let notice = SlowDialNotice.watch(tunnel, host: settings.origin.host, logger: report.logger)
        defer { notice.cancel() }
        do {
            port = try await tunnel.connect(hostname: settings.hostname, method: settings.method)
            notice.cancel()
        } catch {
            report.failure(error)
            await tunnel.disconnect()
            throw ExitStatus(error).code
        }
        let shown = settings.listen.map { HostText.withPort($0.host, Int(port)) } ?? "the socket from systemd (port \(port))"
        writeStderr("cf-access-tcp: listening on \(shown) for \(settings.origin.host)")
        listening.withLock { $0 = true }
        ServiceNotification.send("READY=1\nSTATUS=listening on \(shown) for \(settings.origin.host)", environment: environment)
        // SIGHUP (systemd's reload) re-reads the secret file; only with one, so that a listener
        // in a terminal still ends when the terminal does.
        let reload = settings.secretFile.map { file in
            handleInterrupts([SIGHUP]) { _ in
                Task { await Self.reloadSecret(from: file, tunnel: tunnel, settings: settings, logger: report.logger,
                                               environment: environment) }
            }
        }
        defer { withExtendedLifetime(reload) {} }
        // The session leaves `.connected` by itself when a single-connection listener's
        // connection has ended.
        let watcher = Task {
            for await state in tunnel.state where state.isTerminal {
                stop.signal()
                return
            }
        }
        await stop.wait()
        ServiceNotification.send("STOPPING=1", environment: environment)
        watcher.cancel()
        let end = await tunnel.lastEnd
        await tunnel.disconnect()
        if let end, !end.isClean { throw ExitStatus(end).code }
    }
}

extension TCPCommand {
    /// SIGHUP: the secret file read again; new connections carry the new secret, open ones keep
    /// theirs. A file that cannot be read keeps the current secret, with one line saying why.
    static func reloadSecret(from file: String, tunnel: AccessTunnel, settings: TunnelSettings, logger: Logger,
                             environment: [String: String]) async {
        let clientID: String
        switch settings.method {
        case .serviceToken(let token), .serviceTokenWithOAuthFallback(let token, _): clientID = token.clientID
        case .oauth, .accessToken, .none: return
        }
        ServiceNotification.send("RELOADING=1", environment: environment)
        defer { ServiceNotification.send("READY=1", environment: environment) }
        do throws(ConfigurationError) {
            let token = try ServiceToken(clientID: clientID, clientSecret: try TunnelSettings.secret(fromFile: file))
            await tunnel.replaceServiceToken(token)
            logger.info("SIGHUP: the service token secret was read again from \(file); new connections carry it")
        } catch {
            logger.error("SIGHUP: \(error.withFlags); the current secret stays")
        }
    }
}

extension Error {
    /// The plain message of a tunnel or configuration failure, or a description of any other error.
    var message: String {
        if let failure = self as? TunnelFailure { return failure.withFlags }
        if let error = self as? ConfigurationError { return error.withFlags }
        return "\(self)"
    }

    /// The message, naming this command line's flags.
    var withFlags: String { message }
}

extension ConfigurationError {
    /// The message with the settings it names as this command line's flags.
    var withFlags: String { message(naming: \.flag) }
}

extension ConfigurationError.Setting {
    /// How this command line gives the setting (the library's messages name no flags).
    var flag: String {
        switch self {
        case .hostname: return "--hostname"
        case .listenAddress: return "--url"
        case .allowNonLoopback: return "pass --allow-non-loopback"
        case .connectTarget: return "--connect-to"
        case .resolveOverride: return "--resolve"
        case .header: return "--header"
        case .serviceTokenID: return "--service-token-id"
        case .serviceTokenSecret: return "--service-token-secret"
        case .serviceTokenIDSource: return " (or set TUNNEL_SERVICE_TOKEN_ID)"
        case .serviceTokenSecretSource: return " (or set TUNNEL_SERVICE_TOKEN_SECRET)"
        case .destination: return "--destination"
        case .pins: return "--pin"
        default: return words
        }
    }
}

extension TunnelFailure {
    /// The message with the flags of what it names, for this command line's output.
    var withFlags: String { message + (subject.map(flagHint) ?? "") }
}

/// The flags that set what a failure names (the library's messages name no flags).
func flagHint(_ subject: FailureSubject) -> String {
    switch subject {
    case .serviceToken: return " (--service-token-id, --service-token-secret)"
    case .hostname: return " (--hostname)"
    case .caFile: return " (--ca-file)"
    case .addressOverrides: return " (--resolve, --connect-to)"
    case .tokenDirectory: return " (--token-dir)"
    case .listenAddress: return " (--url)"
    case .pins: return " (--pin)"
    }
}

/// Reports a bad flag or environment value as one plain line and gives the usage exit status.
func usageFailure(_ message: String) -> ExitCode {
    writeStderr("cf-access-tcp: \(message)")
    return ExitCode.validationFailure
}

/// Handles `signals` (SIGINT and SIGTERM unless told otherwise) on a dispatch queue instead of
/// their default action: the tool's one signal installer. The handling lasts as long as the
/// returned sources live (cancel them to stop it).
func handleInterrupts(_ signals: [Int32] = [SIGINT, SIGTERM],
                      _ handler: @escaping @Sendable (Int32) -> Void) -> [DispatchSourceSignal] {
    signals.map { (number: Int32) -> DispatchSourceSignal in
        signal(number, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { handler(number) }
        source.resume()
        return source
    }
}

/// Writes one line to stderr, unbuffered.
func writeStderr(_ line: String) {
    FileDescriptors.writeAll(STDERR_FILENO, line + "\n")
}
