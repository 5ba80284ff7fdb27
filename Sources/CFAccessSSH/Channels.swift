import FoundationEssentials
import SystemPackage

/// What the channel calls of ``SSHSession`` need of an engine: its session thread, a session
/// channel opened and started, and the pump that runs a channel with the session's forwards.
/// The calls themselves (exec, shell, openShell, the forwards) are written once, below, for
/// both engines.
protocol PumpingSession: AnyObject, Sendable {
    /// A started channel, handed from the session's thread to a caller and back.
    associatedtype Channel: Sendable

    /// Runs `body` on the session's thread and returns its result.
    func onThread<T: Sendable>(_ body: @escaping @Sendable (Self) throws(SSHFailure) -> T) async throws(SSHFailure) -> T
    /// Opens a session channel and starts `command` (exec) or a shell, with a PTY if `terminal`,
    /// after asking for `environment`. On the session's thread.
    func openChannel(command: String?, terminal: SSHTerminal?, environment: [String: String]) throws(SSHFailure) -> Channel
    /// Runs `channel` (nil: only the forwards) until it ends; frees it. On the session's thread.
    func pump(channel: Channel?, input: Int32?, sink: @escaping OutputSink, control: ChannelControl,
              escapes: SSHEscapes?) -> SSHChannelEnd
    /// Adds a listener to the forwards the pump serves. On the session's thread.
    func addForward(_ listener: SSHForwardListener)
}

extension PumpingSession {
    /// ``SSHSession/exec(_:input:environment:)``.
    func exec(_ command: String, input: Data, environment: [String: String]) async throws(SSHFailure) -> SSHExecResult {
        let collector = OutputCollector()
        let end = try await onThread { session throws(SSHFailure) -> SSHChannelEnd in
            let channel = try session.openChannel(command: command, terminal: nil, environment: environment)
            let control = try ChannelControl()
            if !input.isEmpty { control.post(.write(input)) }
            control.post(.endOfInput)
            return session.pump(channel: channel, input: nil, sink: collector.sink, control: control, escapes: nil)
        }
        if case .lost(let failure) = end { throw failure }
        return collector.result(end: end)
    }

    /// ``SSHSession/exec(_:standardInput:standardOutput:standardError:environment:)``.
    func exec(_ command: String, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
              standardError: FileDescriptor, environment: [String: String]) async throws(SSHFailure) -> SSHChannelEnd {
        try await run(command: command, standardInput: standardInput, standardOutput: standardOutput,
                      standardError: standardError, environment: environment)
    }

    /// ``SSHSession/shell(standardInput:standardOutput:standardError:environment:)``.
    func shell(standardInput: FileDescriptor?, standardOutput: FileDescriptor, standardError: FileDescriptor,
               environment: [String: String]) async throws(SSHFailure) -> SSHChannelEnd {
        try await run(command: nil, standardInput: standardInput, standardOutput: standardOutput,
                      standardError: standardError, environment: environment)
    }

    private func run(command: String?, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
                     standardError: FileDescriptor, environment: [String: String]) async throws(SSHFailure) -> SSHChannelEnd {
        let input = standardInput?.rawValue
        let (output, error) = (standardOutput.rawValue, standardError.rawValue)
        return try await onThread { session throws(SSHFailure) -> SSHChannelEnd in
            let channel = try session.openChannel(command: command, terminal: nil, environment: environment)
            let control = try ChannelControl()
            if input == nil { control.post(.endOfInput) }
            return session.pump(channel: channel, input: input, sink: descriptorSink(output: output, error: error),
                                control: control, escapes: nil)
        }
    }

    /// ``SSHSession/openShell(terminal:command:environment:)``.
    func openShell(terminal: SSHTerminal, command: String?, environment: [String: String]) async throws(SSHFailure)
        -> any InteractiveChannelEngine {
        let control = try ChannelControl()
        let channel = try await onThread { session throws(SSHFailure) -> Channel in
            try session.openChannel(command: command, terminal: terminal, environment: environment)
        }
        return PumpedInteractiveChannel(session: self, channel: channel, control: control)
    }

    /// ``SSHSession/startForwarding(_:)``.
    func startForwarding(_ listener: SSHForwardListener) async throws(SSHFailure) {
        try await onThread { session in session.addForward(listener) }
    }

    /// ``SSHSession/runForwards()``.
    func runForwards() async -> SSHChannelEnd {
        let control: ChannelControl
        do {
            control = try ChannelControl()
        } catch {
            return .lost(error)
        }
        return await withTaskCancellationHandler {
            do throws(SSHFailure) {
                return try await onThread { session in
                    session.pump(channel: nil, input: nil, sink: { _, _ in true }, control: control, escapes: nil)
                }
            } catch {
                return .lost(error)
            }
        } onCancel: {
            control.post(.close)
        }
    }
}

/// An opened interactive channel of either engine: posts go to its control pipe, `run` pumps it
/// on the session's thread.
final class PumpedInteractiveChannel<Session: PumpingSession>: InteractiveChannelEngine {
    private let session: Session
    private let channel: Session.Channel
    private let control: ChannelControl

    init(session: Session, channel: Session.Channel, control: ChannelControl) {
        self.session = session
        self.channel = channel
        self.control = control
    }

    func resize(columns: Int, rows: Int) {
        control.post(.resize(columns: columns, rows: rows))
    }

    func write(_ data: Data) {
        control.post(.write(data))
    }

    func endInput() {
        control.post(.endOfInput)
    }

    func close() {
        control.post(.close)
    }

    func run(input: FileDescriptor?, output: FileDescriptor, escapes: SSHEscapes?) async -> SSHChannelEnd {
        let channel = self.channel
        let control = self.control
        let (input, output) = (input?.rawValue, output.rawValue)
        do {
            return try await session.onThread { session in
                session.pump(channel: channel, input: input, sink: descriptorSink(output: output, error: output),
                             control: control, escapes: escapes)
            }
        } catch {
            return .lost(error)
        }
    }

    func run(onOutput: @escaping @Sendable (Data) -> Void) async -> SSHChannelEnd {
        let channel = self.channel
        let control = self.control
        do {
            return try await session.onThread { session in
                session.pump(channel: channel, input: nil, sink: { _, bytes in onOutput(Data(bytes)); return true },
                             control: control, escapes: nil)
            }
        } catch {
            return .lost(error)
        }
    }
}
