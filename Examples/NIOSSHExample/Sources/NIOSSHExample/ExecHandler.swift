// Runs one command on an SSH session channel and collects what it prints and how it ended.
import NIOCore
import NIOSSH

/// What a command printed and its exit status (128 + a signal number if a signal ended it, 255
/// if the server said neither).
struct CommandResult: Sendable {
    var standardOutput: [UInt8] = []
    var standardError: [UInt8] = []
    var exitStatus: Int32 = 255
}

/// Sends the `exec` request when the channel opens, sends EOF (the command gets no input), and
/// completes `finished` when the server closes the channel.
final class ExecHandler: ChannelInboundHandler {
    typealias InboundIn = SSHChannelData

    private let command: String
    private var finished: EventLoopPromise<CommandResult>?
    private var result = CommandResult()

    init(command: String, finished: EventLoopPromise<CommandResult>) {
        self.command = command
        self.finished = finished
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // The exit status comes after the server's EOF: keep the channel open for it.
        context.channel.setOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .whenFailure { [finished] error in finished?.fail(error) }
    }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        let request = SSHChannelRequestEvent.ExecRequest(command: command, wantReply: true)
        context.triggerUserOutboundEvent(request).whenComplete { result in
            switch result {
            case .success: channel.close(mode: .output, promise: nil)
            case .failure: channel.close(promise: nil)
            }
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let message = unwrapInboundIn(data)
        guard case .byteBuffer(let buffer) = message.data else { return }
        switch message.type {
        case .channel: result.standardOutput += buffer.readableBytesView
        case .stdErr: result.standardError += buffer.readableBytesView
        default: break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let status as SSHChannelRequestEvent.ExitStatus:
            result.exitStatus = Int32(truncatingIfNeeded: status.exitStatus)
        case let signal as SSHChannelRequestEvent.ExitSignal:
            result.exitStatus = 128 + (Self.signalNumbers[signal.signalName] ?? 0)
        case is ChannelFailureEvent:
            finished?.fail(ExampleError("the server refused to run the command"))
            finished = nil
            context.close(promise: nil)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finished?.succeed(result)
        finished = nil
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finished?.fail(ExampleError("the session channel closed before the command ended"))
        finished = nil
    }

    /// SSH names signals without "SIG" (RFC 4254 §6.10).
    private static let signalNumbers: [String: Int32] = [
        "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11,
        "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
    ]
}
