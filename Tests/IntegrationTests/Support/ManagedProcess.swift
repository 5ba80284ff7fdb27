// A child process with its output captured (posix_spawn), for fixtures and tests.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Processes

/// A child process with its output captured, for fixtures and tests.
///
/// stdout and stderr are drained continuously by background threads, so the
/// child never blocks on a full pipe. The child leads a process group of its
/// own; `terminate()` (and at the latest `deinit`) stops the whole group, so
/// no test leaks a process.
///
/// Built on `posix_spawn` rather than `Foundation.Process`: on Linux the
/// latter lets children spawned concurrently (Swift Testing runs tests in
/// parallel) inherit one another's descriptors, so a long-lived child such as
/// sshd keeps other children's pipes open and their exits unnoticed. Here
/// every descriptor the parent creates is close-on-exec and the child closes
/// all descriptors above 2 before it starts.
final class ManagedProcess: @unchecked Sendable {
    /// What the child reads as standard input.
    enum Input {
        /// `/dev/null`.
        case none
        /// These bytes, then end of file.
        case data(Data)
        /// A pipe the test writes with `writeStdin(_:)` and ends with `closeStdin()`.
        case pipe
        /// An existing file handle (a file, a socket, a `Pipe`'s read end).
        /// The child gets its own copy; the caller still owns the handle.
        case fileHandle(FileHandle)
    }

    let executable: URL
    let arguments: [String]
    /// The child's process id (and process group id).
    let pid: pid_t

    private let state: ProcessState

    /// Launches `executable` with `arguments`.
    ///
    /// - Parameters:
    ///   - environment: variables set on top of this process's environment.
    ///   - removingEnvironment: variables taken out of the inherited environment.
    ///   - stdin: what the child reads; `/dev/null` by default.
    ///   - workingDirectory: the child's current directory; this process's by default.
    ///   - retainStdout: keep stdout's bytes; when false only `stdoutByteCount`
    ///     grows (for transfers too large to hold in memory).
    init(
        _ executable: URL, _ arguments: [String],
        environment: [String: String] = [:], removingEnvironment: [String] = [],
        stdin: Input = .none, workingDirectory: URL? = nil, retainStdout: Bool = true
    ) throws {
        self.executable = executable
        self.arguments = arguments

        var childEnvironment = ProcessInfo.processInfo.environment
        for name in removingEnvironment { childEnvironment[name] = nil }
        childEnvironment.merge(environment) { _, new in new }

        // Every descriptor made here is close-on-exec; the child gets copies
        // on 0, 1 and 2 only. Those of ours that the child needs are closed
        // here once it runs (or once spawning failed).
        var toCloseAfterSpawn: [Int32] = []
        defer { toCloseAfterSpawn.forEach { _ = close($0) } }

        let stdoutPipe = try makePipe()
        toCloseAfterSpawn.append(stdoutPipe.write)
        let stderrPipe = try makePipe()
        toCloseAfterSpawn.append(stderrPipe.write)
        // Ours until the reader threads own them.
        var readEnds: [Int32]? = [stdoutPipe.read, stderrPipe.read]
        defer { readEnds?.forEach { _ = close($0) } }

        let childStdin: Int32
        var stdinWriteEnd: Int32?
        var stdinData: Data?
        switch stdin {
        case .none:
            childStdin = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard childStdin >= 0 else { throw FixtureError("open(/dev/null): \(errnoText())") }
            toCloseAfterSpawn.append(childStdin)
        case .data(let data):
            let pipe = try makePipe()
            childStdin = pipe.read
            toCloseAfterSpawn.append(pipe.read)
            stdinWriteEnd = pipe.write
            stdinData = data
        case .pipe:
            let pipe = try makePipe()
            childStdin = pipe.read
            toCloseAfterSpawn.append(pipe.read)
            stdinWriteEnd = pipe.write
        case .fileHandle(let handle):
            childStdin = handle.fileDescriptor
        }
        // Closes our stdin end if spawning fails; nil once it is handed on.
        var unclaimedStdinWriteEnd = stdinWriteEnd
        defer { unclaimedStdinWriteEnd.map { _ = close($0) } }

        let pid = try spawn(
            executable.path, arguments: [executable.path] + arguments,
            environment: childEnvironment.map { "\($0.key)=\($0.value)" },
            stdin: childStdin, stdout: stdoutPipe.write, stderr: stderrPipe.write,
            workingDirectory: workingDirectory?.path)

        self.pid = pid
        let ownedStdin = stdinData == nil ? stdinWriteEnd : nil
        unclaimedStdinWriteEnd = nil
        state = ProcessState(pid: pid, stdinWriteEnd: ownedStdin, retainStdout: retainStdout)
        state.startWaiter()
        state.startReader(.stdout, fd: stdoutPipe.read)
        state.startReader(.stderr, fd: stderrPipe.read)
        readEnds = nil
        if let stdinData, let stdinWriteEnd {
            let writer = Thread {
                writeAll(stdinWriteEnd, stdinData)
                close(stdinWriteEnd)
            }
            writer.name = "ManagedProcess stdin"
            writer.start()
        }
    }

