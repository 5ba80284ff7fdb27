import AccessTransport
import ArgumentParser
import CFAccessSSH
import CFAccessTCP
import Foundation
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
            throw usageFailure(error.withFlags)
        }
        if forgetPassword {
            throw ExitCode(forget(target))
        }
        let runner = ShellRunner(
            target: target, settings: settings, logger: logging.logger, environment: environment,
            identities: identity, acceptNew: acceptNew,
            knownHosts: KnownHosts(path: knownHostsFile ?? KnownHosts.defaultPath(environment: environment)),
            timeout: Double(timeout), command: command.isEmpty ? nil : command.joined(separator: " "),
            tmux: tmux, reconnect: !noReconnect, keepaliveInterval: serverAliveInterval, terminalCommand: forceTerminal)
        let status = await runner.run()
        throw ExitCode(status)
    }

    private func forget(_ target: ShellTarget) -> Int32 {
        do {
            let store = try SecretServiceStore()
            if try store.remove(user: target.user, host: target.host, port: target.port) {
                writeStderr("cf-access-tcp: removed the saved password for \(target.keyringName)")
            } else {
                writeStderr("cf-access-tcp: no saved password for \(target.keyringName)")
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

    /// `user@host:port`, the keyring key.
    var keyringName: String { "\(user)@\(host):\(port)" }
}

/// A credential that worked, to log in again silently after a reconnect.
enum RememberedCredential: Sendable {
    case none
    case agent
    case key(path: String, passphrase: String?)
    case password(String)
    case keyboardInteractive
}

/// One shell run: connect, authenticate, run, reconnect.
final class ShellRunner: @unchecked Sendable {
    let target: ShellTarget
    let settings: TunnelSettings
    let logger: Logger
    let environment: [String: String]
    let identities: [String]
    let acceptNew: Bool
    let knownHosts: KnownHosts
    let timeout: Double
    let command: String?
    let tmux: String?
    let reconnect: Bool
    let keepaliveInterval: Int
    /// `-t`: the command runs on a PTY, like the shell (but is never run again by a reconnect).
    let terminalCommand: Bool
    let prompter = TerminalPrompter()
    private var remembered: RememberedCredential?
    private lazy var keyring: Result<SecretServiceStore, SecretServiceStore.Unavailable> = {
        do throws(SecretServiceStore.Unavailable) { return .success(try SecretServiceStore()) } catch { return .failure(error) }
    }()

    init(target: ShellTarget, settings: TunnelSettings, logger: Logger, environment: [String: String],
         identities: [String], acceptNew: Bool, knownHosts: KnownHosts, timeout: Double, command: String?,
         tmux: String?, reconnect: Bool, keepaliveInterval: Int, terminalCommand: Bool) {
        self.keepaliveInterval = keepaliveInterval
        self.terminalCommand = terminalCommand
        self.target = target
        self.settings = settings
        self.logger = logger
        self.environment = environment
        self.identities = identities
        self.acceptNew = acceptNew
        self.knownHosts = knownHosts
        self.timeout = timeout
        self.command = command
        self.tmux = tmux
        self.reconnect = reconnect
    }

    /// A failure that ends the run: the line to print and the exit status.
    struct Stop: Error {
        let message: String
        let status: ExitStatus
    }

    func say(_ line: String) { writeStderr(line) }

    /// Runs the session; returns the process exit status.
    func run() async -> Int32 {
        // SIGINT, SIGTERM, SIGHUP end the run through exit(), whose hook puts the terminal back
        // (raw mode, or a password prompt's echo off).
        let stops = [SIGINT, SIGTERM, SIGHUP].map { number -> DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { exit(128 + number) }
            source.resume()
            return source
        }
        defer { stops.forEach { $0.cancel() } }
        let interactive = command == nil || terminalCommand
        if interactive && isatty(0) == 0 {
            say("cf-access-tcp: an interactive shell needs a terminal on stdin: give a command after --, e.g. shell \(target.user)@\(target.host) -- uptime")
            return ExitStatus.usage.rawValue
        }
        let connection: (AccessTunnel, SSHSession)
        do {
            connection = try await connect(first: true)
        } catch {
            say("cf-access-tcp: \(error.message)")
            return error.status.rawValue
        }
        if let command, !terminalCommand {
            return await runCommand(command, tunnel: connection.0, session: connection.1)
        }
        return await runInteractive(tunnel: connection.0, session: connection.1)
    }

    // MARK: Connecting

    /// Opens the tunnel, runs the SSH handshake, checks the host key and authenticates.
    func connect(first: Bool) async throws(Stop) -> (AccessTunnel, SSHSession) {
        if first { say("Connecting to \(target.host)…") }
        let tunnel = AccessTunnel(options: settings.options, logger: logger,
                                  transport: LiveTunnelTransport(logger: logger))
        let stream: TunnelStream
        do {
            stream = try await tunnel.openStream(hostname: settings.hostname, method: settings.method)
        } catch {
            await tunnel.disconnect()
            throw Stop(message: error.withFlags, status: ExitStatus(error))
        }
        let session: SSHSession
        do {
            session = try SSHSession(stream: stream, options: SSHSession.Options(timeout: timeout, keepaliveInterval: keepaliveInterval))
            let key = try await session.handshake()
            try verify(key)
            try await authenticate(session)
        } catch let failure as SSHFailure {
            await tunnel.disconnect()
            throw Stop(message: failure.message, status: ExitStatus(failure))
        } catch let stop as Stop {
            await tunnel.disconnect()
            throw stop
        } catch {
            await tunnel.disconnect()
            throw Stop(message: "\(error)", status: .software)
        }
        if first { say("Connected to \(target.host).") }
        return (tunnel, session)
    }

    /// Checks the host key against known_hosts: a match passes, an unknown key is shown and
    /// accepted on request, a changed key is refused.
    private func verify(_ key: SSHHostKey) throws {
        let shown = KnownHosts.entryName(host: target.host, port: target.port)
        switch try knownHosts.check(host: target.host, port: target.port, key: key) {
        case .match:
            return
        case .mismatch:
            say(Self.changedKeyWarning(key: key, knownHostsPath: knownHosts.path))
            throw Stop(message: "Host key verification failed.", status: .accessDenied)
        case .unknown:
            var accept = acceptNew
            if !accept {
                guard prompter.isAvailable else {
                    say("The authenticity of host '\(shown)' can't be established.")
                    say("\(key.displayType) key fingerprint is \(key.fingerprint).")
                    throw Stop(message: "Host key verification failed: no terminal to ask; check the fingerprint and use --accept-new",
                               status: .accessDenied)
                }
                prompter.say("The authenticity of host '\(shown)' can't be established.\n"
                             + "\(key.displayType) key fingerprint is \(key.fingerprint).\n")
                while true {
                    let answer = prompter.readLine(prompt: "Are you sure you want to continue connecting (yes/no/[fingerprint])? ", echo: true)?
                        .trimmingCharacters(in: .whitespaces)
                    guard let answer else { break }
                    if answer.lowercased() == "yes" || answer == key.fingerprint { accept = true; break }
                    if answer.lowercased() == "no" || answer.isEmpty { break }
                    prompter.say("Please type 'yes', 'no' or the fingerprint: ")
                }
            }
            guard accept else { throw Stop(message: "Host key verification failed.", status: .accessDenied) }
            try knownHosts.add(host: target.host, port: target.port, key: key)
            say("Warning: Permanently added '\(shown)' (\(key.displayType)) to the list of known hosts.")
        }
    }

    /// OpenSSH's warning for a changed host key.
    static func changedKeyWarning(key: SSHHostKey, knownHostsPath: String) -> String {
        """
        @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
        @    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
        @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
        IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
        Someone could be eavesdropping on you right now (man-in-the-middle attack)!
        It is also possible that a host key has just been changed.
        The fingerprint for the \(key.displayType) key sent by the remote host is
        \(key.fingerprint).
        Please contact your system administrator.
        Add correct host key in \(knownHostsPath) to get rid of this message.
        """
    }

    // MARK: Authentication

    private func authenticate(_ session: SSHSession) async throws {
        if let remembered {
            // A reconnect: the credential that worked before, without asking again.
            switch remembered {
            case .none: return
            case .agent: try await session.authenticateWithAgent(user: target.user); return
            case .key(let path, let passphrase):
                try await session.authenticate(user: target.user, privateKeyFile: path, passphrase: passphrase); return
            case .password(let password):
                try await session.authenticate(user: target.user, password: password); return
            case .keyboardInteractive:
                break
            }
        }
        let methods = try await session.authenticationMethods(user: target.user)
        if methods.isEmpty {
            remembered = RememberedCredential.none
            return
        }
        logger.debug("server offers: \(methods.joined(separator: ","))")
        if methods.contains("publickey") {
            if let socket = environment["SSH_AUTH_SOCK"], !socket.isEmpty {
                do {
                    try await session.authenticateWithAgent(user: target.user)
                    remembered = .agent
                    return
                } catch {
                    guard [.authenticationFailed, .configuration, .localIO].contains(error.kind) else { throw error }
                    logger.debug("ssh-agent: \(error.message)")
                }
            }
            if try await tryKeys(session) { return }
        }
        if methods.contains("keyboard-interactive") && prompter.isAvailable {
            for _ in 0..<3 {
                do {
                    let prompter = self.prompter
                    try await session.authenticateKeyboardInteractive(user: target.user) { round in
                        if !round.instruction.isEmpty { prompter.say(round.instruction + "\n") }
                        return round.questions.map { prompter.readLine(prompt: $0.text, echo: $0.echo) ?? "" }
                    }
                    remembered = .keyboardInteractive
                    return
                } catch {
                    guard error.kind == .authenticationFailed else { throw error }
                    say("Authentication failed")
                }
            }
        }
        if methods.contains("password") {
            if try await tryPassword(session) { return }
        }
        throw Stop(message: "Authentication failed: \(target.user)@\(target.host) (the server offers: \(methods.joined(separator: ", ")))",
                   status: .accessDenied)
    }

    /// -i keys, then the default ones that exist; an encrypted key asks for its passphrase.
    private func tryKeys(_ session: SSHSession) async throws -> Bool {
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        let defaults = ["id_ed25519", "id_ecdsa", "id_rsa"].map { "\(home)/.ssh/\($0)" }
            .filter { FileManager.default.isReadableFile(atPath: $0) }
        for key in identities + defaults.filter({ !identities.contains($0) }) {
            let encrypted = PrivateKeyFile.isEncrypted(path: key)
            var tries = encrypted ? 3 : 1
            while tries > 0 {
                tries -= 1
                var passphrase: String?
                if encrypted {
                    guard let typed = prompter.readLine(prompt: "Enter passphrase for key '\(key)': ", echo: false) else { break }
                    passphrase = typed
                }
                do {
                    try await session.authenticate(user: target.user, privateKeyFile: key, passphrase: passphrase)
                    remembered = .key(path: key, passphrase: passphrase)
                    return true
                } catch {
                    if error.kind == .localIO {
                        say(encrypted ? "Bad passphrase for key '\(key)'" : "Load key \"\(key)\": invalid or unsupported format")
                    } else if error.kind == .authenticationFailed {
                        logger.debug("key \(key) refused")
                        break
                    } else {
                        throw error
                    }
                }
            }
        }
        return false
    }

    /// A saved password first, then up to three typed ones; after a typed one works, the offer
    /// to save it.
    private func tryPassword(_ session: SSHSession) async throws -> Bool {
        if case .success(let store) = keyring, let saved = try? store.password(user: target.user, host: target.host, port: target.port) {
            do {
                try await session.authenticate(user: target.user, password: saved)
                remembered = .password(saved)
                return true
            } catch {
                guard error.kind == .authenticationFailed else { throw error }
                say("The saved password for \(target.keyringName) was not accepted.")
            }
        }
        guard prompter.isAvailable else {
            say("cf-access-tcp: no terminal to ask for a password (the password is never read from stdin)")
            return false
        }
        for attempt in 1...3 {
            guard let password = prompter.readLine(prompt: "\(target.user)@\(target.host)'s password: ", echo: false) else {
                return false
            }
            do {
                try await session.authenticate(user: target.user, password: password)
                remembered = .password(password)
                offerToSave(password)
                return true
            } catch {
                guard error.kind == .authenticationFailed else { throw error }
                say(attempt < 3 ? "Authentication failed, please try again." : "Authentication failed")
            }
        }
        return false
    }

    private func offerToSave(_ password: String) {
        switch keyring {
        case .failure(let why):
            say("cf-access-tcp: the password cannot be saved: \(why.reason)")
        case .success(let store):
            let answer = prompter.readLine(prompt: "Save password for future connections? [y/N] ", echo: true)?
                .trimmingCharacters(in: .whitespaces).lowercased()
            guard answer == "y" || answer == "yes" else { return }
            do {
                try store.save(password, user: target.user, host: target.host, port: target.port)
                say("Password saved in the keyring for \(target.keyringName).")
            } catch {
                say("cf-access-tcp: the password was not saved: \(error.reason)")
            }
        }
    }

    // MARK: Running

    private func runCommand(_ command: String, tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        let end: SSHChannelEnd
        do {
            end = try await session.exec(command, standardInput: 0, standardOutput: 1, standardError: 2)
        } catch {
            await tunnel.disconnect()
            say("cf-access-tcp: \(error.message)")
            return ExitStatus(error).rawValue
        }
        await session.disconnect(description: "disconnected by user")
        await tunnel.disconnect()
        return status(of: end)
    }

    private func status(of end: SSHChannelEnd) -> Int32 {
        switch end {
        case .exited(let status): return status
        case .signalled(let name):
            say("cf-access-tcp: the remote command was killed by signal \(name)")
            return 128 + (Self.signalNumbers[name] ?? 127)
        case .closed: return ExitStatus.success.rawValue
        case .lost(let failure):
            say("cf-access-tcp: \(failure.message)")
            return ExitStatus(failure).rawValue
        case .localOutputFailed(let why):
            say("cf-access-tcp: cannot write the output: \(why)")
            return ExitStatus.localIO.rawValue
        }
    }

    private static let signalNumbers: [String: Int32] = [
        "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9, "SEGV": 11, "PIPE": 13,
        "ALRM": 14, "TERM": 15, "USR1": 10, "USR2": 12,
    ]

    private func runInteractive(tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        var tunnel = tunnel
        var session = session
        let term = environment["TERM"].flatMap { $0.isEmpty ? nil : $0 } ?? "xterm"
        let remoteCommand = command ?? tmux.map { "tmux new-session -A -s \($0)" }
        // A command is not run twice: only a shell (or tmux) is reconnected.
        let reconnect = self.reconnect && command == nil
        guard let raw = RawTerminal(fd: 0) else {
            say("cf-access-tcp: stdin is not a terminal")
            return ExitStatus.usage.rawValue
        }
        defer {
            raw.restore()
            TerminalRestorer.forget()
        }
        let current = LockedBox<SSHInteractiveChannel?>(nil)
        signal(SIGWINCH, SIG_IGN)
        let winch = DispatchSource.makeSignalSource(signal: SIGWINCH, queue: .global())
        winch.setEventHandler {
            let size = terminalSize(0)
            current.withLock { $0 }?.resize(columns: size.columns, rows: size.rows)
        }
        winch.resume()
        defer { winch.cancel() }

        while true {
            let size = terminalSize(0)
            let channel: SSHInteractiveChannel
            do {
                channel = try await session.openShell(terminal: SSHTerminal(term: term, columns: size.columns, rows: size.rows),
                                                      command: remoteCommand)
            } catch {
                raw.restore()
                await tunnel.disconnect()
                say("cf-access-tcp: \(error.message)")
                return ExitStatus(error).rawValue
            }
            current.withLock { $0 = channel }
            let end = await channel.run(input: 0, output: 1)
            current.withLock { $0 = nil }
            guard case .lost(let failure) = end, reconnect else {
                raw.restore()
                await session.disconnect(description: "disconnected by user")
                await tunnel.disconnect()
                if case .lost = end {} else { say("Connection to \(target.host) closed.") }
                return status(of: end)
            }
            raw.restore()
            await session.disconnect(description: "connection lost")
            await tunnel.disconnect()
            var reconnected: (AccessTunnel, SSHSession)?
            var last = Stop(message: failure.message, status: ExitStatus(failure))
            for (attempt, delay) in [1, 5, 15].enumerated() {
                say("\r\nConnection lost — reconnecting (\(attempt + 1)/3)…")
                try? await Task.sleep(nanoseconds: UInt64(delay) * 1_000_000_000)
                do {
                    reconnected = try await connect(first: false)
                    break
                } catch {
                    last = error
                    logger.info("reconnect attempt \(attempt + 1) failed: \(error.message)")
                }
            }
            guard let reconnected else {
                say("cf-access-tcp: Connection lost: could not reconnect after 3 attempts: \(last.message)")
                return ExitStatus.connectionLost.rawValue
            }
            say("Reconnected.")
            (tunnel, session) = reconnected
            raw.enterRawAgain()
        }
    }
}

/// Looks at a private key file without decrypting it.
enum PrivateKeyFile {
    /// Whether the key is protected by a passphrase: an OpenSSH key whose cipher is not
    /// "none", or an encrypted PEM key.
    static func isEncrypted(path: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: path) else { return false }
        let text = String(decoding: data, as: UTF8.self)
        if text.contains("ENCRYPTED") { return true }   // PEM: Proc-Type: 4,ENCRYPTED / BEGIN ENCRYPTED PRIVATE KEY
        let begin = "-----BEGIN OPENSSH PRIVATE KEY-----", end = "-----END OPENSSH PRIVATE KEY-----"
        guard let start = text.range(of: begin), let stop = text.range(of: end) else { return false }
        let body = text[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
        guard let blob = Data(base64Encoded: String(body)) else { return false }
        // "openssh-key-v1\0", then the cipher name as an SSH string.
        let magic = 15
        guard blob.count > magic + 4 else { return false }
        let bytes = [UInt8](blob)
        let length = Int(bytes[magic]) << 24 | Int(bytes[magic + 1]) << 16 | Int(bytes[magic + 2]) << 8 | Int(bytes[magic + 3])
        guard length > 0, bytes.count >= magic + 4 + length else { return false }
        return String(decoding: bytes[(magic + 4)..<(magic + 4 + length)], as: UTF8.self) != "none"
    }
}
