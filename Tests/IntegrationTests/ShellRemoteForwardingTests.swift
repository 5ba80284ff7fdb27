import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 25 part 2 point 3: `-R` (`RemoteForward`) and `-A` (`ForwardAgent`), against real sshd
/// behind websockify, bytes checked end to end.
@Suite("shell forwards remote ports and the agent", .serialized, .ownThreads)
struct ShellRemoteForwardingTests {
    /// A Python program for the server side: connects to each of `ports` on the server's
    /// loopback, sends 200 kB, half-closes, reads what comes back and prints `match PORT` when it
    /// is the same (an echo at the other end of the forward).
    private func echoCheck(_ ports: [Int]) -> String {
        let list = ports.map(String.init).joined(separator: ",")
        return "python3 -c \"import socket\nfor port in [\(list)]:\n"
            + " s = socket.create_connection(('127.0.0.1', port), timeout=30)\n"
            + " data = bytes((i * 7) % 251 for i in range(200000))\n"
            + " s.sendall(data)\n s.shutdown(socket.SHUT_WR)\n back = b''\n"
            + " while True:\n  chunk = s.recv(65536)\n  if not chunk: break\n  back += chunk\n"
            + " print(('match ' if back == data else 'mismatch ') + str(port))\n\""
    }

    @Test("-R and RemoteForward: a connection to the server's port comes back over the session to a local echo, 200 kB both ways, the half-close carried", arguments: ShellEngine.allCases)
    func remoteForward(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let echo = try TargetFixture(.echo)
        let (first, second) = (try freeLoopbackPort(), try freeLoopbackPort())
        let config = world.file("config")
        try "Host \(testHost)\n  RemoteForward \(second) 127.0.0.1:\(echo.port)\n".write(to: config, atomically: true, encoding: .utf8)
        let result = try world.run(engine, ["--accept-new", "-F", config.path, "-R", "\(first):127.0.0.1:\(echo.port)"],
                                   command: [echoCheck([first, second])])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("match \(first)\n") && result.stdout.contains("match \(second)\n"), "\(result.stdout) \(result.stderr)")
        #expect(!result.stdout.contains("mismatch"), "\(result.stdout)")
    }

    @Test("-R 0: the port the server picked is said (as ssh says it) and serves; a local target that refuses is one line, the server's client sees the close; a port the server refuses is a warning, or the end with ExitOnForwardFailure; bad specifications are one line")
    func remoteForwardPortsAndFailures() throws {
        let world = try WebsockifyShellWorld()
        let echo = try TargetFixture(.echo)
        let closed = try freeLoopbackPort()
        let tool = try world.start(.command, ["--accept-new", "-N", "-R", "0:127.0.0.1:\(echo.port)", "-R", "0:127.0.0.1:\(closed)"],
                                   command: nil)
        defer { tool.terminate() }
        let toEcho = "Allocated port ", toClosed = " for remote forward to 127.0.0.1:\(closed)"
        let said = try tool.waitForStderr(containing: toClosed, timeout: 60)
        func allocated(_ target: Int) -> Int? {
            said.split(separator: "\n").first { $0.hasSuffix("remote forward to 127.0.0.1:\(target)") }
                .flatMap { Int($0.dropFirst(toEcho.count).prefix { $0.isNumber }) }
        }
        let echoPort = try #require(allocated(echo.port), "\(said)")
        let closedPort = try #require(allocated(closed), "\(said)")
        // The server listens on its loopback: this machine's.
        let client = try ClientSocket(port: echoPort)
        let payload = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try client.send(payload)
        var back: [UInt8] = []
        #expect(try client.receive(count: payload.count) { back.append(contentsOf: $0) } == payload.count)
        #expect(back == payload)
        _ = shutdown(client.fd, Int32(SHUT_WR))
        #expect(client.waitForEOF(timeout: 30))

        let refused = try ClientSocket(port: closedPort)
        #expect(refused.waitForEOF(timeout: 30), "the server's client is closed when the local target refuses")
        try tool.waitForStderr(containing: "could not be forwarded: connect to 127.0.0.1 port \(closed) failed: Connection refused",
                               timeout: 30)
        #expect(tool.isRunning, "a refused connection does not end the session")

        // A port the server refuses (a privileged one, for a user who is not root): ssh's warning,
        // the command still runs.
        let busy = 1022
        let warned = try world.run(.command, ["-R", "\(busy):127.0.0.1:\(echo.port)"])
        #expect(warned.status == 0 && warned.stdout == "reached\n", "\(warned.stderr)")
        #expect(warned.stderr.contains("Warning: remote port forwarding failed for listen port \(busy)"), "\(warned.stderr)")
        let ended = try world.run(.command, ["-R", "\(busy):127.0.0.1:\(echo.port)", "-o", "ExitOnForwardFailure=yes"])
        #expect(ended.status == 76 && ended.stdout.isEmpty, "\(ended.status) \(ended.stderr)")
        #expect(ended.stderr.contains("remote port forwarding failed for listen port \(busy)"), "\(ended.stderr)")

        for (spec, line) in [("8080", "Remote dynamic forwarding"), ("8080:nohostport", "-R 8080:nohostport: expected")] {
            let bad = try world.run(.command, ["-R", spec])
            #expect(bad.status == 64 && bad.stderr.contains(line) && bad.stderr.split(separator: "\n").count == 1, "\(spec): \(bad.stderr)")
        }
    }

    @Test("-A: the server's ssh-add lists the local agent's key (a terminal session too, on libssh); not without -A, nor with -a over ForwardAgent yes; ForwardAgent $NAME names the socket; -A without an agent says so and runs")
    func agentForwarding() throws {
        let world = try WebsockifyShellWorld()
        let agent = try AgentFixture(key: world.sshd.clientKeyPath)
        let listed = try run("ssh-keygen", ["-lf", world.sshd.clientKeyPath.path], timeout: 30)
        let fingerprint = try #require(listed.stdout.split(separator: " ").dropFirst().first.map(String.init), "\(listed.stderr)")
        let probe = ["ssh-add -l; echo rc=$?"]
        let withAgent = ["SSH_AUTH_SOCK": agent.socket]

        let forwarded = try world.run(.command, ["--accept-new", "-A"], command: probe, environment: withAgent)
        #expect(forwarded.status == 0 && forwarded.stdout.contains(fingerprint) && forwarded.stdout.contains("rc=0"),
                "\(forwarded.stdout) \(forwarded.stderr)")
        let terminal = try world.run(.terminal, ["-A", "-v"], command: probe, environment: withAgent)
        #expect(terminal.status == 0 && terminal.stdout.contains(fingerprint), "\(terminal.stdout) \(terminal.stderr)")
        #expect(terminal.stderr.contains("the agent is forwarded"), "the engine choice says why: \(terminal.stderr)")

        let none = try world.run(.command, [], command: probe, environment: withAgent)
        #expect(none.stdout.contains("rc=2") && !none.stdout.contains(fingerprint), "\(none.stdout)")
        let config = world.file("config")
        try "Host \(testHost)\n  ForwardAgent yes\n".write(to: config, atomically: true, encoding: .utf8)
        let off = try world.run(.command, ["-F", config.path, "-a"], command: probe, environment: withAgent)
        #expect(off.stdout.contains("rc=2") && !off.stdout.contains(fingerprint), "\(off.stdout)")
        let configured = try world.run(.command, ["-F", config.path], command: probe, environment: withAgent)
        #expect(configured.stdout.contains(fingerprint), "\(configured.stdout) \(configured.stderr)")

        try "Host \(testHost)\n  ForwardAgent $CFAT_AGENT\n".write(to: config, atomically: true, encoding: .utf8)
        let named = try world.run(.command, ["-F", config.path], command: probe, environment: ["CFAT_AGENT": agent.socket])
        #expect(named.stdout.contains(fingerprint), "\(named.stdout) \(named.stderr)")

        let missing = try world.run(.command, ["-A"], command: probe)
        #expect(missing.status == 0 && missing.stdout.contains("rc=2"), "\(missing.stdout) \(missing.stderr)")
        #expect(missing.stderr.contains("no ssh-agent (SSH_AUTH_SOCK is not set); the agent is not forwarded"), "\(missing.stderr)")
    }
}
