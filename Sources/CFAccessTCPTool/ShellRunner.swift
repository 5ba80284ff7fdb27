import AccessCore
import AccessTransport
import CFAccessSSH
import CFAccessTCP
import Dispatch
import FoundationEssentials
import Logging
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
    let target: ShellTarget
    let settings: TunnelSettings
    let logger: Logger
    let environment: [String: String]
    let prompts: TerminalPrompts
    let authentication: SSHOrderedAuthentication
    let session: SSHSession.Configuration
    let command: String?
    let tmux: String?
    let reconnect: SSHReconnectPolicy
    /// `-t`: the command runs on a PTY, like the shell (but is never run again by a reconnect).
    let terminalCommand: Bool

    init(target: ShellTarget, settings: TunnelSettings, logger: Logger, environment: [String: String],
         prompts: TerminalPrompts, authentication: SSHOrderedAuthentication, session: SSHSession.Configuration,
         command: String?, tmux: String?, reconnect: SSHReconnectPolicy, terminalCommand: Bool) {
        self.target = target
        self.settings = settings
        self.logger = logger
        self.environment = environment
        self.prompts = prompts
        self.authentication = authentication
        self.session = session
        self.command = command
        self.tmux = tmux
        self.reconnect = reconnect
        self.terminalCommand = terminalCommand
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

    /// Opens the tunnel and the SSH session: handshake with the host-key check, then
    /// authentication, both by the library's policy.
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
        let ssh: SSHSession
        do {
            ssh = try SSHSession(stream: stream, configuration: session)
            try await ssh.handshake()
            try await ssh.authenticate(user: target.user, delegate: authentication)
        } catch {
            await tunnel.disconnect()
            throw Stop(message: line(for: error), status: ExitStatus(error))
        }
        if first { say("Connected to \(target.host).") }
        return (tunnel, ssh)
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

    private func runCommand(_ command: String, tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        let end: SSHChannelEnd
        do {
            end = try await session.exec(command, standardInput: .standardInput, standardOutput: .standardOutput,
                                         standardError: .standardError)
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
            return ExitStatus.remoteSignal(name)
        case .closed: return ExitStatus.success.rawValue
        case .lost(let failure):
            say("cf-access-tcp: \(failure.message)")
            return ExitStatus(failure).rawValue
        case .localOutputFailed(let why):
            say("cf-access-tcp: cannot write the output: \(why)")
            return ExitStatus.localIO.rawValue
        }
    }

    private func runInteractive(tunnel: AccessTunnel, session: SSHSession) async -> Int32 {
        var tunnel = tunnel
        var session = session
        let term = environment["TERM"].flatMap { $0.isEmpty ? nil : $0 } ?? "xterm"
        let remoteCommand = command ?? tmux.map { "tmux new-session -A -s \($0)" }
        var reconnection = SSHReconnection(policy: reconnect)
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
            let end = await channel.run(input: .standardInput, output: .standardOutput)
            current.withLock { $0 = nil }
            var action = reconnection.channelEnded(end)
            guard case .lost(let failure) = end, case .reconnect = action else {
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
            while case .reconnect(let attempt, let attempts, let delay) = action {
                say("\r\nConnection lost — reconnecting (\(attempt)/\(attempts))…")
                try? await Task.sleep(for: delay)
                do {
                    reconnected = try await connect(first: false)
                    reconnection.reconnected()
                    break
                } catch {
                    last = error
                    logger.info("reconnect attempt \(attempt) failed: \(error.message)")
                    action = reconnection.attemptFailed()
                }
            }
            guard let reconnected else {
                say("cf-access-tcp: Connection lost: could not reconnect after \(reconnection.attemptsMade) attempts: \(last.message)")
                return ExitStatus.connectionLost.rawValue
            }
            say("Reconnected.")
            (tunnel, session) = reconnected
            raw.enterRawAgain()
        }
    }
}
