import AccessCore
import AccessTransport
import CFAccessSSH
import CFAccessTCP
import Dispatch
import FoundationEssentials
import Logging
import ToolDecisions
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// One shell run: the terminal side of the library's session. It opens the tunnel and the
/// session (the library checks the host key and authenticates, by the policy the flags chose),
/// runs the command or the interactive shell, and reconnects when the library's
/// ``SSHReconnection`` says so; it only adds the progress lines, the terminal modes and the exit
/// status.
final class ShellRunner {
    /// What runs remotely, and how.
    typealias Mode = ShellMode

    let target: ShellTarget
    let settings: TunnelSettings
    let logger: Logger
    /// The log records' sink when it is the terminal (stderr): muted while a session has it.
    let terminalLog: LineSink?
    let environment: [String: String]
    /// The variables sent to the server (`SendEnv`, `SetEnv`).
    let sentEnvironment: [String: String]
    /// `-q`: no progress lines.
    let quiet: Bool
    let prompts: TerminalPrompts
    let authentication: SSHOrderedAuthentication
    let session: SSHSession.Configuration
    let mode: Mode
    let tmux: String?
    let reconnect: SSHReconnectPolicy
    /// `-L`: local ports forwarded over the session.
    let forwards: [SSHLocalForward]
    /// The forwards' listening sockets, bound before connecting and kept across reconnects.
    private var listeners: [SSHForwardListener] = []
    /// `-R`: ports the server forwards back here, asked for again on every connection.
    let remoteForwards: [SSHRemoteForward]
    /// `ExitOnForwardFailure`: a remote forward the server refuses ends the run (else a warning).
    let exitOnForwardFailure: Bool
    /// Whether the ports the server picked and refused forwards are said (not with `-q`).
    let reportsForwards: Bool
    /// The engine of the session, decided before its first login (`SSHEngineChoice`), and
    /// libssh after a server turned out to need RSA.
    private var engine: SSHEngineChoice?
    /// The escape character of an interactive session (`-e`, `EscapeChar`); nil: none.
    let escapeCharacter: UInt8?
    /// `-J` / `ProxyJump`: the Access-protected host the tunnel reaches, whose SSH server opens
    /// the way to the destination (a `direct-tcpip` channel carrying the destination's session).
    let jump: Jump?
    /// The jump's session and the channel that carries the destination's, while connected.
    private var link: JumpLink?

    /// A jump host: who and where, its host-key check and its login.
    struct Jump {
        let target: ShellTarget
        let session: SSHSession.Configuration
        let authentication: SSHOrderedAuthentication
    }

    init(target: ShellTarget, settings: TunnelSettings, logger: Logger, terminalLog: LineSink?, environment: [String: String],
         sentEnvironment: [String: String], quiet: Bool, prompts: TerminalPrompts, authentication: SSHOrderedAuthentication,
         session: SSHSession.Configuration, mode: Mode, tmux: String?, reconnect: SSHReconnectPolicy,
         forwards: [SSHLocalForward] = [], remoteForwards: [SSHRemoteForward] = [], exitOnForwardFailure: Bool = false,
         reportsForwards: Bool = true, escapeCharacter: UInt8? = UInt8(ascii: "~"), jump: Jump? = nil) {
        self.remoteForwards = remoteForwards
        self.exitOnForwardFailure = exitOnForwardFailure
        self.reportsForwards = reportsForwards
        self.escapeCharacter = escapeCharacter
        self.jump = jump
        self.target = target
        self.settings = settings
        self.logger = logger
        self.terminalLog = terminalLog
        self.environment = environment
        self.sentEnvironment = sentEnvironment
        self.quiet = quiet
        self.prompts = prompts
        self.authentication = authentication
        var session = session
        // A terminal session runs on the engine that sends the terminal's modes (SSHSession).
        if case .terminal = mode { session.opensTerminal = true }
        self.session = session
        self.mode = mode
        self.tmux = tmux
        self.reconnect = reconnect
        self.forwards = forwards
    }

    /// A failure that ends the run: the line to print and the exit status.
    struct Stop: Error {
        let message: String
        let status: ExitStatus
    }

    func say(_ line: String) { writeStderr(line) }

    /// A progress line (`Connecting…`, `Connected`, `Connection … closed.`): not with `-q`.
    func progress(_ line: String) {
        if !quiet { writeStderr(line) }
    }

