// The plumbing under ManagedProcess: pipes, posix_spawn with glibc extensions, line splitting, writes.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

func errnoText(_ code: Int32 = errno) -> String {
    String(cString: strerror(code))
}

/// A pipe whose both ends are close-on-exec.
func makePipe() throws -> (read: Int32, write: Int32) {
    var fds: [Int32] = [-1, -1]
    guard pipe(&fds) == 0 else { throw FixtureError("pipe(): \(errnoText())") }
    _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
    _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
    return (fds[0], fds[1])
}

typealias SpawnAddClosefrom = @convention(c) (
    UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32
) -> Int32
typealias SpawnAddChdir = @convention(c) (
    UnsafeMutablePointer<posix_spawn_file_actions_t>?, UnsafePointer<CChar>?
) -> Int32

/// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+) and
/// `…_addchdir_np` (2.29+), looked up at run time: Swift's Glibc module
/// leaves these GNU extensions out.
struct SpawnExtensions: @unchecked Sendable {
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
func spawn(
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
func completeLines(_ data: Data, includingUnterminated: Bool) -> [String] {
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
func writeAll(_ fd: Int32, _ data: Data) -> String? {
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
