import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 28: how the carrier treats the ends of a TLS stream, against a hostile TLS edge
/// (scripts/hostile-tls-edge.py) that writes every byte as the case needs: a reply cut short never
/// looks like a clean end (stdio with stdin open or at EOF, and through a listener), the error names
/// the read side even when a ping came in the same read, and an edge that wants the other direction
/// (a renegotiation, a KeyUpdate flood) costs no CPU while it stalls.
@Suite("TLS stream ends against a hostile edge", .serialized, .ownThreads)
struct TLSStreamEndTests {
    /// One way for the edge to fail after `reply part 1\n`, and what the tool must say.
    struct Failure: Sendable, CustomTestStringConvertible {
        let mode: String
        let pingFirst: Bool
        let status: ExitStatus
        /// The stderr line, after `cf-access-tcp: `.
        let line: String

        var testDescription: String { pingFirst ? "ping, then \(mode)" : mode }
        var edgeArguments: [String] { pingFirst ? ["--ping-first"] : [] }
    }

    static let reply = "reply part 1\n"
    /// All the stdout a failure may show: the reply, then the payload of the frame cut in half
    /// (its first 70 bytes: half of a 148-byte frame less its 4-byte header), which the client
    /// passes on as it arrives. Never a byte more, and never a byte of another frame.
    static let mostOutput = reply + String(String(repeating: "this part of the reply is cut short\n", count: 4).prefix(70))

    static let failures: [Failure] = {
        let lost = ExitStatus.connectionLost
        let cases: [(String, ExitStatus, String)] = [
            ("cut", lost, "the edge reset the tunnel to \(testHost) mid-stream (the connection ended without a WebSocket Close): the connection is lost"),
            ("reset", lost, "the edge reset the tunnel to \(testHost) mid-stream (Connection reset by peer): the connection is lost"),
            ("garbage", lost, "the edge reset the tunnel to \(testHost) mid-stream (TLS error: decryption failed or bad record mac): the connection is lost"),
            ("replay", lost, "the edge reset the tunnel to \(testHost) mid-stream (TLS error: decryption failed or bad record mac): the connection is lost"),
            ("masked", .protocolError, "the edge broke the WebSocket protocol (a masked frame from the server): the tunnel to \(testHost) was closed"),
            ("close-error", lost, "the edge closed the tunnel to \(testHost) with an error (code 1011): the connection is lost"),
        ]
        return [false, true].flatMap { ping in
            cases.map { Failure(mode: $0.0, pingFirst: ping, status: $0.1, line: $0.2) }
        }
    }()

    private func edge(_ failure: Failure) throws -> HostileEdge {
        try HostileEdge(mode: failure.mode, extra: failure.edgeArguments, script: "hostile-tls-edge.py")
    }

    private func checkStdio(_ process: ManagedProcess, _ failure: Failure) throws {
        let status = try process.waitForExit(timeout: 30)
        #expect(status == failure.status.rawValue, "stderr: \(process.stderrText)")
        #expect(process.stderrText == "cf-access-tcp: \(failure.line)\n")
        // What arrived before the failure, and nothing the edge did not send as payload.
        #expect(process.stdoutText.hasPrefix(Self.reply), "stdout: \(process.stdoutText)")
        #expect(Self.mostOutput.hasPrefix(process.stdoutText), "stdout: \(process.stdoutText)")
    }