    /// Runs the session; returns the process exit status.
    func run() async -> Int32 {
        // SIGINT, SIGTERM, SIGHUP end the run through exit(), whose hook puts the terminal back
        // (raw mode, or a password prompt's echo off).
        let stops = handleInterrupts([SIGINT, SIGTERM, SIGHUP]) { number in exit(128 + number) }
        defer { stops.forEach { $0.cancel() } }
        // The forwards' ports first: one that cannot be had ends the run before any connection.
        do {
            for forward in forwards {
                listeners.append(try SSHForwardListener(forward, onEvent: { [target] event in
                    if case .openFailed(let origin, let reason) = event {
                        ShellRunner.notice("cf-access-tcp: -\(forward.isDynamic ? "D" : "L") \(forward): \(target.host) refused the connection from \(origin): \(reason)")
                    }
                }))
            }
        } catch {
            say("cf-access-tcp: \(error.message)")
            return ExitStatus.localIO.rawValue
        }
        defer { listeners.forEach { $0.close() } }
        let connection: (AccessTunnel, SSHSession)
        do {
            connection = try await connect(first: true)
        } catch {
            say("cf-access-tcp: \(error.message)")
            return error.status.rawValue
        }
        // -f: up and logged in; the first process may go.
        Background.ready(environment: environment)
        switch mode {
        case .command(let command):
            return await runCommand(command, tunnel: connection.0, session: connection.1)
        case .shellWithoutTerminal:
            return await runCommand(nil, tunnel: connection.0, session: connection.1)
        case .terminal(let command):
            return await runInteractive(command: command, tunnel: connection.0, session: connection.1)
        case .forwardsOnly:
            return await runForwardsOnly(tunnel: connection.0, session: connection.1)
        case .subsystem(let name):
            return await runCommand(nil, subsystem: name, tunnel: connection.0, session: connection.1)
        case .stdioForward(let host, let port):
            return await runStdioForward(host: host, port: port, tunnel: connection.0, session: connection.1)
        }
    }

    /// A line on stderr from any thread; on a raw-mode terminal it needs its own carriage return.
    static func notice(_ line: String) {
        let text = isatty(2) == 1 ? "\r" + line + "\r\n" : line + "\n"
        _ = FileDescriptors.writeAll(2, text)
    }

    // MARK: Connecting

    /// Opens the tunnel and the SSH session: handshake with the host-key check, then
    /// authentication, both by the library's policy.
    func connect(first: Bool) async throws(Stop) -> (AccessTunnel, SSHSession) {
        if first { progress("Connecting to \(target.host)…") }
        if engine == nil {
            let choice = await SSHEngineChoice.forSession(configuration: session, authentication: authentication)
            logger.debug("the session runs on \(choice.explanation)")
            if !choice.kind.features.passesBanner {
                logger.debug("a pre-login banner is not shown: \(choice.kind.features.version) drops it (1.11 passes it on)")
            }
            engine = choice
        }
        while true {
            let tunnel = AccessTunnel(options: settings.options, logger: logger, transport: LiveTunnelTransport(logger: logger))
            let stream: TunnelStream
            do {
                stream = try await tunnel.openStream(hostname: settings.hostname, method: settings.method)
            } catch {
                await tunnel.disconnect()
                throw Stop(message: error.withFlags, status: ExitStatus(error))
            }
            var configuration = session
            configuration.engine = engine?.kind
            // A host certificate is read on a second tunnel to the same host (neither SSH library
            // takes one in its key exchange); not through -J, whose one channel carries the session.
            if jump == nil { configuration.hostCertificateConnection = certificateConnection() }
            do {
                let ssh: SSHSession
                if let jump {
                    let link = try await JumpLink.open(jump, over: stream, to: target)
                    self.link = link
                    ssh = try SSHSession(fileDescriptor: FileDescriptor(rawValue: link.descriptor), configuration: configuration)
                } else {
                    ssh = try SSHSession(stream: stream, configuration: configuration)
                }
                try await ssh.handshake()
                try await ssh.authenticate(user: target.user, delegate: authentication)
                for listener in listeners {
                    try await ssh.startForwarding(listener)
                }
                try await startRemoteForwards(on: ssh)
                if first { progress("Connected to \(target.host).") }
                return (tunnel, ssh)
            } catch {
                await finish(tunnel, nil)
                // A terminal on libssh2 whose server needs RSA (an RSA-only host key, found in the
                // key exchange): once more on libssh, which signs and verifies with rsa-sha2.
                guard error.engineLimitation != nil, engine?.kind == .libssh2, engine?.reason != .chosen else {
                    throw Stop(message: line(for: error), status: ExitStatus(error))
                }
                engine = SSHEngineChoice(.libssh, .rsaServer)
                logger.debug("the session runs on \(engine!.explanation): \(error.message)")
            }
        }
    }

