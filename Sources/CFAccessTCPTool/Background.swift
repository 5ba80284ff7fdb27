import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `shell -f`: to the background once the session is up, as ssh's `-f` (after the host key and
/// the login, which may ask on the terminal). A process with threads cannot fork safely, so the
/// tool starts itself again without `-f` and waits: the second process connects (asking what it
/// must on the terminal), then leaves the terminal's session (`setsid`) and says it is ready
/// through a pipe; the first one then exits 0. If the second one ends before that, the first
/// exits with its status.
enum Background {
    /// The variable that hands the second process the pipe's writing end.
    static let readyVariable = "CF_ACCESS_TCP_READY_FD"

    /// In the first process: starts the second one with `arguments` (without `-f`), stdin on
    /// /dev/null (`-f` implies `-n`), and returns the status to exit with.
    static func detach(arguments: [String]) -> Int32 {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            writeStderr("cf-access-tcp: -f: cannot create a pipe: \(SystemError.current().text)")
            return ExitStatus.localIO.rawValue
        }
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        var environment = ProcessInfo.processInfo.environment
        environment[readyVariable] = String(ends[1])
        let executable = "/proc/self/exe"
        var cArguments: [UnsafeMutablePointer<CChar>?] = ([CommandLine.arguments[0]] + arguments).map { strdup($0) } + [nil]
        var cEnvironment: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArguments.forEach { free($0) }
            cEnvironment.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, &cArguments, &cEnvironment)
        close(ends[1])
        guard spawned == 0 else {
            close(ends[0])
            writeStderr("cf-access-tcp: -f: cannot start the background process: \(SystemError(spawned).text)")
            return ExitStatus.localIO.rawValue
        }
        var byte: UInt8 = 0
        var n: Int
        repeat { n = read(ends[0], &byte, 1) } while n < 0 && errno == EINTR
        close(ends[0])
        if n == 1 { return ExitStatus.success.rawValue }
        // It ended before the session was up: its status (it said why on stderr).
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        if status & 0x7f == 0 { return (status >> 8) & 0xff }
        return 128 + (status & 0x7f)
    }

    /// In the second process: the session is up. Leaves the terminal's session and tells the
    /// first process, which exits.
    static func ready(environment: [String: String]) {
        guard let text = environment[readyVariable], let fd = Int32(text), fd > 2 else { return }
        _ = setsid()
        var byte: UInt8 = 1
        _ = write(fd, &byte, 1)
        close(fd)
    }
}
