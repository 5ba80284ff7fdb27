// Process, path and socket helpers for the integration tests.
//
// Plain Foundation + Glibc so the fixtures depend on nothing under test.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Errors

/// An integration-test fixture could not do its job. The message says what
/// went wrong and carries whatever output helps (a child's stderr, say).
struct FixtureError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Fails, with a clear message, unless a real part the integration tests need
/// (a tool, a test user, a running service) is present.
///
/// The integration tests never skip: a missing part is a failure, in CI
/// (`CI=true`) and on a developer's machine alike. `scripts/setup` installs
/// every part.
func requireRealPart(_ condition: Bool, _ what: String) throws {
    if condition { return }
    let ci = ProcessInfo.processInfo.environment["CI"] == "true" ? " (CI)" : ""
    throw FixtureError(
        "missing real part\(ci): \(what). Run scripts/setup to install it; "
            + "integration tests fail rather than skip when a part is missing.")
}

// MARK: - Paths

/// Where the built products live.
enum TestPaths {
    /// The directory holding the built `cf-access-tcp` and `cf-access-edge`.
    ///
    /// `CF_ACCESS_TCP_BIN_DIR` overrides it. Otherwise it is the directory of
    /// the running test executable: on Linux the test bundle
    /// `.build/<config>/cf-access-tcpPackageTests.xctest` is an executable in
    /// the same directory as the package's products.
    static var binDir: URL {
        if let override = ProcessInfo.processInfo.environment["CF_ACCESS_TCP_BIN_DIR"],
            !override.isEmpty
        {
            return URL(fileURLWithPath: override, isDirectory: true).standardizedFileURL
        }
        return runningExecutable.deletingLastPathComponent()
    }

    /// The built product `name` in `binDir`; throws if it is not there.
    static func binary(_ name: String) throws -> URL {
        let url = binDir.appendingPathComponent(name)
        guard isExecutableFile(url.path) else {
            throw FixtureError(
                "built product '\(name)' not found at \(url.path); build it with `swift build` "
                    + "(or point CF_ACCESS_TCP_BIN_DIR at the directory holding it)")
        }
        return url
    }

    /// The running executable, with symbolic links resolved.
    private static var runningExecutable: URL {
        if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: resolved)
        }
        let argv0 = CommandLine.arguments.first ?? "."
        let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
        return URL(fileURLWithPath: argv0, relativeTo: cwd).standardizedFileURL.resolvingSymlinksInPath()
    }
}

/// Whether `path` names a regular file this process may execute.
private func isExecutableFile(_ path: String) -> Bool {
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        && !isDirectory.boolValue && access(path, X_OK) == 0
}

/// The full path of `tool`, looked up in `PATH` and then in `/usr/sbin` and
/// `/sbin` (where `sshd` lives); nil if it is nowhere. A `tool` containing a
/// slash is taken as a path.
func which(_ tool: String) -> String? {
    if tool.contains("/") {
        return isExecutableFile(tool) ? tool : nil
    }
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
    for directory in directories where !directory.isEmpty {
        let candidate = directory + "/" + tool
        if isExecutableFile(candidate) {
            return candidate
        }
    }
    return nil
}

/// A new, empty, private (0700) directory under the temporary directory,
/// named `<prefix>.XXXXXX`. The caller removes it.
func makeTempDir(_ prefix: String) throws -> URL {
    let base = FileManager.default.temporaryDirectory.path
    var template = Array((base + "/" + prefix + ".XXXXXX").utf8CString)
    let created = template.withUnsafeMutableBufferPointer { buffer -> Bool in
        mkdtemp(buffer.baseAddress!) != nil
    }
    guard created else {
        throw FixtureError("mkdtemp under \(base) failed: \(String(cString: strerror(errno)))")
    }
    let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    return URL(fileURLWithPath: path, isDirectory: true)
}

// MARK: - Sockets

/// A TCP port on 127.0.0.1 that was free a moment ago: binds port 0, reads
/// the port the kernel chose, and closes the socket. Another process may take
/// it before the caller does; callers that can should retry on "in use".
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FixtureError("socket(): \(String(cString: strerror(errno)))") }
    defer { close(fd) }

    var address = loopbackAddress(port: 0)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard bound == 0 else { throw FixtureError("bind(127.0.0.1:0): \(String(cString: strerror(errno)))") }

    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let named = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    guard named == 0 else { throw FixtureError("getsockname(): \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Whether something accepts TCP connections on 127.0.0.1:`port` right now.
/// The connection is closed at once.
func loopbackPortAccepts(_ port: Int) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = loopbackAddress(port: port)
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    return connected == 0
}

private func loopbackAddress(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
    return address
}

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

// MARK: Process plumbing

private func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}

/// A pipe whose both ends are close-on-exec.
private func makePipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { throw FixtureError("pipe(): \(errnoText())") }
    _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    return (fds[0], fds[1])
}

private typealias SpawnAddClosefrom = @convention(c) (
    UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32
) -> Int32
private typealias SpawnAddChdir = @convention(c) (
    UnsafeMutablePointer<posix_spawn_file_actions_t>?, UnsafePointer<CChar>?
) -> Int32

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+) and
/// `…_addchdir_np` (2.29+), looked up at run time: Swift's Glibc module
/// leaves these GNU extensions out.
private struct SpawnExtensions: @unchecked Sendable {
    let addClosefrom: SpawnAddClosefrom?
    let addChdir: SpawnAddChdir?

