import AccessTransport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `shell -L [bind:]port:host:hostport` and `-N` (issue 16 point 13) against a real sshd through
/// the emulator: each local connection is a `direct-tcpip` channel to an echo target that sshd
/// reaches on its side.
@Suite("shell -L and -N: local forwarding over the SSH session", .serialized, .ownThreads)
struct ShellForwardingTests {
    /// Sends `bytes` through `port` (from a thread of its own) and reads them back; nil when they
    /// came back intact, else what went wrong.
    private func echoThrough(port: Int, _ bytes: [UInt8], halfClose: Bool = false) -> String? {
        do {
            let client = try ClientSocket(port: port)
            let sent = LockedBox<String?>(nil)
            let sender = Thread {
                do { try client.send(bytes) } catch { sent.withLock { $0 = "\(error)" } }
                if halfClose { _ = shutdown(client.fd, Int32(SHUT_WR)) }
            }
            sender.start()
            var back: [UInt8] = []
            back.reserveCapacity(bytes.count)
            let count = try client.receive(count: bytes.count) { back.append(contentsOf: $0) }
            if let problem = sent.withLock({ $0 }) { return "sending: \(problem)" }
            guard count == bytes.count, back == bytes else { return "\(count) of \(bytes.count) bytes came back, equal: \(back == bytes)" }
            if halfClose && !client.waitForEOF(timeout: 30) { return "no end of file after the echo of a half-closed connection" }
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("-N -L: several connections at once carry data both ways intact; a half-close reaches the target and its end comes back; a refused target closes the connection and says why")
    func forwardsOnly() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort(), refusedPort = try freeLoopbackPort(), closed = try freeLoopbackPort()
        let tool = try world.startTool(
            world.arguments(user: world.sshd.keyUser,
                            extra: ["-i", world.sshd.clientKeyPath.path, "-N", "-L", "\(port):127.0.0.1:\(echo.port)",
                                    "-L", "127.0.0.1:\(refusedPort):127.0.0.1:\(closed)"]))
        defer { tool.terminate() }
        try waitForLogin(world)
        #expect(loopbackPortAccepts(port))

        // Four connections at once, 1 MiB each way each, plus a small one that half-closes.
        let payloads = try (0..<4).map { _ in try randomBytes(1 << 20) }
        let problems = LockedBox<[String]>([])
        let group = DispatchGroup()
        for (index, payload) in payloads.enumerated() {
            group.enter()
            Thread {
                defer { group.leave() }
                if let problem = echoThrough(port: port, payload) { problems.withLock { $0.append("connection \(index): \(problem)") } }
            }.start()
        }
        group.enter()
        Thread {
            defer { group.leave() }
            if let problem = echoThrough(port: port, Array("half-closed request".utf8), halfClose: true) {
                problems.withLock { $0.append("half-close: \(problem)") }
            }
        }.start()
        #expect(group.wait(timeout: .now() + 120) == .success, "the forwarded connections did not finish")
        #expect(problems.withLock { $0 } == [])

        // Closed connections leave nothing behind: the forward still works, one after another.
        for round in 0..<5 {
            #expect(echoThrough(port: port, Array("again \(round)".utf8)) == nil, "round \(round)")
        }

        // Nothing listens where the second forward leads: sshd refuses the channel.
        let refused = try ClientSocket(port: refusedPort)
        #expect(refused.waitForEOF(timeout: 60), "the refused forward's connection stayed open")
        try tool.waitForStderr(containing: "-L 127.0.0.1:\(refusedPort):127.0.0.1:\(closed): \(testHost) refused the connection from 127.0.0.1:",
                               timeout: 30)
        #expect(tool.stderrText.contains("connect failed"), "\(tool.stderrText)")

        // -N has no end of its own: a signal ends it.
        tool.send(signal: SIGTERM)
        #expect(try tool.waitForExit(timeout: 30) == 143)
        #expect(!loopbackPortAccepts(port), "the forward's port is still open after the tool ended")
    }

    @Test("-N reconnects like a shell: the edge dies and comes back on its port, the tool says so, and the same local port forwards again")
    func forwardsOnlyReconnect() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort()
        let tool = try world.startTool(
            world.arguments(user: world.sshd.keyUser,
                            extra: ["-i", world.sshd.clientKeyPath.path, "-N", "-L", "\(port):127.0.0.1:\(echo.port)"]))
        defer { tool.terminate() }
        try waitForLogin(world)
        #expect(echoThrough(port: port, Array("before".utf8)) == nil)

        // The edge dies (the tunnel with it) and comes back on the same port.
        let edgePort = world.edge.port
        world.edge.stop()
        try tool.waitForStderr(containing: "Connection lost — reconnecting (1/3)…", timeout: 90)
        let again = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(world.sshd.port)",
                                    serviceTokens: [(testTokenID, testTokenSecret)], listen: "127.0.0.1:\(edgePort)")
        try tool.waitForStderr(containing: "Reconnected.", timeout: 90)
        // The listener stayed bound: the same port reaches the target through the new session.
        #expect(echoThrough(port: port, Array("after the reconnect".utf8)) == nil)
        tool.send(signal: SIGTERM)
        #expect(try tool.waitForExit(timeout: 30) == 143)
        withExtendedLifetime(again) {}
    }

    @Test("-L with a command: a forwarded connection works while the command runs, and the tool waits for it to close before it exits with the command's status", arguments: ShellEngine.allCases)
    func forwardWithCommand(engine: ShellEngine) throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort()
        let tool = try world.startTool(
            world.arguments(user: world.sshd.keyUser,
                            extra: engine.flags + ["-i", world.sshd.clientKeyPath.path, "-L", "\(port):127.0.0.1:\(echo.port)"],
                            command: ["echo started; sleep 3; echo finished; exit 6"]))
        defer { tool.terminate() }
        _ = try tool.waitForLine(matching: "started", timeout: 60)
        let client = try ClientSocket(port: port)
        try client.send(Array("ping".utf8))
        var back: [UInt8] = []
        #expect(try client.receive(count: 4) { back.append(contentsOf: $0) } == 4)
        #expect(back == Array("ping".utf8))
        // The command ends; the open connection keeps the tool (and the channel) alive, as ssh does.
        _ = try tool.waitForLine(matching: "finished", timeout: 60)
        usleep(1_500_000)
        #expect(tool.isRunning, "the tool ended while a forwarded connection was still open")
        try client.send(Array("pong".utf8))
        back = []
        #expect(try client.receive(count: 4) { back.append(contentsOf: $0) } == 4)
        #expect(back == Array("pong".utf8))
        _ = shutdown(client.fd, Int32(SHUT_WR))
        #expect(client.waitForEOF(timeout: 30))
        #expect(try tool.waitForExit(timeout: 60) == 6, "\(tool.stderrText)")
    }

    @Test("bad -L and -N uses are one line and exit 64 (a taken port 74) before any connection; -L is not the tunnel's flag in shell, and --url is not in its help")
    func usage() throws {
        let world = try ShellWorld()
        // A port that is bound and listening: the forward cannot have it.
        let taken = try SilentServer()
        let cases: [([String], Int32, String)] = [
            (["-L", "8080:host"], 64, "-L 8080:host: expected [bind_address:]port:host:hostport"),
            (["-L", "x:host:80"], 64, "-L x:host:80: expected [bind_address:]port:host:hostport"),
            (["-N", "--", "true"], 64, "-N runs no command"),
            (["-N", "--tmux", "main"], 64, "-N runs no command"),
            (["-N", "-L", "\(taken.port):h:80"], 74, "Cannot listen on 127.0.0.1:\(taken.port): Address already in use"),
            (["--url", "127.0.0.1:0", "--", "true"], 64, "--url cannot be used with shell"),
        ]
        for (extra, status, message) in cases {
            let result = try world.runTool(world.arguments(user: "me", extra: extra))
            #expect(result.status == status, "\(extra): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(extra): \(result.stderr)")
            #expect(!result.stderr.contains("Connecting"), "\(extra) connected before refusing")
        }
        let help = try world.runTool(["shell", "--help"])
        #expect(help.stdout.contains("-L <[bind_address:]port:host:hostport>"), "\(help.stdout)")
        #expect(!help.stdout.contains("--url, --listener"), "shell's help offers --url, which it refuses")
        #expect(!help.stdout.contains("-T,"), "shell's help gives -T to the tunnel")
        #expect(!help.stdout.contains("-L,"), "shell's help gives -L to the tunnel")
        try world.edge.waitForStats(host: testHost) { $0.upgradesAccepted == 0 }
    }
}

/// Waits (bounded) until sshd logged a key login: the session is up (-N prints no progress line,
/// as ssh does not).
private func waitForLogin(_ world: ShellWorld, timeout: TimeInterval = 60) throws {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while !world.sshd.logText.contains("Accepted publickey") {
        guard Date() < deadline else { throw FixtureError("sshd logged no login within \(Int(timeout)) s:\n\(world.sshd.logText.suffix(800))") }
        usleep(100_000)
    }
    usleep(300_000)
}

