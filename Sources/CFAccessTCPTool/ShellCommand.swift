import AccessTransport
import ArgumentParser
import CFAccessSSH
import CFAccessTCP
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell [user@]host [-- command…]`: the embedded SSH client (libssh2) over the
/// tunnel, for machines without OpenSSH.
struct ShellCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "Open an SSH session through the tunnel with the built-in SSH client (no ssh needed).",
        discussion: """
        Without a command: an interactive shell on a pseudo-terminal. With `-- command args…`: runs \
        it, streams its stdout and stderr, forwards stdin, and exits with its exit status.

        Authentication, in OpenSSH's order: ssh-agent (SSH_AUTH_SOCK), keys (-i, then \
        ~/.ssh/id_ed25519, id_ecdsa, id_rsa), keyboard-interactive, password (asked on the terminal; \
        after it succeeds, it can be saved in the system keyring through the Secret Service). Host \
        keys are checked against ~/.ssh/known_hosts under the Access hostname.

        Examples:
          cf-access-tcp shell me@ssh.example.com
          cf-access-tcp shell me@ssh.example.com -- uptime
          cf-access-tcp shell me@ssh.example.com --tmux main     (reattached after a reconnect)
        """
    )

    @OptionGroup var flags: TunnelFlags

    @Option(name: .customShort("p"), help: "The SSH port the known_hosts entry and the saved password are keyed to (default 22).")
    var port: Int = 22

    @Option(name: .customShort("l"), help: "The user to log in as (default: user@ of the destination, else $USER).")
    var loginName: String?

    @Option(name: .customShort("i"), help: "A private key file to try first (repeatable).")
    var identity: [String] = []

    @Flag(name: .customShort("t"), help: "Run the command on a pseudo-terminal, like ssh -t (for full-screen programs); needs a terminal.")
    var forceTerminal = false

    @Flag(name: .customLong("accept-new"), help: "Add an unknown host key to known_hosts without asking (a changed key is still refused).")
    var acceptNew = false

    @Option(name: .customLong("known-hosts"), help: "The known_hosts file (default ~/.ssh/known_hosts).")
    var knownHostsFile: String?

    @Option(name: .customLong("timeout"), help: "Seconds to connect (tunnel and SSH handshake) before \"Connection timed out.\" (default 15).")
    var timeout: Int = 15

    @Option(name: .customLong("tmux"), help: "Run `tmux new-session -A -s NAME` remotely, so a reconnect puts you back in the same session.")
    var tmux: String?

    @Option(name: .customLong("server-alive-interval"),
            help: "Seconds between SSH keepalives; three unanswered mean the connection is lost (default 30, 0 = off).")
    var serverAliveInterval: Int = 30

    @Flag(name: .customLong("no-reconnect"), help: "Do not reconnect an interactive session after the connection is lost.")
    var noReconnect = false

    @Flag(name: .customLong("forget-password"), help: "Remove the saved password for user@host:port from the keyring, then exit.")
    var forgetPassword = false

    @Argument(help: "[user@]host: the Access-protected hostname.")
    var destination: String

    @Argument(parsing: .postTerminator, help: "The command to run (after --).")
    var command: [String] = []

    func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        let environment = ProcessInfo.processInfo.environment
        let target: ShellTarget
        let settings: TunnelSettings
        let logging: LoggingSetup
        do {
            target = try ShellTarget(destination: destination, login: loginName, port: port, environment: environment)
            guard (1...600).contains(timeout) else {
                throw ConfigurationError("--timeout must be between 1 and 600 seconds")
            }
            guard (0...3600).contains(serverAliveInterval) else {
                throw ConfigurationError("--server-alive-interval must be between 0 (off) and 3600 seconds")
            }
            guard tmux == nil || command.isEmpty else {
                throw ConfigurationError("--tmux starts a session of its own: give either --tmux or a command")
            }
            if let tmux, tmux.isEmpty || tmux.contains(where: { !($0.isLetter || $0.isNumber || "-_.".contains($0)) }) {
                throw ConfigurationError("--tmux NAME may only use letters, digits, '-', '_' and '.'")
            }
            for key in identity where !FileManager.default.isReadableFile(atPath: key) {
                throw ConfigurationError("-i \(key): no such readable key file")
            }
            if let hostname = flags.hostname, hostname.lowercased() != target.host {
                throw ConfigurationError("--hostname \(hostname) differs from the destination's host \(target.host): give the host once, as [user@]host")
            }
            var tunnelFlags = flags
            tunnelFlags.hostname = target.host
            tunnelFlags.connectTimeout = timeout
            logging = try LoggingSetup(level: flags.loglevel, file: flags.logfile, directory: flags.logDirectory)
            settings = try TunnelSettings(flags: tunnelFlags, environment: environment, logger: logging.logger)
            if settings.listen != nil {
                throw ConfigurationError("--url cannot be used with shell: the session needs no local port")
            }
        } catch {
            throw usageFailure(error.message)
        }
        if forgetPassword {
            throw ExitCode(await forget(target.account))
        }
        // The flags become the library's policy settings; the tool supplies only the prompts.
        let prompts = TerminalPrompts()
        let knownHosts = KnownHosts(path: knownHostsFile ?? KnownHosts.defaultPath(environment: environment))
        let verifier = KnownHostsVerifier(
            configuration: .init(knownHosts: knownHosts, host: target.host, port: target.port,
                                 checking: acceptNew ? .acceptNew : .ask),
            prompt: prompts)
        let authentication = SSHOrderedAuthentication(
            configuration: .init(account: target.account,
                                 agentSocketPath: SSHOrderedAuthentication.Configuration.agentSocketPath(environment: environment),
                                 identityFiles: identity,
                                 defaultIdentityFiles: SSHOrderedAuthentication.Configuration.defaultIdentityFiles(environment: environment),
                                 passwordStore: SecretServiceStore()),
            prompts: prompts, logger: logging.logger)
        let session = SSHSession.Configuration(hostKeyDelegate: verifier, timeout: .seconds(timeout),
                                               keepalive: SSHKeepalive(interval: .seconds(serverAliveInterval)))
        // A command is not run twice: only a shell (or tmux) is reconnected.
        let reconnect = noReconnect || !command.isEmpty ? SSHReconnectPolicy.never : SSHReconnectPolicy()
        let runner = ShellRunner(
            target: target, settings: settings, logger: logging.logger, environment: environment,
            prompts: prompts, authentication: authentication, session: session,
            command: command.isEmpty ? nil : command.joined(separator: " "),
            tmux: tmux, reconnect: reconnect, terminalCommand: forceTerminal)
        let status = await runner.run()
        throw ExitCode(status)
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

/// Who and where: `[user@]host` with `-l` and `-p`.
struct ShellTarget: Sendable {
    let user: String
    let host: String
    let port: Int

    init(destination: String, login: String?, port: Int, environment: [String: String]) throws(ConfigurationError) {
        var host = destination
        var user: String?
        if let at = destination.lastIndex(of: "@") {
            user = String(destination[..<at])
            host = String(destination[destination.index(after: at)...])
        }
        if let login { user = login }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "/" }) else {
            throw ConfigurationError("the destination must be [user@]host, e.g. me@ssh.example.com")
        }
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
    }

    /// `user@host:port`: the keyring's key and the prompts' account.
    var account: SSHAccount { SSHAccount(user: user, host: host, port: port) }
}
