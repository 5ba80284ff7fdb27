import AccessCore
import AccessTransport
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Stdio mode served on the carrier loop (ssh's ProxyCommand): when stdin and stdout are pipes
/// or sockets, the loop reads and writes them itself, with no socket pair and no copying
/// threads; anything else (a file, a terminal, /dev/null) still goes through `StdioBridge`.
/// These tests hold the child's stdin and stdout themselves, so that they can set the pipes'
/// size and the pace of reading, or close one end early.
@Suite("stdio mode on the carrier loop", .serialized, .ownThreads)
struct StdioOnLoopTests {
    @Test("pipes: 4 MiB echoed intact, no copying threads, then stdin's EOF ends the run with 0")
    func pipesEchoWithoutThreads() throws {
        let run = try StdioRun(.echo, extra: ["--half-close-linger", "1"])
        let child = run.child
        let count = 4 << 20
        let writer = PatternWriter(fd: run.stdin, count: count, closeWhenDone: true)
        let back = try readAll(run.stdout, expecting: count, timeout: 60)
        close(run.stdout)
        #expect(writer.wait() == count)
        #expect(back.count == count, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
        #expect(!child.threadNamesSeen.contains("cfat stdin"), "threads: \(child.threadNamesSeen)")
        #expect(!child.threadNamesSeen.contains("cfat stdout"), "threads: \(child.threadNamesSeen)")
        #expect(child.threadNamesSeen.contains { $0.hasPrefix("cfat carrier") }, "threads: \(child.threadNamesSeen)")
    }

    @Test("stdout's pipe grown to 256 KiB; a slow reader of it gets all 24 MiB of a download, in order, and the run exits 0")
    func slowReaderGetsEveryByte() throws {
        let count = 24 << 20
        let run = try StdioRun(.source, bytes: count, stdoutPipeBytes: 4096)
        let child = run.child
        // Small reads with pauses first (the loop's queue fills and reading the edge pauses), then
        // as fast as it comes.
        var back = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 1024)
        for _ in 0..<300 {
            let n = read(run.stdout, &chunk, chunk.count)
            if n <= 0 { break }
            back += chunk[..<n]
            usleep(2_000)
        }
        // The carrier grows the pipe before its dial (`LocalPair.pipeBytes`).
        #expect(fcntl(run.stdout, getPipeSize) == 256 << 10)
        back += try readAll(run.stdout, expecting: count - back.count, timeout: 120)
        close(run.stdout)
        close(run.stdin)
        #expect(back.count == count, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
    }

    @Test("stdin's pipe grown to 256 KiB; 24 MiB uploaded from a 4 KiB pipe come back whole and in order")
    func stdinPipeGrown() throws {
        let run = try StdioRun(.echo, extra: ["--half-close-linger", "1"], stdinPipeBytes: 4096)
        let child = run.child
        let count = 24 << 20
        let writer = PatternWriter(fd: run.stdin, count: count, closeWhenDone: true)
        let first = try readAll(run.stdout, expecting: 1 << 20, timeout: 60)
        // The carrier grows both pipes before its dial (`LocalPair.pipeBytes`); the writer still
        // holds its end.
        #expect(fcntl(run.stdin, getPipeSize) == 256 << 10)
        let back = try first + readAll(run.stdout, expecting: count - first.count, timeout: 120)
        close(run.stdout)
        #expect(writer.wait() == count)
        #expect(back.count == count, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
    }

    @Test("stdout's reader gone mid-download: one line, exit 74, not a hang")
    func stdoutReaderGone() throws {
        let run = try StdioRun(.source, bytes: 256 << 20)
        let child = run.child
        let first = try readAll(run.stdout, expecting: 1 << 20, timeout: 60)
        #expect(first.count == 1 << 20)
        close(run.stdout)
        let status = try child.waitForExit(timeout: 60)
        close(run.stdin)
        #expect(status == ExitStatus.localIO.rawValue, "\(child.stderrText)")
        #expect(child.stderrText == "cf-access-tcp: cannot write to stdout: Broken pipe; the tunnel to \(testHost) was closed\n")
    }

    @Test("stdout's reader gone while idle: no busy loop; stdin's EOF then ends the run at once, not after the linger")
    func stdoutReaderGoneWhileIdle() throws {
        let run = try StdioRun(.echo, extra: ["--half-close-linger", "60"])
        let child = run.child
        let request = Array("ping\n".utf8)
        #expect(write(run.stdin, request, request.count) == request.count)
        #expect(try readAll(run.stdout, expecting: request.count, timeout: 60) == request)
        close(run.stdout)
        // epoll reports the gone reader at every wait until the output leaves the set.
        usleep(200_000)
        let before = try child.cpuSeconds()
        sleep(2)
        let spent = try child.cpuSeconds() - before
        #expect(spent < 0.5, "the loop spun on stdout's error: \(spent) s of CPU in 2 s")
        close(run.stdin)
        // Nobody is left to read a reply: no 60 s linger.
        #expect(try child.waitForExit(timeout: 20) == 0, "\(child.stderrText)")
    }

    @Test("stdin's EOF first (the linger), then stdout's reader gone: the run ends at once, not after the linger")
    func stdoutReaderGoneDuringLinger() throws {
        let run = try StdioRun(.echo, extra: ["--half-close-linger", "60"])
        let child = run.child
        let request = Array("ping\n".utf8)
        #expect(write(run.stdin, request, request.count) == request.count)
        #expect(try readAll(run.stdout, expecting: request.count, timeout: 60) == request)
        close(run.stdin)
        usleep(300_000)
        #expect(child.isRunning, "the linger keeps the tunnel open for the reply: \(child.stderrText)")
        close(run.stdout)
        // Nobody is left to read a reply.
        #expect(try child.waitForExit(timeout: 20) == 0, "\(child.stderrText)")
    }

    @Test("stdin hangs up while its reading is paused: no busy loop, every byte still echoed, exit 0")
    func hangUpWhilePaused() throws {
        let run = try StdioRun(.echo, extra: ["--half-close-linger", "10"])
        let child = run.child
        // Nobody reads stdout: the echo backs up until the loop stops reading stdin, and stdin's
        // pipe stays full for a second. Then its writer (us) hangs up.
        let written = try fillUntilStalled(run.stdin, stall: 1.0, limit: 512 << 20)
        close(run.stdin)
        #expect(written > 0 && written < 512 << 20, "stdin never stalled (\(written) bytes)")
        let before = try child.cpuSeconds()
        sleep(2)
        let spent = try child.cpuSeconds() - before
        #expect(spent < 0.5, "the loop spun on the hang-up: \(spent) s of CPU in 2 s")
        let back = try readAll(run.stdout, expecting: written, timeout: 120)
        close(run.stdout)
        #expect(back.count == written, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
    }

    @Test("hostile edge (Python's TLS): a burst of frames of 1 byte to 64 KiB into an unread stdout pipe, then silence; every byte arrives once it is read", arguments: [0, 40])
    func burstIntoUnreadPipe(round: Int) throws {
        // Beyond the pipe and the bridge's queue, so that reading the edge pauses with bytes
        // received and not yet decrypted, and nothing on the socket announces them afterwards.
        let total = (1 << 20) + (256 << 10) + round * (96 << 10) + 4321
        let edge = try HostileEdge(mode: "burst-hold", extra: ["--burst-bytes", String(total)])
        let input = try makePipe(), output = try makePipe()
        let child = try StdioChild(try edge.clientArguments(), stdin: input.read, stdout: output.write)
        close(input.read)
        close(output.write)
        try edge.waitForEvent { $0 == "burst-sent \(total)" }
        usleep(300_000)
        let back = try readAll(output.read, expecting: total, timeout: 60)
        #expect(back.count == total, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(child.isRunning, "the edge holds the tunnel open: \(child.stderrText)")
        #expect(!child.threadNamesSeen.contains("cfat stdin"), "threads: \(child.threadNamesSeen)")
        close(output.read)
        close(input.write)
    }

    @Test("one socket as both stdin and stdout (inetd style): echo, half-close, the reply, EOF, exit 0")
    func oneSocketOnBoth() throws {
        let world = try EchoEdge()
        let edge = world.edge
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        let child = try StdioChild(try clientArguments(edge: edge, extra: ["--half-close-linger", "2"]),
                                   stdin: pair[1], stdout: pair[1])
        close(pair[1])
        let request = Array("over one socket\n".utf8)
        #expect(write(pair[0], request, request.count) == request.count)
        _ = shutdown(pair[0], Int32(SHUT_WR))
        let back = try readAll(pair[0], expecting: request.count + 1, timeout: 60)
        close(pair[0])
        #expect(back == request, "stderr: \(child.stderrText)")
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
        #expect(!child.threadNamesSeen.contains("cfat stdin"), "threads: \(child.threadNamesSeen)")
    }

    @Test("stdin a regular file: the threads copy it (epoll cannot watch a file), echoed whole, exit 0")
    func regularFileGoesThroughThreads() throws {
        let world = try EchoEdge()
        let edge = world.edge
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("cfat-stdin-\(getpid()).bin")
        let count = 1 << 20
        try Data(patternBytes(count)).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let stdin = open(file.path, O_RDONLY | O_CLOEXEC)
        let output = try makePipe()
        let child = try StdioChild(try clientArguments(edge: edge, extra: ["--half-close-linger", "2"]),
                                   stdin: stdin, stdout: output.write)
        close(stdin)
        close(output.write)
        let back = try readAll(output.read, expecting: count, timeout: 60)
        close(output.read)
        #expect(back.count == count, "stderr: \(child.stderrText)")
        #expect(firstPatternMismatch(back) == nil)
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderrText)")
        // The stdin thread may be done before a sample sees it; the stdout one lives to the end.
        #expect(child.threadNamesSeen.contains("cfat stdout"), "threads: \(child.threadNamesSeen)")
    }

    @Test("library: openStream(joining:) bridges the caller's pipes; the caller's own copies may close at once")
    func libraryJoinsPipes() async throws {
        let world = try EchoEdge()
        let edge = world.edge
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        var options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: edge.certs.caFile.path, connectTimeout: .seconds(60), retry: .never)
        options.halfCloseLinger = .seconds(1)
        let tunnel = AccessTunnel(options: options, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        let input = try makePipe(), output = try makePipe()
        let names = LocalNames(input: "the test's input", output: "the test's output")
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token),
                                                 joining: LocalPair(input: input.read, output: output.write, names: names))
        // The carrier works on duplicates: closing ours leaves the tunnel's.
        close(input.read)
        close(output.write)
        let count = 1 << 20
        let back = try await offPool {
            let writer = PatternWriter(fd: input.write, count: count, closeWhenDone: true)
            let back = try readAll(output.read, expecting: count + 1, timeout: 60)
            close(output.read)
            _ = writer.wait()
            return back
        }
        #expect(back.count == count, "EOF follows the last byte")
        #expect(firstPatternMismatch(back) == nil)
        let end = await stream.ended
        #expect(end.isClean, "\(end)")
        await tunnel.disconnect()
    }
}