    /// Opens a second tunnel stream to the host, for the session to read the host certificate
    /// on: nil (logged) when it cannot be opened.
    private func certificateConnection() -> @Sendable () async -> SSHCertificateConnection? {
        let (options, hostname, method, logger) = (settings.options, settings.hostname, settings.method, logger)
        return {
            let tunnel = AccessTunnel(options: options, logger: logger, transport: LiveTunnelTransport(logger: logger))
            do {
                let stream = try await tunnel.openStream(hostname: hostname, method: method)
                return SSHCertificateConnection(fileDescriptor: stream.fileDescriptor) {
                    stream.close()
                    await tunnel.disconnect()
                }
            } catch {
                logger.debug("no second tunnel to read the host certificate on: \(error.message)")
                await tunnel.disconnect()
                return nil
            }
        }
    }

    /// Asks the server for the `-R` forwards; the port it picked is said (as ssh says it), a
    /// refusal is a warning, or with `ExitOnForwardFailure` the end of the run.
    private func startRemoteForwards(on ssh: SSHSession) async throws(SSHFailure) {
        for forward in remoteForwards {
            let port: Int
            do {
                port = try await ssh.startRemoteForwarding(forward, onEvent: { event in
                    if case .openFailed(let origin, let reason) = event {
                        ShellRunner.notice("cf-access-tcp: -R \(forward): the connection from \(origin) could not be forwarded: \(reason)")
                    }
                })
            } catch {
                guard error.kind == .protocolError else { throw error }
                if exitOnForwardFailure {
                    throw SSHFailure(.protocolError, "Error: remote port forwarding failed for listen port \(forward.port) (ExitOnForwardFailure)")
                }
                if reportsForwards { say("Warning: remote port forwarding failed for listen port \(forward.port)") }
                continue
            }
            if forward.port == 0 && reportsForwards {
                say("Allocated port \(port) for remote forward to \(forward.host):\(forward.hostPort)")
            }
        }
    }

    /// Ends a connection: the destination's session (if any) with `description`, then the jump's
    /// link (if any), then the tunnel.
    private func finish(_ tunnel: AccessTunnel, _ session: SSHSession?, description: String = "disconnected by user") async {
        await session?.disconnect(description: description)
        await link?.close()
        link = nil
        await tunnel.disconnect()
    }

    /// The failure line: the library's message, with the flag that gets past an unknown host key
    /// when there was no terminal to ask.
    private func line(for failure: SSHFailure) -> String {
        if failure.kind == .hostKeyRejected && prompts.hostKeyQuestionUnasked {
            return "Host key verification failed: no terminal to ask; check the fingerprint and use --accept-new"
        }
        return failure.message
    }

    // MARK: Running

    /// A command (or, for nil, the login shell) without a pseudo-terminal.
    private func runCommand(_ command: String?, subsystem: String? = nil, tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        await conclude(tunnel: tunnel, session: session) { () async throws(SSHFailure) -> SSHChannelEnd in
            if let subsystem {
                return try await session.subsystem(subsystem, standardInput: .standardInput, standardOutput: .standardOutput,
                                                   standardError: .standardError, environment: sentEnvironment)
            }
            if let command {
                return try await session.exec(command, standardInput: .standardInput, standardOutput: .standardOutput,
                                              standardError: .standardError, environment: sentEnvironment)
            }
            return try await session.shell(standardInput: .standardInput, standardOutput: .standardOutput,
                                           standardError: .standardError, environment: sentEnvironment)
        }
    }

    /// Runs `work` (a channel, to its end), then ends the connection; the exit status of the
    /// channel's end, or of the failure to start it (said in one line).
    private func conclude(tunnel: AccessTunnel, session: SSHSession,
                          _ work: () async throws(SSHFailure) -> SSHChannelEnd) async -> Int32 {
        let end: SSHChannelEnd
        do {
            end = try await work()
        } catch {
            await finish(tunnel, session)
            say("cf-access-tcp: \(error.message)")
            return ExitStatus(error).rawValue
        }
        await finish(tunnel, session)
        return status(of: end)
    }