    deinit {
        terminate()
    }

    /// Whether the child has not exited yet.
    var isRunning: Bool { state.exitStatus == nil }

    /// The exit status (128 + the signal number if a signal ended the child);
    /// nil while it runs.
    var exitStatus: Int32? { state.exitStatus }

    /// Everything the child wrote to stdout so far (empty unless `retainStdout`).
    var stdoutData: Data { state.snapshot(.stdout) }
    /// How many bytes the child wrote to stdout so far.
    var stdoutByteCount: Int { state.stdoutByteCount }
    /// Everything the child wrote to stderr so far.
    var stderrData: Data { state.snapshot(.stderr) }
    /// stdout so far, decoded as UTF-8 (invalid bytes replaced).
    var stdoutText: String { String(decoding: stdoutData, as: UTF8.self) }
    /// stderr so far, decoded as UTF-8 (invalid bytes replaced).
    var stderrText: String { String(decoding: stderrData, as: UTF8.self) }

    /// Waits for a complete stdout line starting with `prefix` and returns it
    /// (without the line break). Throws, with the output so far, if the child
    /// closes stdout or exits first, or after `timeout` seconds.
    func waitForLine(matching prefix: String, timeout: TimeInterval) throws -> String {
        try state.wait(
            on: .stdout, timeout: timeout, for: "a stdout line starting with \"\(prefix)\"", of: description
        ) { data, _, closed in
            completeLines(data, includingUnterminated: closed).first { $0.hasPrefix(prefix) }
        }
    }

    /// Waits until stderr contains `text` and returns stderr so far. Throws,
    /// with the output so far, if the child closes stderr or exits first, or
    /// after `timeout` seconds.
    @discardableResult
    func waitForStderr(containing text: String, timeout: TimeInterval) throws -> String {
        try state.wait(on: .stderr, timeout: timeout, for: "\"\(text)\" on stderr", of: description) { data, _, _ in
            let decoded = String(decoding: data, as: UTF8.self)
            return decoded.contains(text) ? decoded : nil
        }
    }

    /// Waits until at least `count` bytes arrived on stdout and returns all of
    /// stdout so far (empty unless `retainStdout`). Throws if the child closes
    /// stdout or exits first, or after `timeout` seconds.
    @discardableResult
    func waitForStdout(byteCount count: Int, timeout: TimeInterval) throws -> Data {
        try state.wait(on: .stdout, timeout: timeout, for: "\(count) bytes on stdout", of: description) {
            data, total, _ in
            total >= count ? data : nil
        }
    }

    /// Waits for the child to exit and returns its exit status (128 + the
    /// signal number if a signal ended it). Output still in flight is
    /// collected for up to 2 s after the exit. On timeout the child is
    /// terminated and an error with its output is thrown.
    @discardableResult
    func waitForExit(timeout: TimeInterval) throws -> Int32 {
        guard let status = state.waitForExit(until: Date(timeIntervalSinceNow: timeout)) else {
            terminate()
            throw FixtureError("\(description) did not exit within \(timeout) s and was killed\n" + outputReport())
        }
        state.waitForOutputToClose(until: Date(timeIntervalSinceNow: 2))
        return status
    }

