import AccessCore
import CFAccessSSH

/// What runs remotely in a `shell` session, and how.
package enum ShellMode: Sendable, Equatable {
    /// A command without a pseudo-terminal: stdout and stderr apart, stdin forwarded.
    case command(String)
    /// The login shell without a pseudo-terminal (`-T`, or stdin is not a terminal): it reads its
    /// commands from stdin.
    case shellWithoutTerminal
    /// A pseudo-terminal: the login shell (or `--tmux`), or a command with `-t`.
    case terminal(command: String?)
    /// `-N`: no command, only the forwards (`-L`, `-D`, `-R`).
    case forwardsOnly
    /// `-W host:port`: stdin and stdout carried to `host`:`port` as the server sees it.
    case stdioForward(host: String, port: Int)
    /// `-s`: the subsystem named by the command (`sftp`), no pseudo-terminal.
    case subsystem(String)
}

/// What `shell` decides from its flags and ssh_config before it connects, as ssh decides it:
/// pure functions of the tool, in a target of their own so that a test target can reach them
/// (`Tests/CFAccessTCPToolTests`; the tool's executable links statically).
package enum ShellPlan {
    /// ssh's pseudo-terminal request from `-T` / `-t` / `-tt` (the flags win) or `RequestTTY`.
    package static func terminalRequest(noTerminal: Bool, terminalRequests: Int, configured: SSHRequestTTY?) -> SSHRequestTTY {
        if noTerminal { return .no }
        if terminalRequests >= 2 { return .force }
        if terminalRequests == 1 { return .yes }
        return configured ?? .auto
    }

    /// Whether the session gets a pseudo-terminal: asked for (`yes`, `force`), or `auto` without
    /// a command; never with `no`; not when stdin is not a terminal unless forced (`-tt`), which
    /// ssh says in a line (the notice, shown unless quiet).
    package static func wantsTerminal(_ request: SSHRequestTTY, hasCommand: Bool, stdinIsTerminal: Bool) -> (terminal: Bool, notice: String?) {
        let wanted: Bool
        switch request {
        case .no: wanted = false
        case .yes, .force: wanted = true
        case .auto: wanted = !hasCommand
        }
        if wanted && !stdinIsTerminal && request != .force {
            return (false, "Pseudo-terminal will not be allocated because stdin is not a terminal.")
        }
        return (wanted, nil)
    }

    /// The key files to offer, in order: the Access short-lived certificate's key, the `-i` keys,
    /// then the readable `IdentityFile`s not already named; and whether any key was named (then
    /// OpenSSH's default files are not added).
    package static func keyFiles(certificate: String?, identity: [String], identityFiles: [String],
                         isReadable: (String) -> Bool) -> (files: [String], named: Bool) {
        var files: [String] = []
        if let certificate { files.append(certificate) }
        files += identity
        files += identityFiles.filter { !files.contains($0) && isReadable($0) }
        return (files, !identity.isEmpty || !identityFiles.isEmpty)
    }

    /// What runs remotely: `-N` nothing; a terminal (a shell, or the command with one); a
    /// command without one; else the login shell reading stdin. `--tmux` needs a terminal.
    package static func mode(noCommand: Bool, terminal: Bool, command: String?, tmux: String?,
                             stdioForward: (host: String, port: Int)? = nil, subsystem: Bool = false) throws(ConfigurationError) -> ShellMode {
        if let stdioForward { return .stdioForward(host: stdioForward.host, port: stdioForward.port) }
        if subsystem {
            guard let command, !command.isEmpty else { throw ConfigurationError("-s needs the subsystem's name as the command, e.g. -s host sftp") }
            return .subsystem(command)
        }
        if noCommand { return .forwardsOnly }
        if terminal { return .terminal(command: command) }
        if let command { return .command(command) }
        if tmux != nil { throw ConfigurationError("--tmux needs a terminal on stdin (or -tt)") }
        return .shellWithoutTerminal
    }

    /// The authentication methods ssh_config allows: each of `PubkeyAuthentication`,
    /// `KbdInteractiveAuthentication`, `PasswordAuthentication` (nil: yes), and only those
    /// `PreferredAuthentications` names. The order of the list must be OpenSSH's default
    /// (publickey, keyboard-interactive, password): another order is refused, not ignored.
    package static func allowedMethods(publicKey: Bool?, keyboardInteractive: Bool?, password: Bool?,
                                       preferred: [String]?) throws(ConfigurationError) -> SSHAuthenticationMethods {
        var allowed: SSHAuthenticationMethods = []
        if publicKey != false { allowed.insert(.publicKey) }
        if keyboardInteractive != false { allowed.insert(.keyboardInteractive) }
        if password != false { allowed.insert(.password) }
        guard let preferred else { return allowed }
        let order = ["publickey", "keyboard-interactive", "password"]
        let known = preferred.filter(order.contains)
        guard known == order.filter(known.contains) else {
            throw ConfigurationError("PreferredAuthentications \(preferred.joined(separator: ",")): only OpenSSH's default order "
                                     + "(publickey, keyboard-interactive, password) is supported; leave out the methods not wanted")
        }
        return allowed.intersection(SSHAuthenticationMethods(names: known))
    }

    /// The command to run: the command line's, else `RemoteCommand`; both is ssh's error.
    package static func remoteCommand(commandLine: [String], configured: String?) throws(ConfigurationError) -> String? {
        // `RemoteCommand none` (what scp passes) is read as the empty text: no command from the files.
        let configured = configured?.isEmpty == true ? nil : configured
        if !commandLine.isEmpty {
            guard configured == nil else { throw ConfigurationError("Cannot execute command-line and remote command.") }
            return commandLine.joined(separator: " ")
        }
        return configured
    }

    /// `-W host:port` (`[v6]:port` for an IPv6 address): the host and port.
    package static func stdioForward(_ value: String) throws(ConfigurationError) -> (host: String, port: Int) {
        let failure = ConfigurationError("-W \(value): expected host:port, e.g. -W intranet:22")
        guard let colon = value.lastIndex(of: ":") else { throw failure }
        var host = String(value[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace }), let port = Int(value[value.index(after: colon)...]),
              (1...65535).contains(port) else { throw failure }
        return (host, port)
    }

    /// `-J` / `ProxyJump`: `[user@]host[:port]` of one jump host (user and port optional). A list
    /// of hops is refused: one jump is supported.
    package static func jump(_ value: String) throws(ConfigurationError) -> (user: String?, host: String, port: Int?) {
        guard !value.contains(",") else {
            throw ConfigurationError("-J \(value): one jump host is supported, not a list")
        }
        var rest = Substring(value)
        var user: String?
        if let at = rest.lastIndex(of: "@") {
            user = String(rest[..<at])
            rest = rest[rest.index(after: at)...]
        }
        var port: Int?
        if let colon = rest.lastIndex(of: ":"), let number = Int(rest[rest.index(after: colon)...]) {
            guard (1...65535).contains(number) else { throw ConfigurationError("-J \(value): the port must be between 1 and 65535") }
            port = number
            rest = rest[..<colon]
        }
        guard !rest.isEmpty, !rest.contains(where: { $0.isWhitespace || $0 == "/" || $0 == ":" }), user?.isEmpty != true else {
            throw ConfigurationError("-J \(value): expected [user@]host[:port], e.g. -J me@jump.example.com")
        }
        return (user, String(rest), port)
    }

    /// Whether progress lines are shown: only an interactive session on a terminal, as ssh's
    /// "Connection to host closed." (a command, `-N`, `-W` or a subsystem is silent).
    package static func showsProgress(_ mode: ShellMode, stdinIsTerminal: Bool) -> Bool {
        guard case .terminal = mode else { return false }
        return stdinIsTerminal
    }

    /// Whether a lost connection is reconnected: only a shell (or tmux) on a local terminal, and
    /// `-N`'s forwards; a command is never run twice.
    package static func reconnects(noReconnect: Bool, hasCommand: Bool, noCommand: Bool, stdinIsTerminal: Bool) -> Bool {
        !noReconnect && !hasCommand && (stdinIsTerminal || noCommand)
    }

    /// Where a forwarded agent is, or why none is.
    package enum ForwardedAgent: Sendable, Equatable {
        /// The agent's socket.
        case socket(String)
        /// Forwarding was asked for, but there is no agent: the reason, in words.
        case unavailable(String)
    }

    /// The agent to forward, as ssh decides: `-a` wins, then `-A`, then `ForwardAgent`
    /// (`configured`, with the socket it names, `socket`: a path, `~/…`, or `$NAME`); the socket
    /// is `SSH_AUTH_SOCK`'s unless named. Nil when the agent is not forwarded.
    package static func forwardedAgent(flag: Bool, off: Bool, configured: Bool?, socket: String?,
                                       environment: [String: String]) -> ForwardedAgent? {
        guard !off, flag || configured == true else { return nil }
        // -A forwards SSH_AUTH_SOCK's agent, whatever ForwardAgent names.
        let named = flag ? nil : socket
        guard let named else {
            guard let path = environment["SSH_AUTH_SOCK"], !path.isEmpty else {
                return .unavailable("agent forwarding: no ssh-agent (SSH_AUTH_SOCK is not set)")
            }
            return .socket(path)
        }
        if named.hasPrefix("$") {
            let name = String(named.dropFirst())
            guard let path = environment[name], !path.isEmpty else {
                return .unavailable("ForwardAgent \(named): the variable \(name) is not set")
            }
            return .socket(path)
        }
        if named.hasPrefix("~/") || named == "~" {
            guard let home = environment["HOME"], !home.isEmpty else {
                return .unavailable("ForwardAgent \(named): HOME is not set")
            }
            return .socket(home + named.dropFirst())
        }
        return .socket(named)
    }

    /// What `-G` prints, as ssh -G prints it: one lower-case `keyword value` line per setting
    /// (a keyword repeated for each file), ending with a line end.
    package static func resolvedSettings(user: String, hostName: String, port: Int, identityFiles: [String],
                                         userKnownHostsFiles: [String], globalKnownHostsFiles: [String], batchMode: Bool,
                                         proxyJump: String?) -> String {
        var lines = ["user \(user)", "hostname \(hostName)", "port \(port)"]
        lines += identityFiles.map { "identityfile \($0)" }
        lines.append("userknownhostsfile " + userKnownHostsFiles.joined(separator: " "))
        lines.append("globalknownhostsfile " + globalKnownHostsFiles.joined(separator: " "))
        lines.append("batchmode \(batchMode ? "yes" : "no")")
        if let proxyJump { lines.append("proxyjump \(proxyJump)") }
        return lines.joined(separator: "\n") + "\n"
    }
}
