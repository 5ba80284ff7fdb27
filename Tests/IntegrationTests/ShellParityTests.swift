import CFAccessSSH
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 25 part 2 point 6 (and `LocalForward` of point 3): ssh's smaller habits, against real
/// sshd behind websockify.
@Suite("shell keeps ssh's smaller habits", .serialized, .ownThreads)
struct ShellParityTests {
    @Test("-v gives debug lines on stderr; -n reads stdin from /dev/null; -N without a terminal prints no pseudo-terminal note", arguments: ShellEngine.allCases)
    func letters(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let quiet = try world.run(engine, ["--accept-new"])
        #expect(quiet.status == 0, "\(quiet.stderr)")
        #expect(!quiet.stderr.contains(" DBG "), "\(quiet.stderr)")
        let verbose = try world.run(engine, ["-v"])
        #expect(verbose.status == 0 && verbose.stdout == "reached\n", "\(verbose.stderr)")
        #expect(verbose.stderr.contains(" DBG "), "\(verbose.stderr)")

        let input = Data("from-stdin\n".utf8)
        let read = try world.run(.command, [], command: ["cat"], stdin: input)
        #expect(read.status == 0 && read.stdout == "from-stdin\n", "\(read.stderr)")
        let null = try world.run(.command, ["-n"], command: ["cat"], stdin: input)
        #expect(null.status == 0 && null.stdout.isEmpty, "-n: \(null.stdout) \(null.stderr)")

        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort()
        let forwards = try world.start(.command, ["-N", "-L", "\(port):127.0.0.1:\(echo.port)"], command: nil)
        defer { forwards.terminate() }
        let deadline = Date(timeIntervalSinceNow: 60)
        while !loopbackPortAccepts(port) && Date() < deadline && forwards.isRunning { usleep(100_000) }
        let client = try ClientSocket(port: port)
        try client.send(Array("ping".utf8))
        var back: [UInt8] = []
        #expect(try client.receive(count: 4) { back.append(contentsOf: $0) } == 4 && back == Array("ping".utf8))
        #expect(!forwards.stderrText.contains("Pseudo-terminal"), "\(forwards.stderrText)")
    }

    @Test("LocalForward in ssh_config binds its port like -L (both add up); a bad one is one line naming it", arguments: ShellEngine.allCases)
    func localForwardFromConfig(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let echo = try TargetFixture(.echo)
        let (first, second) = (try freeLoopbackPort(), try freeLoopbackPort())
        let config = world.file("config")
        try "Host \(testHost)\n  LocalForward \(first) 127.0.0.1:\(echo.port)\n".write(to: config, atomically: true, encoding: .utf8)
        let tool = try world.start(engine, ["--accept-new", "-F", config.path, "-L", "\(second):127.0.0.1:\(echo.port)"],
                                   command: ["echo started; sleep 4; echo finished"])
        defer { tool.terminate() }
        _ = try tool.waitForLine(matching: "started", timeout: 60)
        for port in [first, second] {
            let client = try ClientSocket(port: port)
            try client.send(Array("via \(port)".utf8))
            var back: [UInt8] = []
            #expect(try client.receive(count: "via \(port)".utf8.count) { back.append(contentsOf: $0) } == "via \(port)".utf8.count)
            #expect(back == Array("via \(port)".utf8))
            _ = shutdown(client.fd, Int32(SHUT_WR))
            #expect(client.waitForEOF(timeout: 30))
        }
        #expect(try tool.waitForExit(timeout: 60) == 0, "\(tool.stderrText)")

        try "Host \(testHost)\n  LocalForward \(first)\n".write(to: config, atomically: true, encoding: .utf8)
        let bad = try world.run(engine, ["-F", config.path])
        #expect(bad.status == 64 && bad.stderr.contains("LocalForward takes [bind_address:]port and host:hostport"), "\(bad.stderr)")
    }