// MARK: Helpers

/// An echo target and an edge in front of it (both stop when this goes).
private struct EchoEdge {
    let target: TargetFixture
    let edge: EdgeFixture

    init() throws {
        target = try TargetFixture(.echo)
        edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
    }
}

/// A target, an edge in front of it, and `cf-access-tcp` in stdio mode on two new pipes, of which
/// the test holds the other ends (and closes them).
private struct StdioRun {
    let target: TargetFixture
    let edge: EdgeFixture
    let child: StdioChild
    /// The write end of the child's stdin.
    let stdin: Int32
    /// The read end of the child's stdout.
    let stdout: Int32

    /// `stdinPipeBytes`, `stdoutPipeBytes`: the sizes the pipes are made before the child starts.
    init(_ mode: TargetFixture.Mode, bytes: Int? = nil, extra: [String] = [], stdinPipeBytes: Int32? = nil,
         stdoutPipeBytes: Int32? = nil) throws {
        target = try TargetFixture(mode, bytes: bytes)
        edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let input = try makePipe(), output = try makePipe()
        if let stdinPipeBytes { _ = fcntl(input.write, setPipeSize, stdinPipeBytes) }
        if let stdoutPipeBytes { _ = fcntl(output.write, setPipeSize, stdoutPipeBytes) }
        child = try StdioChild(try clientArguments(edge: edge, extra: extra), stdin: input.read, stdout: output.write)
        close(input.read)
        close(output.write)
        stdin = input.write
        stdout = output.read
    }
}