    /// Writes `data` to the child's stdin. Only for `stdin: .pipe`. Blocks
    /// while the pipe is full; fails (EPIPE) once the child closed its stdin.
    func writeStdin(_ data: Data) throws {
        try state.writeStdin(data, of: description)
    }

    /// Closes the child's stdin so it reads end of file. Only for `stdin: .pipe`.
    func closeStdin() {
        state.closeStdin()
    }

    /// Sends `signalNumber` to the child's process group while the child runs.
    func send(signal signalNumber: Int32) {
        state.signalGroup(signalNumber, onlyWhileRunning: true)
    }

    /// Stops the child: SIGTERM to its process group, then SIGKILL if it is
    /// still running after 2 s; then SIGKILL to whatever is left in the
    /// group. Idempotent; returns at once when there is nothing to stop.
    func terminate() {
        if isRunning {
            send(signal: SIGTERM)
            if state.waitForExit(until: Date(timeIntervalSinceNow: 2)) == nil {
                send(signal: SIGKILL)
                _ = state.waitForExit(until: Date(timeIntervalSinceNow: 10))
            }
        }
        state.signalGroup(SIGKILL, onlyWhileRunning: false)
        closeStdin()
    }

    /// The child as a command line, for messages.
    var description: String {
        ([executable.lastPathComponent] + arguments).joined(separator: " ")
    }

    /// stdout and stderr so far, labelled, for error messages.
    func outputReport() -> String {
        "--- stdout of \(executable.lastPathComponent) ---\n\(stdoutText)\n"
            + "--- stderr of \(executable.lastPathComponent) ---\n\(stderrText)"
    }
}

private enum OutputStream: CustomStringConvertible {
    case stdout, stderr

    var description: String { self == .stdout ? "stdout" : "stderr" }
}

/// What the reader and waiter threads share with a `ManagedProcess`. They
/// hold this, not the `ManagedProcess`, so dropping the last reference to a
/// `ManagedProcess` still runs its `deinit`.
private final class ProcessState: @unchecked Sendable {
    private let pid: pid_t
    private let condition = NSCondition()
    private let retainStdout: Bool
    private var stdout = Data()
    private var stdoutCount = 0
    private var stderr = Data()
    private var stdoutClosed = false
    private var stderrClosed = false
    private var status: Int32?
    private var exitedAt: Date?
    private var groupKilled = false

    /// Serializes writes to and the closing of `stdinWriteEnd`.
    private let stdinLock = NSLock()
    private var stdinWriteEnd: Int32?

    init(pid: pid_t, stdinWriteEnd: Int32?, retainStdout: Bool) {
        self.pid = pid
        self.stdinWriteEnd = stdinWriteEnd
        self.retainStdout = retainStdout
    }

    deinit {
        stdinWriteEnd.map { _ = close($0) }
    }

    var exitStatus: Int32? {
        condition.lock()
        defer { condition.unlock() }
        return status
    }

