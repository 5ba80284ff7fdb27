import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` driven through a real pseudo-terminal (tmux send-keys / capture-pane):
/// password prompts, the keyring, the interactive shell, reconnect (issue 10).
@Suite("shell mode on a terminal: passwords, keyring, PTY shell, reconnect", .serialized, .ownThreads)
struct ShellTerminalTests {
    @Test("password: typed on the terminal without echo; a wrong one gives Authentication failed and a retry; no Secret Service: no offer, one line why")
    func passwordRetryWithoutKeyring() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let user = world.sshd.passwordUser
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(world.arguments(user: user, command: ["echo", "pw-ok"])))
        let prompt = "\(user)@\(testHost)'s password: "
        try terminal.waitFor(prompt)
        try terminal.type("not-the-password")
        try terminal.waitFor("Authentication failed, please try again.")
        try terminal.waitFor(prompt, count: 2)
        try terminal.type(world.sshd.password)
        #expect(try terminal.exitStatus() == 0)
        let screen = try terminal.screen()
        #expect(screen.contains("pw-ok"))
        #expect(screen.contains("the password cannot be saved: no D-Bus session bus"))
        #expect(!screen.contains("Save password for future connections?"))
        // Nothing typed was echoed.
        #expect(!screen.contains("not-the-password"))
        #expect(!screen.contains(world.sshd.password))
    }

    @Test("password: three wrong ones end with Authentication failed, exit 77")
    func passwordThreeWrong() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let user = world.sshd.passwordUser
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(world.arguments(user: user, command: ["true"])))
        let prompt = "\(user)@\(testHost)'s password: "
        for attempt in 1...3 {
            try terminal.waitFor(prompt, count: attempt)
            try terminal.type("wrong-\(attempt)")
        }
        #expect(try terminal.exitStatus() == 77)
        #expect(try terminal.screen().contains("Authentication failed: \(user)@\(testHost)"))
    }

    @Test("keyring: the offer comes after a password works; accepted, it is in gnome-keyring; the next run asks nothing; --forget-password clears it")
    func savedPasswordInKeyring() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let keyring = try KeyringFixture(home: world.home)
        let user = world.sshd.passwordUser
        let bus = keyring.environment

        // Declined: nothing stored.
        let declined = try TmuxTerminal(command: try world.toolCommandLine(world.arguments(user: user, command: ["echo", "first"]),
                                                                           environment: bus))
        try declined.waitFor("\(user)@\(testHost)'s password: ")
        try declined.type(world.sshd.password)
        try declined.waitFor("Save password for future connections? [y/N]")
        try declined.type("n")
        #expect(try declined.exitStatus() == 0)
        #expect(try keyring.lookup(user: user, host: testHost, port: 22) == nil)

        // Accepted: stored in the Secret Service.
        let accepted = try TmuxTerminal(command: try world.toolCommandLine(world.arguments(user: user, command: ["echo", "second"]),
                                                                           environment: bus))
        try accepted.waitFor("\(user)@\(testHost)'s password: ")
        try accepted.type(world.sshd.password)
        try accepted.waitFor("Save password for future connections? [y/N]")
        try accepted.type("y")
        #expect(try accepted.exitStatus() == 0)
        #expect(try accepted.screen().contains("Password saved in the keyring for \(user)@\(testHost):22."))
        #expect(try keyring.lookup(user: user, host: testHost, port: 22) == world.sshd.password)

        // Saved: no prompt at all (and no terminal needed).
        let silent = try world.runTool(world.arguments(user: user, command: ["echo", "third"]), environment: bus)
        #expect(silent.status == 0, "\(silent.stderr)")
        #expect(silent.stdout == "third\n")
        #expect(!silent.stderr.contains("password:"))

        // Forgotten: gone from the keyring, and the next run has no password again.
        let forget = try world.runTool(["shell", "\(user)@\(testHost)", "--forget-password"], environment: bus)
        #expect(forget.status == 0, "\(forget.stderr)")
        #expect(forget.stderr.contains("removed the saved password for \(user)@\(testHost):22"))
        #expect(try keyring.lookup(user: user, host: testHost, port: 22) == nil)
        let after = try world.runTool(world.arguments(user: user, command: ["echo", "never"]), environment: bus)
        #expect(after.status == 77, "\(after.stderr)")
    }

    @Test("unknown host key on a terminal: the fingerprint and a yes/no question; yes adds it")
    func unknownHostKeyQuestion() throws {
        let world = try ShellWorld()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path], command: ["echo", "asked"])))
        try terminal.waitFor("Are you sure you want to continue connecting (yes/no/[fingerprint])?")
        #expect(try terminal.screen().contains("ED25519 key fingerprint is \(try fingerprint(of: world.sshd.hostKeyPublicLine))."))
        try terminal.type("yes")
        #expect(try terminal.exitStatus() == 0)
        #expect(try terminal.screen().contains("asked"))
        #expect(knownHosts(try String(contentsOf: world.knownHostsFile, encoding: .utf8), names: testHost, key: world.sshd.hostKeyPublicLine))
    }

    @Test("PTY shell: prompt, TERM, window size at start and after a resize, exit restores the terminal")
    func interactiveShell() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let command = try world.toolCommandLine(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path]),
                                                environment: ["TERM": "xterm-256color"])
        let terminal = try TmuxTerminal(command: command, columns: 100, rows: 30)
        try terminal.waitFor("\(world.sshd.keyUser)@")
        try terminal.type("stty size; echo \"term=$TERM\"")
        try terminal.waitFor("30 100")
        try terminal.waitFor("term=xterm-256color")
        try terminal.resize(columns: 120, rows: 40)
        try terminal.type("stty size")
        try terminal.waitFor("40 120")
        try terminal.type("exit 4")
        #expect(try terminal.exitStatus() == 4)
        let screen = try terminal.screen()
        #expect(screen.contains("Connection to \(testHost) closed."))
        #expect(screen.contains("TTY-RESTORED"))
        // sshd got the client's disconnect message (it logs it a moment after the tool exits).
        let deadline = Date(timeIntervalSinceNow: 15)
        while !world.sshd.logText.contains(": disconnected by user") && Date() < deadline { usleep(100_000) }
        #expect(world.sshd.logText.contains(": disconnected by user"), "\(world.sshd.logText)")
    }

    @Test("reconnect: the edge goes away mid-session; the tool reconnects and --tmux brings back the same tmux session")
    func reconnectWithTmux() throws {
        try requireRealPart(which("tmux") != nil, "tmux (package tmux) on the SSH server")
        let sshd = try SSHDFixture()
        var edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let port = edge.port
        let world = try ShellWorld(edge: edge, sshd: sshd)
        try world.trustHostKey()
        let name = "cfat\(getpid())\(Int.random(in: 1000...9999))"
        // Whatever happens, the remote tmux session does not outlive the test.
        defer {
            _ = try? world.runTool(world.arguments(user: sshd.keyUser, extra: ["-i", sshd.clientKeyPath.path],
                                                   command: ["tmux kill-session -t \(name) 2>/dev/null; true"]))
        }
        // The status lines go to a file: tmux's redraw after the reattach covers the screen.
        let status = world.home.appendingPathComponent("status.log")
        let command = try world.toolCommandLine(
            world.arguments(user: sshd.keyUser, extra: ["-i", sshd.clientKeyPath.path, "--tmux", name]))
        let terminal = try TmuxTerminal(command: command + " 2>" + shellQuote(status.path))
        func waitForStatus(_ text: String) throws {
            let deadline = Date(timeIntervalSinceNow: 90)
            while !((try? String(contentsOf: status, encoding: .utf8))?.contains(text) ?? false) {
                guard Date() < deadline else {
                    throw FixtureError("\"\(text)\" not in the tool's stderr: \((try? String(contentsOf: status, encoding: .utf8)) ?? "")")
                }
                usleep(200_000)
            }
        }
        try terminal.waitFor("\(sshd.keyUser)@")
        try terminal.type("MARK=cfat-marker-\(name); echo \"set-$MARK\"")
        try terminal.waitFor("set-cfat-marker-\(name)")

        // The edge dies (every tunnel with it) and comes back on the same port.
        edge.stop()
        try waitForStatus("Connection lost — reconnecting (1/3)…")
        edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                               serviceTokens: [(testTokenID, testTokenSecret)], listen: "127.0.0.1:\(port)")
        try waitForStatus("Reconnected.")
        try terminal.type("echo \"again-$MARK\"")
        try terminal.waitFor("again-cfat-marker-\(name)")
        // Leave: ending the tmux session ends the remote command, then the tool.
        try terminal.type("exit")
        #expect(try terminal.exitStatus() == 0)
        #expect(try terminal.screen().contains("TTY-RESTORED"))
        withExtendedLifetime(edge) {}
    }

    @Test("an encrypted key asks for its passphrase on the terminal; a wrong one is said and asked again")
    func encryptedKeyPassphrase() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let key = world.home.appendingPathComponent("locked_key")
        let made = try run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "cfat-phrase", "-f", key.path], timeout: 30)
        #expect(made.status == 0, "\(made.stderr)")
        // Authorize it for the key user next to the fixture's own key.
        let authorized = world.sshd.directory.appendingPathComponent("authorized_keys/\(world.sshd.keyUser)")
        let handle = try FileHandle(forWritingTo: authorized)
        handle.seekToEndOfFile()
        handle.write(try Data(contentsOf: key.appendingPathExtension("pub")))
        try handle.close()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", key.path], command: ["echo", "unlocked"])))
        let prompt = "Enter passphrase for key '\(key.path)': "
        try terminal.waitFor(prompt)
        try terminal.type("not-the-phrase")
        try terminal.waitFor("Bad passphrase for key '\(key.path)'")
        try terminal.waitFor(prompt, count: 2)
        try terminal.type("cfat-phrase")
        #expect(try terminal.exitStatus() == 0)
        let screen = try terminal.screen()
        #expect(screen.contains("unlocked"))
        #expect(!screen.contains("cfat-phrase"))
    }

    @Test("an encrypted key the server does not accept is probed with its public half and skipped: no passphrase is asked, the next key logs in (as OpenSSH); on both engines", arguments: ShellEngine.allCases)
    func refusedEncryptedKeyNotAsked(engine: ShellEngine) throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let stranger = world.home.appendingPathComponent("stranger_locked")
        let made = try run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "cfat-phrase", "-f", stranger.path], timeout: 30)
        #expect(made.status == 0, "\(made.stderr)")
        let arguments = world.arguments(user: world.sshd.keyUser, extra: engine.flags + ["-i", stranger.path, "-i", world.sshd.clientKeyPath.path],
                                        command: ["echo", "probed-\(engine)"])
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(arguments))
        #expect(try terminal.exitStatus() == 0)
        let screen = try terminal.screen()
        #expect(screen.contains("probed-\(engine)"), "\(screen)")
        #expect(!screen.contains("Enter passphrase"), "a passphrase was asked for a key the server refuses: \(screen)")
    }

    @Test("reconnect gives up after 1 s, 5 s and 15 s when the edge stays away: the plain failure, exit 75, terminal restored")
    func reconnectGivesUp() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let status = world.home.appendingPathComponent("status.log")
        let command = try world.toolCommandLine(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path]))
        let terminal = try TmuxTerminal(command: command + " 2>" + shellQuote(status.path))
        try terminal.waitFor("\(world.sshd.keyUser)@")
        world.edge.stop()
        #expect(try terminal.exitStatus(timeout: 120) == 75)
        let lines = try String(contentsOf: status, encoding: .utf8)
        for attempt in 1...3 { #expect(lines.contains("Connection lost — reconnecting (\(attempt)/3)…"), "\(lines)") }
        #expect(lines.contains("Connection lost: could not reconnect after 3 attempts: Connection refused"), "\(lines)")
        #expect(!lines.contains("Reconnected."))
        #expect(try terminal.screen().contains("TTY-RESTORED"))
    }

    @Test("SIGTERM during an interactive shell: exit 143 and the terminal is out of raw mode")
    func terminatedShellRestoresTerminal() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path])))
        try terminal.waitFor("\(world.sshd.keyUser)@")
        let children = try terminal.commandChildren()
        #expect(children.count == 1, "expected the tool alone under the pane's shell: \(children)")
        for pid in children { kill(pid, SIGTERM) }
        #expect(try terminal.exitStatus() == 143)
        #expect(try terminal.screen().contains("TTY-RESTORED"))
    }

    @Test("keyboard-interactive (PAM): the server's prompt on the terminal without echo; a wrong answer is retried")
    func keyboardInteractive() throws {
        let pam = try PAMSSHDFixture()
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(pam.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let world = try ShellWorld(edge: edge, sshd: sshd)
        try "\(testHost) \(pam.hostKeyPublicLine)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: sshd.passwordUser, command: ["echo", "kbd-ok"])))
        try terminal.waitFor("Password: ")
        try terminal.type("not-it")
        try terminal.waitFor("Authentication failed")
        try terminal.waitFor("Password: ", count: 2)
        try terminal.type(sshd.password)
        #expect(try terminal.exitStatus() == 0)
        let screen = try terminal.screen()
        #expect(screen.contains("kbd-ok"))
        #expect(!screen.contains(sshd.password))
        #expect(pam.logText.contains("Accepted keyboard-interactive/pam for \(sshd.passwordUser)"))
    }

    @Test("a silent connection (edge frozen, no socket error) is noticed by SSH keepalives, then the tool reconnects")
    func silentConnectionReconnects() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let status = world.home.appendingPathComponent("status.log")
        let command = try world.toolCommandLine(world.arguments(
            user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path, "--server-alive-interval", "2"]))
        let terminal = try TmuxTerminal(command: command + " 2>" + shellQuote(status.path))
        try terminal.waitFor("\(world.sshd.keyUser)@")
        kill(world.edge.process.pid, SIGSTOP)
        defer { kill(world.edge.process.pid, SIGCONT) }
        let deadline = Date(timeIntervalSinceNow: 60)
        while !((try? String(contentsOf: status, encoding: .utf8))?.contains("Connection lost — reconnecting (1/3)…") ?? false) {
            guard Date() < deadline else { throw FixtureError("no reconnect after the edge froze: \((try? String(contentsOf: status, encoding: .utf8)) ?? "")") }
            usleep(200_000)
        }
        kill(world.edge.process.pid, SIGCONT)
        while !((try? String(contentsOf: status, encoding: .utf8))?.contains("Reconnected.") ?? false) {
            guard Date() < deadline.addingTimeInterval(60) else {
                throw FixtureError("no reconnect after the edge thawed: \((try? String(contentsOf: status, encoding: .utf8)) ?? "")")
            }
            usleep(200_000)
        }
        try terminal.type("echo back-$((6*7))")
        try terminal.waitFor("back-42")
        try terminal.type("exit")
        #expect(try terminal.exitStatus() == 0)
        #expect(try terminal.screen().contains("TTY-RESTORED"))
    }

    @Test("-t runs a command on a pseudo-terminal: it sees the window size, its status is the tool's")
    func commandOnTerminal() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path, "-t"],
                            command: ["stty size; tty; exit 5"])), columns: 91, rows: 27)
        #expect(try terminal.exitStatus() == 5)
        let screen = try terminal.screen()
        #expect(screen.contains("27 91"))
        #expect(screen.contains("/dev/pts/"))
        #expect(screen.contains("TTY-RESTORED"))
    }

    @Test("reconnect after the edge resets every tunnel (drop-tunnels: no Close frame): --tmux brings the session back")
    func reconnectAfterDroppedTunnels() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let sshd = world.sshd
        let name = "cfatd\(getpid())\(Int.random(in: 1000...9999))"
        defer {
            _ = try? world.runTool(world.arguments(user: sshd.keyUser, extra: ["-i", sshd.clientKeyPath.path],
                                                   command: ["tmux kill-session -t \(name) 2>/dev/null; true"]))
        }
        let status = world.home.appendingPathComponent("status.log")
        let command = try world.toolCommandLine(
            world.arguments(user: sshd.keyUser, extra: ["-i", sshd.clientKeyPath.path, "--tmux", name]))
        let terminal = try TmuxTerminal(command: command + " 2>" + shellQuote(status.path))
        func waitForStatus(_ text: String) throws {
            let deadline = Date(timeIntervalSinceNow: 90)
            while !((try? String(contentsOf: status, encoding: .utf8))?.contains(text) ?? false) {
                guard Date() < deadline else {
                    throw FixtureError("\"\(text)\" not in the tool's stderr: \((try? String(contentsOf: status, encoding: .utf8)) ?? "")")
                }
                usleep(200_000)
            }
        }
        try terminal.waitFor("\(sshd.keyUser)@")
        try terminal.type("DROPMARK=kept-\(name); echo \"set-$DROPMARK\"")
        try terminal.waitFor("set-kept-\(name)")
        let dropped = try world.edge.admin("drop-tunnels")
        #expect(!dropped.isEmpty)
        try waitForStatus("Connection lost — reconnecting (1/3)…")
        try waitForStatus("Reconnected.")
        try terminal.type("echo \"after-$DROPMARK\"")
        try terminal.waitFor("after-kept-\(name)")
        try terminal.type("exit")
        #expect(try terminal.exitStatus() == 0)
        #expect(try terminal.screen().contains("TTY-RESTORED"))
    }
}