    private func status(of end: SSHChannelEnd) -> Int32 {
        switch end {
        case .exited(let status): return status
        case .signalled(let name):
            say("cf-access-tcp: the remote command was killed by signal \(name)")
            return ExitStatus.remoteSignal(name)
        case .closed: return ExitStatus.success.rawValue
        case .lost(let failure):
            say("cf-access-tcp: \(failure.message)")
            return ExitStatus(failure).rawValue
        case .localOutputFailed(let why):
            say("cf-access-tcp: cannot write the output: \(why)")
            return ExitStatus.localIO.rawValue
        case .outputClosed:
            // The reader went away (`… | head -1`): quietly, with ssh's status for it.
            return ExitStatus.outputClosedStatus
        }
    }

    /// `-W host:port`: stdin to a `direct-tcpip` channel, the channel to stdout, until either
    /// side ends; no reconnect (a connection carried for another program cannot be resumed).
    private func runStdioForward(host: String, port: Int, tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        await conclude(tunnel: tunnel, session: session) { () async throws(SSHFailure) -> SSHChannelEnd in
            let channel = try await session.openDirectTCPIP(host: host, port: port)
            return await channel.run(input: .standardInput, output: .standardOutput)
        }
    }

    /// `-N`: the forwards alone, until the connection is lost for good (reconnecting as an
    /// interactive session does) or a signal ends the run.
    private func runForwardsOnly(tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        var tunnel = tunnel
        var session = session
        var reconnection = SSHReconnection(policy: reconnect)
        while true {
            let end = await session.runForwards()
            let action = reconnection.channelEnded(end)
            guard case .lost(let failure) = end, case .reconnect = action else {
                await finish(tunnel, session)
                return status(of: end)
            }
            guard let reconnected = await reconnectAfterLoss(failure, closing: (tunnel, session), action: action,
                                                             reconnection: &reconnection, lineStart: "") else {
                return ExitStatus.connectionLost.rawValue
            }
            (tunnel, session) = reconnected
        }
    }

    /// After a lost connection: the lost session and tunnel closed, then new ones as `action` and
    /// the policy say, each attempt announced. The new pair, or nil once the last attempt failed (said in one line).
    private func reconnectAfterLoss(_ failure: SSHFailure, closing lost: (AccessTunnel, SSHSession),
                                    action: SSHReconnection.Action, reconnection: inout SSHReconnection,
                                    lineStart: String) async -> (AccessTunnel, SSHSession)? {
        let (lostTunnel, lostSession) = lost
        await finish(lostTunnel, lostSession, description: "connection lost")
        var action = action
        var last = Stop(message: failure.message, status: ExitStatus(failure))
        while case .reconnect(let attempt, let attempts, let delay) = action {
            say("\(lineStart)Connection lost — reconnecting (\(attempt)/\(attempts))…")
            try? await Task.sleep(for: delay)
            do {
                let reconnected = try await connect(first: false)
                reconnection.reconnected()
                say("Reconnected.")
                return reconnected
            } catch {
                last = error
                logger.info("reconnect attempt \(attempt) failed: \(error.message)")
                action = reconnection.attemptFailed()
            }
        }
        say("cf-access-tcp: Connection lost: could not reconnect after \(reconnection.attemptsMade) attempts: \(last.message)")
        return nil
    }