    @Test("started with stdout closed, the tool opens /dev/null there (as ssh's sanitise_stdfd): the command's output never lands in a socket, the run ends cleanly")
    func closedStandardOutput() throws {
        let world = try WebsockifyShellWorld()
        let arguments = try world.arguments(.command, ["--accept-new"], command: ["yes | head -c 200000; echo done"])
        let binary = try TestPaths.binary("cf-access-tcp").path
        let line = ([shellQuote(binary)] + arguments.map(shellQuote)).joined(separator: " ") + " >&-; echo status=$?"
        let process = try ManagedProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", line],
                                         environment: ["HOME": world.home.path, "USER": "nobody-cfat"],
                                         removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: .none)
        #expect(try process.waitForExit(timeout: 90) == 0)
        #expect(process.stdoutText == "status=0\n", "\(process.stdoutText) \(process.stderrText)")
        #expect(!process.stderrText.contains("cf-access-tcp:"), "\(process.stderrText)")
    }

    @Test("-W host:port carries stdin and stdout to the target as the server sees it, silently, and ends with 0 when the target closes; a refused target is the server's reason in one line", arguments: ShellEngine.allCases)
    func stdioForward(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        _ = try world.run(.command, ["--accept-new"])
        let echo = try TargetFixture(.echo)
        let payload = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let carried = try world.run(.command, ["-W", "127.0.0.1:\(echo.port)"], command: nil, stdin: payload)
        #expect(carried.status == 0, "\(carried.stderr)")
        #expect(carried.stderr.isEmpty, "ssh -W says nothing: \(carried.stderr)")
        let process = try world.start(.command, ["-W", "127.0.0.1:\(echo.port)"], command: nil, stdin: payload)
        #expect(try process.waitForExit(timeout: 90) == 0)
        #expect(process.stdoutData == payload, "every byte back, in order (\(process.stdoutData.count) of \(payload.count))")

        let closed = try freeLoopbackPort()
        let refused = try world.run(.command, ["-W", "127.0.0.1:\(closed)"], command: nil, stdin: Data())
        #expect(refused.status != 0, "\(refused.stderr)")
        #expect(refused.stderr.contains("refused the channel to 127.0.0.1:\(closed): connect failed"), "\(refused.stderr)")
        #expect(refused.stderr.split(separator: "\n").count == 1, "\(refused.stderr)")
        #expect(try world.run(.command, ["-W", "no-port"], command: nil).status == 64)
        #expect(try world.run(.command, ["-W", "h:22"], command: ["true"]).status == 64)
    }

    @Test("real OpenSSH ssh with shell -W as its ProxyCommand reaches the server behind the jump and runs a command")
    func openSSHThroughStdioForward() throws {
        let world = try WebsockifyShellWorld()
        let known = world.file("jump_known_hosts")
        let binary = try TestPaths.binary("cf-access-tcp").path
        let proxy = [binary, "shell", "-W", "127.0.0.1:\(world.sshd.port)", "\(world.sshd.keyUser)@\(testHost)",
                     "--connect-to", "127.0.0.1:\(world.websockify.port)", "--ca-file", try certs().caFile.path,
                     "--token-dir", world.file("tokens").path, "-i", world.sshd.clientKeyPath.path,
                     "--known-hosts", known.path, "-o", "GlobalKnownHostsFile=none", "--accept-new", "-F", "none"]
            .map(shellQuote).joined(separator: " ")
        let result = try world.sshd.runSSH(user: world.sshd.keyUser, proxyCommand: proxy, command: "echo through-W")
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "through-W\n")
    }

    // MARK: Point 4: scp and sftp with shell as their ssh program

    /// A program for `scp -S` / `sftp -S` (which take a path, no arguments): the tool's `shell`
    /// with this world's edge, key and known_hosts, then what scp or sftp passes.
    private func sshProgram(_ world: WebsockifyShellWorld) throws -> URL {
        let script = world.file("ssh-via-shell")
        let fixed = ["shell", "--connect-to", "127.0.0.1:\(world.websockify.port)", "--ca-file", try certs().caFile.path,
                     "--token-dir", world.file("tokens").path, "-i", world.sshd.clientKeyPath.path,
                     "--known-hosts", world.file("known_hosts").path, "-o", "GlobalKnownHostsFile=none", "--accept-new", "-F", "none"]
        let line = "exec env HOME=\(shellQuote(world.home.path)) \(shellQuote(try TestPaths.binary("cf-access-tcp").path)) "
            + fixed.map(shellQuote).joined(separator: " ") + " \"$@\"\n"
        try ("#!/bin/sh\n" + line).write(to: script, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        return script
    }

    @Test("scp -S and sftp -S with shell as the ssh program: their options accepted (-x, -s, ForwardAgent=no, PermitLocalCommand=no, ClearAllForwardings=yes, RemoteCommand=none, RequestTTY=no), files copied both ways byte for byte, by sftp, scp (SFTP) and scp -O")
    func scpAndSftp() throws {
        let world = try WebsockifyShellWorld()
        let program = try sshProgram(world)
        let local = world.file("payload")
        let bytes = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
        try bytes.write(to: local)
        let remote = "/tmp/cfat-scp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { for suffix in ["-sftp", "-scp", "-legacy"] { try? FileManager.default.removeItem(atPath: remote + suffix) } }
        let destination = "\(world.sshd.keyUser)@\(testHost)"

        let batch = world.file("batch")
        try "put \(local.path) \(remote)-sftp\nget \(remote)-sftp \(local.path)-sftp\n".write(to: batch, atomically: true, encoding: .utf8)
        let sftp = try run("sftp", ["-S", program.path, "-b", batch.path, destination], timeout: 90)
        #expect(sftp.status == 0, "\(sftp.stderr) \(sftp.stdout)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: local.path + "-sftp")) == bytes)

        for (flags, suffix) in [([String](), "-scp"), (["-O"], "-legacy")] {
            let up = try run("scp", flags + ["-S", program.path, local.path, "\(destination):\(remote)\(suffix)"], timeout: 90)
            #expect(up.status == 0, "\(flags): \(up.stderr)")
            let down = try run("scp", flags + ["-S", program.path, "\(destination):\(remote)\(suffix)", local.path + suffix], timeout: 90)
            #expect(down.status == 0, "\(flags): \(down.stderr)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: local.path + suffix)) == bytes, "\(flags)")
        }
        // What scp and sftp never pass is refused, not ignored.
        let x11 = try world.run(.command, ["-o", "ForwardX11=yes"])
        #expect(x11.status == 64 && x11.stderr.contains("ForwardX11 yes is not supported"), "\(x11.stderr)")
    }

    @Test("git with a port (point 4): git asks its ssh program with -G first, which shell answers as ssh -G does (exit 0, no connection), then clones ssh://user@host:22/… through shell; the file arrives byte for byte")
    func gitWithAPort() throws {
        try requireRealPart(which("git") != nil, "git (package git)")
        let world = try WebsockifyShellWorld()
        let program = try sshProgram(world)
        let probe = try run(program, ["-G", "\(world.sshd.keyUser)@\(testHost)"])
        #expect(probe.status == 0, "\(probe.stderr)")
        #expect(probe.stdout.contains("user \(world.sshd.keyUser)\nhostname \(testHost)\nport 22\n"), "\(probe.stdout)")
        #expect(!world.sshd.logText.contains("Accepted publickey"), "-G connects to nothing")

        // A repository the server's user owns (git refuses one of another owner).
        let server = try makeTempDir("cfat-git")
        defer { try? FileManager.default.removeItem(at: server) }
        let work = server.appendingPathComponent("work")
        let content = (0..<50_000).map { "line \($0)\n" }.joined()
        let git = { (arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) in
            try run("git", ["-c", "user.name=cfat", "-c", "user.email=cfat@example.invalid", "-c", "init.defaultBranch=main"] + arguments,
                    env: ["HOME": world.home.path], timeout: 120)
        }
        #expect(try git(["init", "-q", work.path]).status == 0)
        try content.write(to: work.appendingPathComponent("file.txt"), atomically: true, encoding: .utf8)
        #expect(try git(["-C", work.path, "add", "file.txt"]).status == 0)
        #expect(try git(["-C", work.path, "commit", "-q", "-m", "one"]).status == 0)
        let bare = server.appendingPathComponent("repo.git")
        #expect(try git(["clone", "-q", "--bare", work.path, bare.path]).status == 0)
        #expect(try run("chown", ["-R", world.sshd.keyUser, server.path]).status == 0)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: server.path)

        let clone = world.file("clone")
        let cloned = try run("git", ["clone", "-q", "ssh://\(world.sshd.keyUser)@\(testHost):22\(bare.path)", clone.path],
                             env: ["HOME": world.home.path, "GIT_SSH_COMMAND": program.path], timeout: 120)
        #expect(cloned.status == 0, "\(cloned.stderr)")
        #expect((try? String(contentsOf: clone.appendingPathComponent("file.txt"), encoding: .utf8)) == content)
    }

    // MARK: Point 3: -J / ProxyJump

    @Test("-J (and ProxyJump): the tunnel reaches the jump host, whose sshd opens the way to the destination; both host keys checked and recorded, both logins made, the command's output and status come back", arguments: ShellEngine.allCases)
    func proxyJump(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let known = world.file(".ssh/known_hosts")
        let destination = ["shell", "\(world.sshd.keyUser)@127.0.0.1", "-p", "\(world.sshd.port)",
                           "--connect-to", "127.0.0.1:\(world.websockify.port)", "--ca-file", try certs().caFile.path,
                           "--token-dir", world.file("tokens").path, "-i", world.sshd.clientKeyPath.path,
                           "-o", "GlobalKnownHostsFile=none", "--accept-new"] + engine.flags
        func run(_ extra: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
            let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), destination + extra + ["--", "echo jumped; exit 7"],
                                             environment: ["HOME": world.home.path, "USER": "nobody-cfat"],
                                             removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: .none)
            let status = try process.waitForExit(timeout: 90)
            return (status, process.stdoutText.replacingOccurrences(of: "\r", with: ""), process.stderrText)
        }
        let jumped = try run(["-J", "\(world.sshd.keyUser)@\(testHost)"])
        #expect(jumped.status == 7, "\(jumped.stderr)")
        #expect(jumped.stdout == "jumped\n")
        let text = try String(contentsOf: known, encoding: .utf8)
        #expect(knownHosts(text, names: testHost, key: world.sshd.hostKeyPublicLine, lines: 2), "the jump host's key: \(text)")
        #expect(knownHosts(text, names: "[127.0.0.1]:\(world.sshd.port)", key: world.sshd.hostKeyPublicLine, lines: 2), "\(text)")
        let logins = world.sshd.logText.components(separatedBy: "Accepted publickey").count - 1
        #expect(logins == 2, "two logins, the jump's and the destination's: \(logins)")

        let viaConfig = try run(["-o", "ProxyJump=\(world.sshd.keyUser)@\(testHost):22"])
        #expect(viaConfig.status == 7 && viaConfig.stdout == "jumped\n", "\(viaConfig.stderr)")

        let list = try run(["-J", "a@h1,b@h2"])
        #expect(list.status == 64 && list.stderr.contains("one jump host is supported"), "\(list.stderr)")
    }

    // MARK: Point 3: -D, dynamic forwarding

    @Test("-D: a SOCKS5 and a SOCKS4a client each reach their own target through the session, bytes checked; curl fetches a page through it; a refused target is SOCKS5's 'connection refused' (-N: no terminal, so libssh)")
    func dynamicForward() throws {
        let world = try WebsockifyShellWorld()
        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort()
        let tool = try world.start(.command, ["--accept-new", "-N", "-D", "\(port)"], command: nil)
        defer { tool.terminate() }
        let deadline = Date(timeIntervalSinceNow: 60)
        while !world.sshd.logText.contains("Accepted publickey") && Date() < deadline { usleep(100_000) }

        // SOCKS5 by name, greeting and request in one write, data right behind them.
        let five = try ClientSocket(port: port)
        let name = Array("localhost".utf8)
        try five.send([5, 1, 0] + [5, 1, 0, 3, UInt8(name.count)] + name + [UInt8(echo.port >> 8), UInt8(echo.port & 0xff)])
        var answer: [UInt8] = []
        #expect(try five.receive(count: 12) { answer.append(contentsOf: $0) } == 12)
        #expect(answer == [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0], "\(answer)")
        let payload = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }
        try five.send(payload)
        var back: [UInt8] = []
        #expect(try five.receive(count: payload.count) { back.append(contentsOf: $0) } == payload.count)
        #expect(back == payload)

        // SOCKS4a by address 0.0.0.1 and a host name.
        let four = try ClientSocket(port: port)
        try four.send([4, 1, UInt8(echo.port >> 8), UInt8(echo.port & 0xff), 0, 0, 0, 1] + Array("me".utf8) + [0] + Array("127.0.0.1".utf8) + [0])
        answer = []
        #expect(try four.receive(count: 8) { answer.append(contentsOf: $0) } == 8)
        #expect(answer.prefix(2) == [0, 0x5a], "\(answer)")
        try four.send(Array("four".utf8))
        back = []
        #expect(try four.receive(count: 4) { back.append(contentsOf: $0) } == 4 && back == Array("four".utf8))

        // A target nothing listens on: refused by the server, said to the client.
        let closed = try freeLoopbackPort()
        let refused = try ClientSocket(port: port)
        try refused.send([5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, UInt8(closed >> 8), UInt8(closed & 0xff)])
        answer = []
        _ = try refused.receive(count: 12) { answer.append(contentsOf: $0) }
        #expect(answer.count >= 4 && answer[2...3] == [5, 5], "\(answer)")

        // curl, a SOCKS client we did not write, fetches a page from a local HTTP server.
        let page = world.file("www")
        try FileManager.default.createDirectory(at: page, withIntermediateDirectories: true)
        try "through -D\n".write(to: page.appendingPathComponent("index.txt"), atomically: true, encoding: .utf8)
        let httpPort = try freeLoopbackPort()
        let http = try ManagedProcess(URL(fileURLWithPath: "/usr/bin/python3"), ["-m", "http.server", "\(httpPort)", "--bind", "127.0.0.1",
                                                                                 "--directory", page.path])
        defer { http.terminate() }
        let httpDeadline = Date(timeIntervalSinceNow: 30)
        while !loopbackPortAccepts(httpPort) && Date() < httpDeadline { usleep(100_000) }
        let curl = try run("curl", ["-sS", "--max-time", "30", "--socks5-hostname", "127.0.0.1:\(port)",
                                    "http://localhost:\(httpPort)/index.txt"], timeout: 60)
        #expect(curl.status == 0 && curl.stdout == "through -D\n", "\(curl.stderr)")
    }

    @Test("-f: back to the caller with 0 once the session is up, the forward then served from the background; -f without a command or -N is ssh's refusal")
    func background() throws {
        let world = try WebsockifyShellWorld()
        let echo = try TargetFixture(.echo)
        let port = try freeLoopbackPort()
        let marker = "\(port):127.0.0.1:\(echo.port)"
        let detached = try world.run(.command, ["--accept-new", "-f", "-N", "-L", marker], command: nil)
        defer { _ = try? run("pkill", ["-f", marker]) }
        #expect(detached.status == 0, "\(detached.stderr)")
        #expect(world.sshd.logText.contains("Accepted publickey"), "the session was up before the caller got control back")
        let client = try ClientSocket(port: port)
        try client.send(Array("bg".utf8))
        var back: [UInt8] = []
        #expect(try client.receive(count: 2) { back.append(contentsOf: $0) } == 2 && back == Array("bg".utf8))

        let refused = try world.run(.command, ["-f"], command: nil)
        #expect(refused.status == 64 && refused.stderr.contains("Cannot fork into background without a command to execute"), "\(refused.stderr)")
        let failing = try world.run(.command, ["-f", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=yes",
                                               "-o", "GlobalKnownHostsFile=none", "--known-hosts", world.file("empty").path])
        #expect(failing.status == 77, "a failure before the session is up is the caller's status: \(failing.stderr)")
    }

    @Test("the pre-login banner (legal notices) is shown on stderr, visible-safe, before the login; not with -q; a terminal session on libssh2 1.10 cannot show it (its library drops it)")
    func banner() throws {
        let directory = try makeTempDir("cfat-banner")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("banner")
        try "Authorized use only.\nSecond line \u{1b}[2Jcleared\n".write(to: file, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file.path)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        let sshd = try SSHDFixture(extraConfig: "Banner \(file.path)\n")
        let websockify = try WebsockifyFixture(target: "127.0.0.1:\(sshd.port)")
        let home = try makeTempDir("cfat-banner-home")
        defer { try? FileManager.default.removeItem(at: home) }
        func run(_ extra: [String]) throws -> (status: Int32, stderr: String) {
            let arguments = ["shell", "\(sshd.keyUser)@\(testHost)", "--connect-to", "127.0.0.1:\(websockify.port)",
                             "--ca-file", try certs().caFile.path, "--token-dir", home.appendingPathComponent("t").path,
                             "-i", sshd.clientKeyPath.path, "--known-hosts", home.appendingPathComponent("kh").path,
                             "-o", "GlobalKnownHostsFile=none", "--accept-new"] + extra + ["--", "true"]
            let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, environment: ["HOME": home.path],
                                             removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: .none)
            return (try process.waitForExit(timeout: 90), process.stderrText)
        }
        let shown = try run([])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stderr.contains("Authorized use only.\nSecond line \\033[2Jcleared"), "\(shown.stderr)")
        #expect(!shown.stderr.contains("\u{1b}"), "no raw escape reaches the terminal")
        let quiet = try run(["-q"])
        #expect(quiet.status == 0 && !quiet.stderr.contains("Authorized use only"), "\(quiet.stderr)")
        // A terminal session runs on libssh2 while libssh cannot send terminal modes: the banner
        // is shown when the linked libssh2 passes it on (1.11), else -v says why it is not.
        let terminal = try run(["-tt", "-v"])
        #expect(terminal.status == 0, "\(terminal.stderr)")
        if SSHEngineKind.libssh.sendsTerminalModes || SSHEngineFeatures.libssh2.passesBanner {
            #expect(terminal.stderr.contains("Authorized use only."), "\(terminal.stderr)")
        } else {
            #expect(terminal.stderr.contains("a pre-login banner is not shown: \(SSHEngineFeatures.libssh2.version) drops it"),
                    "\(terminal.stderr)")
        }
    }

    @Test("what is not supported is refused in one line, never ignored: -X, -Y")
    func refusedLetters() throws {
        let world = try WebsockifyShellWorld()
        for (extra, word) in [(["-X"], "-X and -Y"), (["-Y"], "-X and -Y")] {
            let result = try world.run(.command, extra)
            #expect(result.status == 64, "\(extra): \(result.stderr)")
            #expect(result.stderr.contains(word) && result.stderr.split(separator: "\n").count == 1, "\(extra): \(result.stderr)")
        }
    }
}
