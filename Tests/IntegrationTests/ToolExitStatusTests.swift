import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A TCP server on 127.0.0.1 that accepts connections and never answers: an HTTPS request to it
/// waits (for the TLS server hello) until the client gives up.
final class SilentServer: @unchecked Sendable {
    let port: Int
    private let fd: Int32
    private var accepted: [Int32] = []

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FixtureError("socket(): \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            close(fd)
            throw FixtureError("bind/listen on 127.0.0.1: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        accepted.forEach { close($0) }
        close(fd)
    }

    /// Waits (bounded) until a client has connected; the connection is kept open, unanswered.
    func waitForConnection(timeout: TimeInterval) throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            let client = accept(fd, nil, nil)
            if client >= 0 {
                accepted.append(client)
                return
            }
            usleep(50_000)
        }
        throw FixtureError("nobody connected to 127.0.0.1:\(port) within \(Int(timeout)) s")
    }
}

/// The tool's exit statuses that no other suite checks: a signal during the login subcommands
/// (README "Exit status": 130 for SIGINT, 143 for SIGTERM). Every other status is checked where
/// its failure is provoked (HonestEndingTests, LoginCommandLineTests, ShellTerminalTests, …).
@Suite("tool exit statuses", .serialized, .ownThreads)
struct ToolExitStatusTests {
    @Test("SIGTERM while `login` waits for the browser: exit 143, no lock left behind")
    func loginTerminated() throws {
        let world = try LoginWorld(target: "127.0.0.1:9", edgeArguments: ["--login-mode", "manual"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         ["login", "https://\(testHost)"] + world.commonArguments,
                                         environment: try world.browserEnvironment())
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Waiting for login", timeout: 60)
        #expect(FileManager.default.fileExists(atPath: world.appTokenFile.path + ".lock"))
        process.send(signal: SIGTERM)
        #expect(try process.waitForExit(timeout: 20) == ExitStatus.terminated.rawValue, "\(process.stderrText)")
        // The tool's own handler ran (a process killed by the signal would also report 143).
        #expect(process.stderrText.contains("cf-access-tcp: login cancelled"), "\(process.stderrText)")
        #expect(world.loginLeftovers.isEmpty, "\(world.loginLeftovers)")
    }

    @Test("SIGTERM or SIGINT while `token` or `logout` looks the application up: 143 or 130", arguments: [
        ("token", SIGTERM, ExitStatus.terminated), ("logout", SIGTERM, ExitStatus.terminated),
        ("token", SIGINT, ExitStatus.interrupted),
    ])
    func lookupInterrupted(command: String, signal: Int32, expected: ExitStatus) throws {
        let server = try SilentServer()
        let tokens = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: tokens) }
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), [
            command, "https://ssh.example.com:\(server.port)", "--resolve", "ssh.example.com:\(server.port):127.0.0.1",
            "--token-dir", tokens.path,
        ])
        defer { process.terminate() }
        // The discovery request is under way (and waits for an answer that never comes).
        try server.waitForConnection(timeout: 30)
        process.send(signal: signal)
        #expect(try process.waitForExit(timeout: 20) == expected.rawValue, "\(process.stderrText)")
        #expect(process.stderrText.contains("cf-access-tcp: login cancelled"), "\(process.stderrText)")
    }
}