/// `F_SETPIPE_SZ` and `F_GETPIPE_SZ` (Linux), which Glibc's Swift module leaves out.
private let setPipeSize: Int32 = 1031
private let getPipeSize: Int32 = 1032

/// `byte i = i % 251`, the pattern of the `source` target.
private func patternBytes(_ count: Int, from offset: Int = 0) -> [UInt8] {
    (0..<count).map { UInt8((offset + $0) % 251) }
}

/// The offset of the first byte off the pattern, or nil.
private func firstPatternMismatch(_ bytes: [UInt8]) -> Int? {
    bytes.indices.first { Int(bytes[$0]) != $0 % 251 }
}

/// Reads `fd` until `count` bytes or EOF (or the deadline); what was read.
private func readAll(_ fd: Int32, expecting count: Int, timeout: TimeInterval) throws -> [UInt8] {
    let deadline = Date().addingTimeInterval(timeout)
    var bytes = [UInt8]()
    bytes.reserveCapacity(count)
    var chunk = [UInt8](repeating: 0, count: 256 << 10)
    while bytes.count < count {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let left = deadline.timeIntervalSinceNow
        guard left > 0 else { throw FixtureError("only \(bytes.count) of \(count) bytes within \(timeout) s") }
        guard poll(&entry, 1, Int32(min(left, 1) * 1000)) >= 0 || errno == EINTR else {
            throw FixtureError("poll: \(errnoText())")
        }
        guard entry.revents != 0 else { continue }
        let n = read(fd, &chunk, min(chunk.count, count - bytes.count))
        if n == 0 { break }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { continue }
            throw FixtureError("read: \(errnoText())")
        }
        bytes += chunk[..<n]
    }
    return bytes
}