    @Test("stdio with stdin open: a reply cut short is a plain line and a non-zero exit", arguments: failures)
    func stdinOpen(_ failure: Failure) throws {
        let edge = try edge(failure)
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(), stdin: .pipe)
        defer { process.terminate() }
        try process.writeStdin(Data("request\n".utf8))
        try checkStdio(process, failure)
    }

    @Test("stdio after stdin EOF (printf request | cf-access-tcp): the same status and line, never a clean exit 0",
          arguments: failures)
    func stdinAtEOF(_ failure: Failure) throws {
        let edge = try edge(failure)
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(),
                                         stdin: .data(Data("request\n".utf8)))
        defer { process.terminate() }
        try checkStdio(process, failure)
    }

    @Test("listener: the local connection ends with a reset (ECONNRESET) after the bytes that arrived, not a FIN",
          arguments: failures)
    func listener(_ failure: Failure) throws {
        let edge = try edge(failure)
        let listener = try ListenerProcess(arguments: try edge.clientArguments())
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("request\n".utf8))
        let (bytes, end) = client.readToEnd(timeout: 30)
        #expect(end == ECONNRESET, "the read ended with errno \(end) (0: a clean EOF)")
        let received = String(decoding: bytes, as: UTF8.self)
        #expect(received.hasPrefix(Self.reply) && Self.mostOutput.hasPrefix(received), "received: \(received)")
        _ = try listener.process.waitForStderr(containing: failure.line, timeout: 30)
    }

    @Test("a clean Close from the edge still ends the local connection with a FIN (EOF), not a reset")
    func cleanCloseKeepsFIN() throws {
        let hostile = try HostileEdge(mode: "coalesce")
        let listener = try ListenerProcess(arguments: try hostile.clientArguments())
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        let (bytes, end) = client.readToEnd(timeout: 30)
        #expect(end == 0, "the read ended with errno \(end)")
        #expect(String(decoding: bytes, as: UTF8.self) == "hello from the edge\n")
    }

    /// CPU seconds (user + system) a process has used, from /proc/PID/stat.
    private func cpuSeconds(_ pid: pid_t) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // Fields after the command name (which may hold spaces), from field 3 on.
        guard let close = stat.lastIndex(of: ")") else { throw FixtureError("unreadable /proc/\(pid)/stat") }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw FixtureError("unreadable /proc/\(pid)/stat: \(stat)")
        }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test("an edge that wants the other direction and stalls costs no CPU: a refused renegotiation (TLS 1.2), a KeyUpdate flood then silence (TLS 1.3), and the control case of an edge that stops reading")
    func stalledEdgesIdle() throws {
        let binary = try TestPaths.binary("cf-access-tcp").path
        var runs: [(mode: String, edge: HostileEdge, client: ManagedProcess)] = []
        defer { for run in runs { run.client.terminate() } }
        for mode in ["renegotiate", "keyupdate", "stop-reading"] {
            let edge = try HostileEdge(mode: mode, extra: ["--stall-after", "1"], script: "hostile-tls-edge.py")
            // No keepalive to end the stall. The renegotiation and the control case get endless bytes
            // to send (an upload under way); the KeyUpdate flood a client with nothing to send, so
            // its own KeyUpdates fill the path (with an upload blocked, OpenSSL 3.0 fails the read
            // instead: "bad length", reference/HOSTILE.md).
            let arguments = try edge.clientArguments(extra: ["--keepalive", "0"])
            let client: ManagedProcess
            if mode == "keyupdate" {
                client = try ManagedProcess(URL(fileURLWithPath: binary), arguments, stdin: .pipe, retainStdout: false)
            } else {
                let command = ([binary] + arguments).map { "'\($0)'" }.joined(separator: " ")
                client = try ManagedProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", "exec \(command) </dev/zero"],
                                            retainStdout: false)
            }
            runs.append((mode, edge, client))
        }
        for run in runs {
            do {
                try run.edge.waitForEvent { $0 == "stalled" }
            } catch {
                throw FixtureError("\(run.mode): \(error)\nclient: \(run.client.outputReport())")
            }
        }
        // The clients first work through what the edge sent before it went silent (each KeyUpdate
        // costs a key derivation: seconds on a loaded machine with a coverage build). Wait until
        // each used under 2% of a core over a second, for 30 s at most (a spinning client never
        // settles), then measure all three over the same 10 s.
        let settleBy = Date(timeIntervalSinceNow: 30)
        var settling = try runs.map { try cpuSeconds($0.client.pid) }
        while Date() < settleBy {
            Thread.sleep(forTimeInterval: 1)
            let now = try runs.map { try cpuSeconds($0.client.pid) }
            defer { settling = now }
            if zip(now, settling).allSatisfy({ $0 - $1 < 0.02 }) { break }
        }
        let before = try runs.map { try cpuSeconds($0.client.pid) }
        Thread.sleep(forTimeInterval: 10)
        let after = try runs.map { try cpuSeconds($0.client.pid) }
        for (index, run) in runs.enumerated() {
            let used = after[index] - before[index]
            #expect(used < 0.5, "\(run.mode): \(used) CPU s in 10 s (under 5% of one core expected); edge: \(run.edge.events)")
            #expect(run.client.isRunning, "\(run.mode): the client should still wait: \(run.client.stderrText)")
        }
        #expect(runs[0].edge.events.contains("hello-request-sent"))
        #expect(runs[0].client.stderrText.contains("the edge asked to renegotiate TLS, which an Access edge never does; refused"),
                "stderr: \(runs[0].client.stderrText)")
        #expect(runs[1].edge.events.contains { $0.hasPrefix("keyupdates-sent ") && $0 != "keyupdates-sent 0" },
                "\(runs[1].edge.events)")
    }
}
