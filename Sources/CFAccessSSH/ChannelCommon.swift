import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

// What both SSH engines' channel pumps share: posted commands, output sinks, byte buffers.

/// Requests other threads post to a running channel; a byte on a pipe wakes the pump's poll.
final class ChannelControl: @unchecked Sendable {
    enum Command {
        case write(Data)
        case endOfInput
        case resize(columns: Int, rows: Int)
        case close
    }

    private let pending = LockedBox<[Command]>([])
    let readEnd: Int32
    private let writeEnd: Int32

    init() throws(SSHFailure) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw SSHFailure(.localIO, "cannot create a pipe: \(SystemError.current().text)")
        }
        for end in fds {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Queues `command` and wakes the pump.
    func post(_ command: Command) {
        pending.withLock { $0.append(command) }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Takes the queued commands; reads the wake-up bytes when the pipe was found readable
    /// (only then: an empty pipe costs no syscall per round).
    func drain(pipeReadable: Bool) -> [Command] {
        if pipeReadable {
            var scratch = [UInt8](repeating: 0, count: 64)
            while read(readEnd, &scratch, scratch.count) > 0 {}
        }
        return pending.withLock { queue in
            defer { queue = [] }
            return queue
        }
    }
}

/// Where a channel's output goes: (stream 0 = stdout, 1 = stderr, bytes) -> written?
typealias OutputSink = @Sendable (Int32, UnsafeRawBufferPointer) -> Bool

/// A sink writing stdout and stderr to two descriptors.
func descriptorSink(output: Int32, error: Int32) -> OutputSink {
    { stream, bytes in FileDescriptors.write(all: bytes, to: stream == 0 ? output : error).map { errno = $0 } == nil }
}

/// Collects a command's output in memory.
final class OutputCollector: Sendable {
    private let collected = LockedBox((output: Data(), error: Data()))

    var sink: OutputSink {
        { [collected] stream, bytes in
            collected.withLock { c in
                if stream == 0 { c.output.append(contentsOf: bytes) } else { c.error.append(contentsOf: bytes) }
            }
            return true
        }
    }

    func result(end: SSHChannelEnd) -> SSHExecResult {
        collected.withLock { SSHExecResult(standardOutput: $0.output, standardError: $0.error, end: end) }
    }
}

/// A FIFO of bytes with a moving start: appends at the end, consumes from the front without
/// shifting what is left each time.
struct PumpBuffer {
    private var storage: [UInt8] = []
    private var start = 0

    var count: Int { storage.count - start }
    var isEmpty: Bool { start == storage.count }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        if start > 0 && (start == storage.count || start >= 64 * 1024 && start * 2 >= storage.count) {
            storage.removeFirst(start)
            start = 0
        }
        storage.append(contentsOf: bytes)
    }

    mutating func append(_ data: Data) {
        data.withUnsafeBytes { append($0) }
    }

    /// Hands the unconsumed bytes to `body`, which returns how many it took.
    mutating func consume(_ body: (UnsafeRawBufferPointer) -> Int) -> Int {
        guard !isEmpty else { return 0 }
        let taken = storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
        if taken > 0 {
            start += taken
            if start == storage.count {
                storage.removeAll(keepingCapacity: storage.capacity <= 1 << 20)
                start = 0
            }
        }
        return taken
    }
}