    static let shared: SpawnExtensions = {
        let handle = dlopen(nil, RTLD_NOW)
        let closefrom = dlsym(handle, "posix_spawn_file_actions_addclosefrom_np")
        let chdir = dlsym(handle, "posix_spawn_file_actions_addchdir_np")
        return SpawnExtensions(
            addClosefrom: closefrom.map { unsafeBitCast($0, to: SpawnAddClosefrom.self) },
            addChdir: chdir.map { unsafeBitCast($0, to: SpawnAddChdir.self) })
    }()
}

/// Spawns `path` as the leader of a new process group, with `stdin`,
/// `stdout` and `stderr` on 0, 1 and 2, every other descriptor closed, an
/// empty signal mask and default signal dispositions.
private func spawn(
    _ path: String, arguments: [String], environment: [String],
    stdin: Int32, stdout: Int32, stderr: Int32, workingDirectory: String?
) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    // dup2 clears close-on-exec on the copy.
    posix_spawn_file_actions_adddup2(&actions, stdin, 0)
    posix_spawn_file_actions_adddup2(&actions, stdout, 1)
    posix_spawn_file_actions_adddup2(&actions, stderr, 2)
    if let addClosefrom = SpawnExtensions.shared.addClosefrom {
        _ = addClosefrom(&actions, 3)
    }
    if let workingDirectory {
        guard let addChdir = SpawnExtensions.shared.addChdir else {
            throw FixtureError("this C library cannot set a child's working directory")
        }
        _ = workingDirectory.withCString { addChdir(&actions, $0) }
    }

    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    posix_spawnattr_setpgroup(&attributes, 0)
    var emptyMask = sigset_t()
    sigemptyset(&emptyMask)
    posix_spawnattr_setsigmask(&attributes, &emptyMask)
    var defaults = sigset_t()
    sigemptyset(&defaults)
    for number in [SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2] {
        sigaddset(&defaults, number)
    }
    posix_spawnattr_setsigdefault(&attributes, &defaults)

    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup($0) } + [nil]
    defer {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
    }
    var pid: pid_t = 0
    let result = argv.withUnsafeBufferPointer { argvBuffer in
        envp.withUnsafeBufferPointer { envpBuffer in
            posix_spawn(&pid, path, &actions, &attributes, argvBuffer.baseAddress!, envpBuffer.baseAddress!)
        }
    }
    guard result == 0 else {
        throw FixtureError("could not launch \(path): \(errnoText(result))")
    }
    return pid
}

/// The lines of `data` that end in a line break (and the unterminated rest,
/// if asked), without their line breaks.
private func completeLines(_ data: Data, includingUnterminated: Bool) -> [String] {
    var lines: [String] = []
    var start = data.startIndex
    for index in data.indices where data[index] == UInt8(ascii: "\n") {
        var line = String(decoding: data[start..<index], as: UTF8.self)
        if line.hasSuffix("\r") { line.removeLast() }
        lines.append(line)
        start = data.index(after: index)
    }
    if includingUnterminated && start < data.endIndex {
        lines.append(String(decoding: data[start...], as: UTF8.self))
    }
    return lines
}

/// Writes all of `data` to `fd`; returns a description of the failure, or nil.
///
/// SIGPIPE is blocked on the calling thread meanwhile (and a SIGPIPE the
/// write raised is consumed), so writing to a child that closed its stdin
/// fails with EPIPE instead of killing the test process.
@discardableResult
private func writeAll(_ fd: Int32, _ data: Data) -> String? {
    var pipeSignal = sigset_t()
    sigemptyset(&pipeSignal)
    sigaddset(&pipeSignal, SIGPIPE)
    var previousMask = sigset_t()
    pthread_sigmask(SIG_BLOCK, &pipeSignal, &previousMask)
    var pending = sigset_t()
    sigpending(&pending)
    let wasPending = sigismember(&pending, SIGPIPE) == 1
    defer {
        if !wasPending {
            var zero = timespec(tv_sec: 0, tv_nsec: 0)
            while sigtimedwait(&pipeSignal, nil, &zero) == SIGPIPE {}
        }
        pthread_sigmask(SIG_SETMASK, &previousMask, nil)
    }

    return data.withUnsafeBytes { bytes -> String? in
        var offset = 0
        while offset < bytes.count {
            let written = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return errnoText()
            }
            offset += written
        }
        return nil
    }
}

/// Runs `executable` to completion, bounded by `timeout` seconds (after which
/// it is killed and an error with its output is thrown), and returns its exit
/// status and output.
func run(
    _ executable: URL, _ arguments: [String], env: [String: String] = [:],
    stdin: Data? = nil, timeout: TimeInterval = 60
) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = try ManagedProcess(
        executable, arguments, environment: env, stdin: stdin.map { .data($0) } ?? .none)
    let status = try process.waitForExit(timeout: timeout)
    return (status, process.stdoutText, process.stderrText)
}

/// Runs the tool at `path` (or, without a slash, found by `which`) to
/// completion; see `run(_:_:env:stdin:timeout:)` taking a URL.
func run(
    _ path: String, _ arguments: [String], env: [String: String] = [:],
    stdin: Data? = nil, timeout: TimeInterval = 60
) throws -> (status: Int32, stdout: String, stderr: String) {
    guard let resolved = which(path) else {
        throw FixtureError("'\(path)' not found in PATH, /usr/sbin or /sbin; run scripts/setup")
    }
    return try run(URL(fileURLWithPath: resolved), arguments, env: env, stdin: stdin, timeout: timeout)
}