    var stdoutByteCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return stdoutCount
    }

    func snapshot(_ stream: OutputStream) -> Data {
        condition.lock()
        defer { condition.unlock() }
        return stream == .stdout ? stdout : stderr
    }

    /// Waits for the child to exit without reaping it, then reaps it under
    /// the lock. Until then the pid cannot be reused, so signalling it while
    /// `status` is nil (under the lock) can only reach our child.
    func startWaiter() {
        let thread = Thread { [self] in
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
            condition.lock()
            var raw: Int32 = 0
            var reaped: pid_t
            repeat { reaped = waitpid(pid, &raw, 0) } while reaped < 0 && errno == EINTR
            if reaped != pid {
                status = -1  // Someone else reaped it (SIGCHLD ignored?): the status is lost.
            } else if raw & 0x7f == 0 {
                status = (raw >> 8) & 0xff
            } else {
                status = 128 + (raw & 0x7f)
            }
            exitedAt = Date()
            condition.broadcast()
            condition.unlock()
        }
        thread.name = "ManagedProcess waitpid \(pid)"
        thread.start()
    }

    /// Drains `fd` into the stream's buffer until end of file, then closes it.
    func startReader(_ stream: OutputStream, fd: Int32) {
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                condition.lock()
                if count > 0 {
                    if stream == .stdout {
                        stdoutCount += count
                        if retainStdout { stdout.append(contentsOf: buffer[0..<count]) }
                    } else {
                        stderr.append(contentsOf: buffer[0..<count])
                    }
                } else if stream == .stdout {
                    stdoutClosed = true
                } else {
                    stderrClosed = true
                }
                condition.broadcast()
                condition.unlock()
                if count <= 0 { break }
            }
            close(fd)
        }
        thread.name = "ManagedProcess \(stream) \(pid)"
        thread.start()
    }

    /// Signals the child's process group: while the child runs only, or also
    /// afterwards (once) to clear out what it left behind in its group.
    func signalGroup(_ signalNumber: Int32, onlyWhileRunning: Bool) {
        condition.lock()
        defer { condition.unlock() }
        if status == nil {
            _ = kill(-pid, signalNumber)
        } else if !onlyWhileRunning && !groupKilled {
            groupKilled = true
            _ = kill(-pid, signalNumber)
        }
    }

    /// Waits until `check` returns a value for the stream's bytes so far, its
    /// byte count and whether it is closed. Gives up when the stream is closed
    /// (or the child exited more than a second ago) without a match, or at
    /// the deadline.
    func wait<T>(
        on stream: OutputStream, timeout: TimeInterval, for what: String, of process: String,
        _ check: (Data, Int, Bool) -> T?
    ) throws -> T {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            let data = stream == .stdout ? stdout : stderr
            let count = stream == .stdout ? stdoutCount : stderr.count
            let closed = stream == .stdout ? stdoutClosed : stderrClosed
            if let found = check(data, count, closed) { return found }
            let lingered = exitedAt.map { Date().timeIntervalSince($0) > 1 } ?? false
            if closed || lingered {
                let how = status.map { "exited with status \($0)" } ?? "closed its \(stream)"
                throw FixtureError("\(process) \(how) before \(what)\n" + report())
            }
            if Date() >= deadline {
                throw FixtureError("no \(what) from \(process) within \(timeout) s\n" + report())
            }
            // Wake at least every 0.25 s to notice a child that exited while
            // something else keeps its output open.
            _ = condition.wait(until: min(deadline, Date(timeIntervalSinceNow: 0.25)))
        }
    }

    /// The exit status, waiting for it until `deadline`; nil if still running.
    func waitForExit(until deadline: Date) -> Int32? {
        condition.lock()
        defer { condition.unlock() }
        while status == nil && condition.wait(until: deadline) {}
        return status
    }

    /// Waits (bounded) for both output streams to reach end of file.
    func waitForOutputToClose(until deadline: Date) {
        condition.lock()
        defer { condition.unlock() }
        while !(stdoutClosed && stderrClosed) && condition.wait(until: deadline) {}
    }

    func writeStdin(_ data: Data, of process: String) throws {
        stdinLock.lock()
        defer { stdinLock.unlock() }
        guard let fd = stdinWriteEnd else {
            throw FixtureError("the stdin of \(process) is closed or was not launched as stdin: .pipe")
        }
        if let failure = writeAll(fd, data) {
            throw FixtureError("writing \(data.count) bytes to the stdin of \(process): \(failure)")
        }
    }

    func closeStdin() {
        stdinLock.lock()
        defer { stdinLock.unlock() }
        stdinWriteEnd.map { _ = close($0) }
        stdinWriteEnd = nil
    }

    /// Both buffers, labelled. Call with the lock held.
    private func report() -> String {
        "--- stdout ---\n\(String(decoding: stdout, as: UTF8.self))\n"
            + "--- stderr ---\n\(String(decoding: stderr, as: UTF8.self))"
    }
}