    /// A pseudo-terminal session: the local terminal (if stdin is one) in raw mode, its modes
    /// sent, and reconnects as the policy says.
    private func runInteractive(command: String?, tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        var tunnel = tunnel
        var session = session
        let term = environment["TERM"].flatMap { $0.isEmpty ? nil : $0 } ?? "xterm"
        let remoteCommand = command ?? tmux.map { "tmux new-session -A -s \($0)" }
        var reconnection = SSHReconnection(policy: reconnect)
        // The modes before raw mode: the remote terminal gets the local one's characters and flags.
        let modes = SSHTerminalModes(terminal: .standardInput) ?? .none
        if !session.terminalModesSent {
            let why = "terminal modes are not sent: \(session.engineName) cannot send them with a PTY request (libssh 0.11 can); "
                + "the remote terminal keeps the server's defaults"
            logger.debug("\(why)")
        }
        // -tt without a local terminal: the remote one only.
        let raw = RawTerminal(fd: 0)
        // From here the terminal is the session's: no log record may land in it (the plain
        // status lines only); --logfile keeps them.
        terminalLog?.mute(true)
        defer {
            raw?.restore()
            TerminalRestorer.forget()
        }
        let current = LockedBox<SSHInteractiveChannel?>(nil)
        let winch = handleInterrupts([SIGWINCH]) { _ in
            let size = terminalSize(0)
            current.withLock { $0 }?.resize(columns: size.columns, rows: size.rows)
        }
        defer { winch.forEach { $0.cancel() } }

        while true {
            let size = terminalSize(0)
            let channel: SSHInteractiveChannel
            do {
                channel = try await session.openShell(terminal: SSHTerminal(term: term, columns: size.columns, rows: size.rows,
                                                                            modes: modes),
                                                      command: remoteCommand, environment: sentEnvironment)
            } catch {
                raw?.restore()
                await finish(tunnel, session)
                say("cf-access-tcp: \(error.message)")
                return ExitStatus(error).rawValue
            }
            current.withLock { $0 = channel }
            // Escapes (~. ~? ~~) as in ssh, on a session with a terminal.
            let end = await channel.run(input: .standardInput, output: .standardOutput,
                                        escapes: escapeCharacter.map { SSHEscapes(escapeCharacter: $0) })
            current.withLock { $0 = nil }
            let action = reconnection.channelEnded(end)
            guard case .lost(let failure) = end, case .reconnect = action else {
                raw?.restore()
                await finish(tunnel, session)
                switch end {
                case .lost, .outputClosed: break
                default: progress("Connection to \(target.host) closed.")
                }
                // ~. (the one local close of a terminal session) ends with 255, as in ssh.
                if case .closed = end { return ExitStatus.escapeDisconnectStatus }
                return status(of: end)
            }
            raw?.restore()
            guard let reconnected = await reconnectAfterLoss(failure, closing: (tunnel, session), action: action,
                                                             reconnection: &reconnection, lineStart: "\r\n") else {
                return ExitStatus.connectionLost.rawValue
            }
            (tunnel, session) = reconnected
            raw?.enterRawAgain()
        }
    }
}

/// The way to a destination through a jump host: the jump's SSH session on the tunnel stream, a
/// `direct-tcpip` channel from it to the destination, and a socket pair whose one end the
/// channel is pumped to, the other carrying the destination's session (`descriptor`).
final class JumpLink: @unchecked Sendable {
    private let session: SSHSession
    private let channel: SSHInteractiveChannel
    private let pumped: Task<SSHChannelEnd, Never>
    private let ours: Int32
    /// The end the destination's session runs on (owned here).
    let descriptor: Int32

    private init(session: SSHSession, channel: SSHInteractiveChannel, ours: Int32, descriptor: Int32) {
        self.session = session
        self.channel = channel
        self.ours = ours
        self.descriptor = descriptor
        let end = FileDescriptor(rawValue: ours)
        pumped = Task { await channel.run(input: end, output: end) }
    }

    /// Logs in to the jump over `stream` (its host key checked, as for any host) and opens the
    /// channel to `destination`.
    static func open(_ jump: ShellRunner.Jump, over stream: TunnelStream, to destination: ShellTarget) async throws(SSHFailure) -> JumpLink {
        let session = try SSHSession(stream: stream, configuration: jump.session)
        do throws(SSHFailure) {
            try await session.handshake()
            try await session.authenticate(user: jump.target.user, delegate: jump.authentication)
            let channel = try await session.openDirectTCPIP(host: destination.host, port: destination.port)
            var ends: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
                channel.close()
                throw SSHFailure(.localIO, "cannot create a socket pair: \(SystemError.current().text)")
            }
            return JumpLink(session: session, channel: channel, ours: ends[0], descriptor: ends[1])
        } catch {
            await session.disconnect(description: "disconnected by user")
            throw SSHFailure(error.kind, "through the jump host \(jump.target.host): \(error.message)")
        }
    }

    /// Closes the destination's end, lets the channel finish (bounded), then the jump's session.
    func close() async {
        Glibc.close(descriptor)
        channel.endInput()
        let closing = Task {
            try? await Task.sleep(for: .seconds(2))
            channel.close()
        }
        _ = await pumped.value
        closing.cancel()
        await session.disconnect(description: "disconnected by user")
        Glibc.close(ours)
    }
}