/// Writes the pattern to a non-blocking `fd` until it takes nothing for `stall` seconds (or
/// `limit` bytes went); how many bytes went.
private func fillUntilStalled(_ fd: Int32, stall: TimeInterval, limit: Int) throws -> Int {
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    let block = patternBytes(251 * 256)
    var written = 0
    var lastProgress = Date()
    while written < limit, Date().timeIntervalSince(lastProgress) < stall {
        let start = written % block.count
        let n = block.withUnsafeBytes { write(fd, $0.baseAddress! + start, min(block.count - start, limit - written)) }
        if n > 0 {
            written += n
            lastProgress = Date()
        } else if n < 0 && errno != EAGAIN && errno != EINTR {
            throw FixtureError("write: \(errnoText())")
        } else {
            usleep(5_000)
        }
    }
    return written
}

/// Writes `count` bytes of the pattern to `fd` on a thread of its own (blocking writes).
private final class PatternWriter: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let written = LockedBox(0)

    init(fd: Int32, count: Int, closeWhenDone: Bool) {
        let block = patternBytes(251 * 256)
        Thread.detachNewThread { [done, written] in
            var sent = 0
            while sent < count {
                let start = sent % block.count
                let n = block.withUnsafeBytes { write(fd, $0.baseAddress! + start, min(block.count - start, count - sent)) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                sent += n
            }
            written.withLock { $0 = sent }
            if closeWhenDone { close(fd) }
            done.signal()
        }
    }

    /// Waits for the writer; how many bytes it wrote.
    func wait() -> Int {
        done.wait()
        return written.withLock { $0 }
    }
}

/// `cf-access-tcp` in stdio mode on descriptors the test holds (ManagedProcess reads the
/// child's stdout itself, at once): stderr goes to a file; the names of the child's threads are
/// sampled while it runs.
private final class StdioChild: @unchecked Sendable {
    let pid: pid_t
    private let stderrFile: URL
    private var status: Int32?
    private let names = LockedBox(Set<String>())
    private let sampling = LockedBox(true)

    init(_ arguments: [String], stdin: Int32, stdout: Int32) throws {
        let binary = try TestPaths.binary("cf-access-tcp").path
        stderrFile = FileManager.default.temporaryDirectory.appendingPathComponent("cfat-stdio-\(UUID().uuidString).err")
        let stderr = open(stderrFile.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard stderr >= 0 else { throw FixtureError("cannot create \(stderrFile.path): \(errnoText())") }
        defer { close(stderr) }
        let environment = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
        pid = try spawn(binary, arguments: [binary] + arguments, environment: environment,
                        stdin: stdin, stdout: stdout, stderr: stderr, workingDirectory: nil)
        let pid = self.pid
        Thread.detachNewThread { [names, sampling] in
            while sampling.withLock({ $0 }) {
                let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
                for task in tasks {
                    if let name = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8) {
                        let trimmed = name.trimmingCharacters(in: .whitespacesAndNewlines)
                        names.withLock { _ = $0.insert(trimmed) }
                    }
                }
                usleep(20_000)
            }
        }
    }

    deinit {
        sampling.withLock { $0 = false }
        if status == nil {
            kill(-pid, SIGKILL)
            var raw: Int32 = 0
            _ = waitpid(pid, &raw, 0)
        }
        try? FileManager.default.removeItem(at: stderrFile)
    }

    /// The child has not exited yet.
    var isRunning: Bool {
        if status != nil { return false }
        var raw: Int32 = 0
        let r = waitpid(pid, &raw, WNOHANG)
        if r == pid {
            sampling.withLock { $0 = false }
            status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
            return false
        }
        return true
    }

    /// The names of the threads seen so far (`/proc/PID/task/*/comm`).
    var threadNamesSeen: Set<String> { names.withLock { $0 } }

    var stderrText: String { (try? String(contentsOf: stderrFile, encoding: .utf8)) ?? "" }

    /// User and system CPU seconds of the child so far (`/proc/PID/stat`).
    func cpuSeconds() throws -> Double {
        let text = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
        guard let close = text.lastIndex(of: ")") else { throw FixtureError("cannot read /proc/\(pid)/stat") }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw FixtureError("cannot read the CPU times in /proc/\(pid)/stat")
        }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The exit status (128 + the signal for a signalled end), waiting at most `timeout`.
    func waitForExit(timeout: TimeInterval) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if !isRunning, let status { return status }
            if Date() >= deadline {
                throw FixtureError("cf-access-tcp did not exit within \(timeout) s; stderr: \(stderrText)")
            }
            usleep(20_000)
        }
    }
}
