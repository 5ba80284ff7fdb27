import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issues 11.2, 12.5, 11.3: every end that is not a clean close exits non-zero with one plain
/// line naming what happened (also in --logfile); a clean close from either side exits 0.
@Suite("honest endings of the command line", .serialized, .ownThreads)
struct HonestEndingTests {
    /// Runs the client in stdio mode, stdin held open as ssh does, until it exits by itself.
    private func runStdio(_ arguments: [String], limit: TimeInterval = 30) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, stdin: .pipe)
        let status = try process.waitForExit(timeout: limit)
        return (status, process.stdoutText, process.stderrText)
    }

    private func lines(_ text: String) -> [String] { text.split(separator: "\n").map(String.init) }

    @Test("stdio: the edge resets mid-stream → exit 75 (connection lost), one line, the bytes before it delivered")
    func resetMidStream() throws {
        let edge = try HostileEdge(mode: "reset")
        let result = try runStdio(try edge.clientArguments())
        #expect(result.stdout == "hello from the edge\n")
        #expect(result.status == ExitStatus.connectionLost.rawValue, "stderr: \(result.stderr)")
        #expect(lines(result.stderr).count == 1, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("cf-access-tcp: the edge reset the tunnel to \(testHost) mid-stream"), "\(result.stderr)")
    }

    @Test("stdio: the emulator drops the tunnel (drop-tunnels) → exit 75 and one line")
    func droppedByEmulator() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge), stdin: .pipe)
        try process.writeStdin(Data("before the drop\n".utf8))
        try process.waitForStdout(byteCount: 16, timeout: 30)
        #expect(try edge.admin("drop-tunnels") == "dropped 1 tunnels\n")
        let status = try process.waitForExit(timeout: 30)
        #expect(status == ExitStatus.connectionLost.rawValue, "\(process.stderrText)")
        #expect(process.stderrText.contains("mid-stream"), "\(process.stderrText)")
        #expect(lines(process.stderrText).count == 1, "\(process.stderrText)")
    }

    @Test("stdio: a protocol violation by the edge (first read after the 101) → Close 1002 at once, exit 76 and one line naming it")
    func protocolViolation() throws {
        let edge = try HostileEdge(mode: "violation")
        // The edge never answers the Close: the 2 s close timeout ends the tunnel, not the
        // 30 s keepalive interval (12.8), well before the edge gives up after 10 s.
        let result = try runStdio(try edge.clientArguments(extra: ["--keepalive", "30"]))
        #expect(!edge.events.contains("tls-end-timeout"), "\(edge.events)")
        #expect(result.status == ExitStatus.protocolError.rawValue, "stderr: \(result.stderr)")
        #expect(lines(result.stderr).count == 1, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("cf-access-tcp: the edge broke the WebSocket protocol"), "\(result.stderr)")
        try edge.waitForEvent { $0 == "client-close 1002" }
    }

    @Test("stdio: stdout not writable (>/dev/full) → exit 74 and one line")
    func stdoutFull() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let binary = try TestPaths.binary("cf-access-tcp").path
        let quoted = ([binary] + (try edge.clientArguments())).map { "'\($0)'" }.joined(separator: " ")
        let process = try ManagedProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", "exec \(quoted) >/dev/full"], stdin: .pipe)
        try process.writeStdin(Data("echo me\n".utf8))
        let status = try process.waitForExit(timeout: 30)
        #expect(status == ExitStatus.localIO.rawValue, "\(process.stderrText)")
        #expect(process.stderrText == "cf-access-tcp: cannot write to stdout: No space left on device; the tunnel to \(testHost) was closed\n")
    }

    @Test("stdio: the edge closes cleanly → exit 0 and nothing on stderr; stdin EOF → exit 0")
    func cleanCloses() throws {
        let hostile = try HostileEdge(mode: "coalesce")
        let byEdge = try runStdio(try hostile.clientArguments())
        #expect(byEdge.status == 0)
        #expect(byEdge.stderr.isEmpty, "\(byEdge.stderr)")
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try run(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge), stdin: Data(), timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    @Test("--logfile receives the failure line (a wrong service token)")
    func failureLineInLogFile() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let dir = try makeTempDir("cfat-log")
        defer { try? FileManager.default.removeItem(at: dir) }
        let logFile = dir.appendingPathComponent("client.log")
        let result = try runStdio(try clientArguments(edge: edge, token: (testTokenID, "not-the-secret"),
                                                      extra: ["--logfile", logFile.path]))
        #expect(result.status == ExitStatus.accessDenied.rawValue, "\(result.stderr)")
        #expect(result.stderr.contains("rejected the service token"))
        let logged = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
        #expect(logged.contains("Cloudflare Access rejected the service token for \(testHost)"), "log: \(logged)")
        #expect(!logged.contains("not-the-secret"))
    }

    @Test("--single-connection exits 0 once its one connection closed cleanly")
    func singleConnectionExitsAfterCleanClose() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--single-connection"]))
        defer { listener.stop() }
        do {
            let client = try ClientSocket(port: listener.port)
            try client.send(Array("one\n".utf8))
            var back = [UInt8]()
            _ = try client.receive(count: 4) { back += $0 }
            #expect(back == Array("one\n".utf8))
        }
        #expect(try listener.process.waitForExit(timeout: 30) == 0, "\(listener.process.stderrText)")
    }

    @Test("--single-connection exits 75 when its connection is reset by the edge")
    func singleConnectionExitsAfterReset() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--single-connection"]))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("one\n".utf8))
        var back = [UInt8]()
        _ = try client.receive(count: 4) { back += $0 }
        #expect(try edge.admin("drop-tunnels") == "dropped 1 tunnels\n")
        #expect(try listener.process.waitForExit(timeout: 30) == ExitStatus.connectionLost.rawValue,
                "\(listener.process.stderrText)")
        #expect(listener.process.stderrText.contains("mid-stream"))
    }
}
