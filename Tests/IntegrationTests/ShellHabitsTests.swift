import CFAccessSSH
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` with an OpenSSH user's habits (issue 16 points 12, 13, 15, 16): the
/// ~/.ssh/config, ssh's letters, the environment and terminal modes, scripts with a closed
/// stdout, and a terminal free of log lines — against real sshd through the emulator, the tool
/// driven like a person (tmux) or a script.
@Suite("shell mode with OpenSSH habits: ssh_config, ssh's letters, SendEnv, terminal modes, scripts", .serialized, .ownThreads)
struct ShellHabitsTests {
    /// Writes `text` as the world's ~/.ssh/config (0600).
    private func writeConfig(_ text: String, in world: ShellWorld, name: String = "config") throws -> URL {
        let file = world.sshDirectory.appendingPathComponent(name)
        try text.write(to: file, atomically: true, encoding: .utf8)
        chmod(file.path, 0o600)
        return file
    }

    /// The edge and CA flags without a destination.
    private func edgeFlags(_ world: ShellWorld) -> [String] {
        ["--connect-to", "127.0.0.1:\(world.edge.port)", "--ca-file", world.edge.certs.caFile.path]
    }

    @Test("~/.ssh/config: a Host alias gives HostName (the Access hostname), User, IdentityFile, IdentitiesOnly, StrictHostKeyChecking, UserKnownHostsFile; -F and -o; a bad line is one error with file:line")
    func sshConfigHostBlock() throws {
        let world = try ShellWorld()
        let knownHosts = world.home.appendingPathComponent("kh_from_config")
        _ = try writeConfig("""
            # the tool reads this as ssh does
            Host work
                HostName \(testHost)
                User \(world.sshd.keyUser)
                IdentityFile \(world.sshd.clientKeyPath.path)
                IdentitiesOnly yes
                StrictHostKeyChecking accept-new
                UserKnownHostsFile \(knownHosts.path)
                ServerAliveInterval 10
            Host *
                User nobody-from-star
                Port 22
            """, in: world)
        let first = try world.runTool(["shell", "work"] + edgeFlags(world) + ["whoami"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout == "\(world.sshd.keyUser)\n")
        #expect(!first.stderr.contains("Connecting to"), "a command is silent, as in ssh: \(first.stderr)")
        #expect(first.stderr.contains("Permanently added '\(testHost)' (ED25519) to the list of known hosts."))
        #expect(IntegrationTests.knownHosts(try String(contentsOf: knownHosts, encoding: .utf8), names: testHost, key: world.sshd.hostKeyPublicLine))
        #expect(!FileManager.default.fileExists(atPath: world.knownHostsFile.path), "the default known_hosts was written")

        // -o wins over the file; the Port keys the known_hosts entry.
        let port = try world.runTool(["shell", "work", "-o", "Port=2222"] + edgeFlags(world) + ["true"])
        #expect(port.status == 0, "\(port.stderr)")
        #expect(IntegrationTests.knownHosts(try String(contentsOf: knownHosts, encoding: .utf8), names: "[\(testHost)]:2222",
                                            key: world.sshd.hostKeyPublicLine, lines: nil))

        // -F: another file instead (its own Host block; ~/.ssh/config is not read).
        let other = try writeConfig("""
            Host other-name
                HostName \(testHost)
                User \(world.sshd.keyUser)
                IdentityFile \(world.sshd.clientKeyPath.path)
                UserKnownHostsFile \(knownHosts.path)
            """, in: world, name: "other_config")
        let byFile = try world.runTool(["shell", "-F", other.path, "other-name"] + edgeFlags(world) + ["echo", "from-F"])
        #expect(byFile.status == 0, "\(byFile.stderr)")
        #expect(byFile.stdout == "from-F\n")
        let notRead = try world.runTool(["shell", "-F", other.path, "work"] + edgeFlags(world) + ["true"])
        #expect(notRead.status != 0 && notRead.stderr.contains("work"), "\(notRead.stderr)")

        // A malformed line: one line naming the file and line, exit 64, nothing dialled.
        let bad = try writeConfig("Host work\n  HostName \(testHost)\n  Port twenty-two\n", in: world, name: "bad_config")
        let refused = try world.runTool(["shell", "-F", bad.path, "work"] + edgeFlags(world) + ["true"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("\(bad.path):3: Port twenty-two is not a port number"), "\(refused.stderr)")
        let unknown = try writeConfig("Host work\n  Hostnme \(testHost)\n", in: world, name: "typo_config")
        let typo = try world.runTool(["shell", "-F", unknown.path, "work"] + edgeFlags(world) + ["true"])
        #expect(typo.status == 64 && typo.stderr.contains("\(unknown.path):2: Hostnme is not an ssh_config keyword"), "\(typo.stderr)")
        #expect(!refused.stderr.contains("Connecting") && !typo.stderr.contains("Connecting"))
    }

    @Test("the resolution of Host, HostName, User, Port, SendEnv, SetEnv, StrictHostKeyChecking, ServerAliveInterval, IdentitiesOnly and UserKnownHostsFile agrees with real ssh -G")
    func resolutionMatchesOpenSSH() throws {
        try requireRealPart(which("ssh") != nil, "OpenSSH client ssh (package openssh-client)")
        let directory = try makeTempDir("cfat-ssh-g")
        defer { try? FileManager.default.removeItem(at: directory) }
        let included = directory.appendingPathComponent("included.conf")
        try "Host inc*\n  User included\n  Port 2201\nHost *\n  SendEnv INCLUDED_*\n".write(to: included, atomically: true, encoding: .utf8)
        let config = directory.appendingPathComponent("config")
        try """
            Include \(included.path)
            Host alias
                HostName real.example.com
                User alice
                Port 2222
                SetEnv A=1 B=two
                StrictHostKeyChecking accept-new
            Host *.example.com !secret.example.com
                User bob
                ServerAliveInterval 1m30s
                IdentitiesOnly yes
                SendEnv CFAT_* LC_*
            Host secret.example.com
                StrictHostKeyChecking yes
                UserKnownHostsFile /tmp/kh1 /tmp/kh2
            Host *
                SendEnv -LC_* LANG
                SetEnv C=3
                User everyone
                StrictHostKeyChecking ask
                ServerAliveInterval 45
                IdentitiesOnly no
                UserKnownHostsFile /tmp/default_kh
            """.write(to: config, atomically: true, encoding: .utf8)
        let context = SSHConfigContext.current(environment: ["HOME": directory.path, "USER": "cfat-local"])
        let resolver = SSHConfigResolver(files: [try SSHConfigFile.load(path: config.path, kind: .user, checkPermissions: false)!],
                                         context: context)
        for host in ["alias", "git.example.com", "secret.example.com", "inc1", "ALIAS", "plain"] {
            let ours = try resolver.resolve(host: host)
            let ssh = try run("ssh", ["-G", "-F", config.path, host], env: ["HOME": directory.path], timeout: 30)
            #expect(ssh.status == 0, "\(ssh.stderr)")
            var theirs: [String: [String]] = [:]
            for line in ssh.stdout.split(separator: "\n") {
                let parts = line.split(separator: " ", maxSplits: 1)
                guard parts.count == 2 else { continue }
                theirs[String(parts[0]), default: []].append(String(parts[1]))
            }
            #expect(theirs["hostname"] == [ours.hostName], "\(host)")
            #expect(theirs["user"] == [ours.user ?? "root"], "\(host)")
            #expect(theirs["port"] == [String(ours.port ?? 22)], "\(host)")
            #expect((theirs["sendenv"] ?? []) == ours.sendEnv, "\(host)")
            #expect(Set(theirs["setenv"] ?? []) == Set(ours.setEnv.map { "\($0.key)=\($0.value)" }), "\(host)")
            let strict: String
            switch ours.strictHostKeyChecking ?? .ask {
            case .yes: strict = "true"
            case .acceptNew: strict = "accept-new"
            case .no: strict = "false"
            case .ask: strict = "ask"
            }
            #expect(theirs["stricthostkeychecking"] == [strict], "\(host)")
            #expect(theirs["serveraliveinterval"] == [String(ours.serverAliveInterval.map { Int($0.components.seconds) } ?? 0)], "\(host)")
            #expect(theirs["identitiesonly"] == [ours.identitiesOnly == true ? "yes" : "no"], "\(host)")
            #expect(theirs["userknownhostsfile"] == [(ours.userKnownHostsFiles ?? []).joined(separator: " ")], "\(host)")
        }
    }

    @Test("ssh's letters: a command after the destination without --, options after the destination, -q, -T, -tt, and -p keying known_hosts")
    func sshLetters() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let user = "\(world.sshd.keyUser)@\(testHost)"
        let key = ["-i", world.sshd.clientKeyPath.path]

        // `shell host uname -a`: the command's own options are its own.
        let bare = try world.runTool(["shell", user] + edgeFlags(world) + key + ["echo", "-l", "x"])
        #expect(bare.status == 0, "\(bare.stderr)")
        #expect(bare.stdout == "-l x\n")
        // Options right after the destination are ssh's; the first other word starts the command.
        let after = try world.runTool(["shell", user, "-q", "-p", "22"] + edgeFlags(world) + key + ["echo", "-T", "x"])
        #expect(after.status == 0, "\(after.stderr)")
        #expect(after.stdout == "-T x\n")

        // -q: no progress lines.
        #expect(!after.stderr.contains("Connecting") && !after.stderr.contains("Connected"), "\(after.stderr)")
        let loud = try world.runTool(["shell", user] + edgeFlags(world) + key + ["true"])
        #expect(!loud.stderr.contains("Connecting") && !loud.stderr.contains("Connected"), "ssh prints none for a command: \(loud.stderr)")

        // No command, stdin not a terminal: ssh's note, then the login shell reads stdin.
        let piped = try world.runTool(["shell", user] + edgeFlags(world) + key,
                                      stdin: Data("echo from-stdin-$((40+2))\ntty || true\n".utf8))
        #expect(piped.status == 0, "\(piped.stderr)")
        #expect(piped.stdout.contains("from-stdin-42"))
        #expect(piped.stdout.contains("not a tty"))
        #expect(piped.stderr.contains("Pseudo-terminal will not be allocated because stdin is not a terminal."))
        // -T says so itself: no note.
        let noTerminal = try world.runTool(["shell", "-T", user] + edgeFlags(world) + key, stdin: Data("echo t-$((1+1))\n".utf8))
        #expect(noTerminal.status == 0, "\(noTerminal.stderr)")
        #expect(noTerminal.stdout.contains("t-2"))
        #expect(!noTerminal.stderr.contains("Pseudo-terminal"))
        // -tt: a remote terminal even without a local one.
        let forced = try world.runTool(["shell", "-tt", user] + edgeFlags(world) + key + ["tty; exit 6"])
        #expect(forced.status == 6, "\(forced.stderr)")
        #expect(forced.stdout.contains("/dev/pts/"), "\(forced.stdout)")

        // -p is the port the known_hosts entry is keyed to (the edge picks the real server).
        try "[\(testHost)]:2222 \(world.sshd.hostKeyPublicLine)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let keyed = try world.runTool(["shell", user, "-p", "2222"] + edgeFlags(world) + key + ["echo", "keyed"])
        #expect(keyed.status == 0, "\(keyed.stderr)")
        #expect(keyed.stdout == "keyed\n")
        let unkeyed = try world.runTool(["shell", user] + edgeFlags(world) + key + ["echo", "never"])
        #expect(unkeyed.status == 77, "\(unkeyed.stderr)")
        #expect(unkeyed.stderr.contains("Host key verification failed"))
    }

    @Test("LANG and LC_* are sent by default (Debian's SendEnv), SendEnv and SetEnv from ssh_config and -o too; others are not")
    func environmentSent() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let locale = ["LANG": "C.UTF-8", "LC_TIME": "C", "CFAT_SENT": "sent", "CFAT_UNSENT": "kept-home"]
        // No ssh_config of the user's: the system's (or Debian's default) sends the locale.
        let plain = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                      command: ["echo \"$LANG|$LC_TIME|$CFAT_SENT\""]),
                                      environment: locale)
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(plain.stdout == "C.UTF-8|C|\n")

        _ = try writeConfig("Host \(testHost)\n    SetEnv CFAT_SET=from-config\n", in: world)
        let result = try world.runTool(
            ["shell", "\(world.sshd.keyUser)@\(testHost)", "-o", "SendEnv=CFAT_SENT"] + edgeFlags(world)
                + ["-i", world.sshd.clientKeyPath.path, "echo \"$LANG|$LC_TIME|$CFAT_SENT|$CFAT_SET|$CFAT_UNSENT\""],
            environment: locale)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "C.UTF-8|C|sent|from-config|\n")
    }

    @Test("--known-hosts /dev/null and -o UserKnownHostsFile=/dev/null work as in OpenSSH: the host is unknown, --accept-new logs in, nothing is kept (issue 26.3)")
    func knownHostsDevNull() throws {
        let world = try ShellWorld()
        for flags in [["--known-hosts", "/dev/null"], ["-o", "UserKnownHostsFile=/dev/null"]] {
            let result = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                           extra: ["-i", world.sshd.clientKeyPath.path, "--accept-new"] + flags,
                                                           command: ["echo", "through /dev/null"]))
            #expect(result.status == 0, "\(flags): \(result.stderr)")
            #expect(result.stdout == "through /dev/null\n", "\(flags)")
            #expect(!result.stderr.contains("cannot read"), "\(flags): \(result.stderr)")
            // Without --accept-new the host is unknown every time, as with ssh.
            let strict = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                           extra: ["-i", world.sshd.clientKeyPath.path] + flags,
                                                           command: ["echo", "never"]))
            #expect(strict.status == 77, "\(flags): \(strict.stderr)")
            #expect(strict.stderr.contains("The authenticity of host '\(testHost)' can't be established."), "\(flags): \(strict.stderr)")
        }
        let type = try FileManager.default.attributesOfItem(atPath: "/dev/null")[.type] as? FileAttributeType
        #expect(type == .typeCharacterSpecial)
    }

    @Test("terminal modes travel with the PTY request: the remote terminal has the local interrupt and erase characters and flags (on libssh2 while libssh is older than 0.11, which cannot send them)")
    func terminalModes() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let log = world.home.appendingPathComponent("modes.log")
        let tool = try world.toolCommandLine(world.arguments(user: world.sshd.keyUser,
                                                             extra: ["-i", world.sshd.clientKeyPath.path,
                                                                     "--loglevel", "debug", "--logfile", log.path]))
        let terminal = try TmuxTerminal(command: "stty intr '^X' erase '^H' -ixon; " + tool)
        try terminal.waitFor("\(world.sshd.keyUser)@")
        try terminal.type("stty -a | tr ';' '\\n' | grep -E 'intr|erase|ixon' | tr -d ' \\n'; echo \" E$((1+1))ND\"")
        let screen = try terminal.waitFor("E2ND")
        let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        // Linux's defaults for a new pty (what sshd keeps when the request has no modes) are
        // intr=^C, erase=^? and ixon: each of these differs.
        #expect(screen.contains("intr=^X"), "\(screen)")
        #expect(screen.contains("erase=^H"), "\(screen)")
        #expect(screen.contains("-ixon"), "\(screen)")
        #expect(!said.contains("terminal modes are not sent"), "\(said)")
        try terminal.type("exit")
        #expect(try terminal.exitStatus() == 0)
    }

    @Test("a closed stdout (shell … yes | head -1) ends quietly with 255, as ssh does")
    func closedStdout() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let errors = world.home.appendingPathComponent("stderr.log")
        let tool = try world.toolCommandLine(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                             command: ["yes"]))
        let result = try run("bash", ["-c", "\(tool) 2>\(shellQuote(errors.path)) | head -1; echo \"status=${PIPESTATUS[0]}\""],
                             timeout: 120)
        #expect(result.stdout == "y\nstatus=255\n", "\(result.stdout) \(result.stderr)")
        let stderr = try String(contentsOf: errors, encoding: .utf8)
        #expect(!stderr.contains("cannot write") && !stderr.contains("Broken pipe"), "\(stderr)")
        #expect(stderr.isEmpty, "a command is silent: \(stderr)")
        // The session ended: the tunnel is closed, the remote `yes` is gone.
        try world.edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }
    }

    @Test("during a reconnect only the plain status lines reach the terminal, no log records")
    func reconnectWithoutLogLines() throws {
        let sshd = try SSHDFixture()
        var edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let port = edge.port
        let world = try ShellWorld(edge: edge, sshd: sshd)
        try world.trustHostKey()
        // stderr stays on the terminal (the default log level): log records would land there.
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: sshd.keyUser, extra: ["-i", sshd.clientKeyPath.path])))
        try terminal.waitFor("\(sshd.keyUser)@")
        edge.stop()
        // The first attempt fails against the stopped edge before the second is announced.
        try terminal.waitFor("Connection lost — reconnecting (2/3)…", timeout: 90)
        edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                               serviceTokens: [(testTokenID, testTokenSecret)], listen: "127.0.0.1:\(port)")
        try terminal.waitFor("Reconnected.", timeout: 90)
        try terminal.type("echo back-$((6*7))")
        try terminal.waitFor("back-42")
        try terminal.type("exit")
        #expect(try terminal.exitStatus() == 0)
        let screen = try terminal.screen()
        let logLine = try Regex(#"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (DBG|INF|WRN|ERR|TRC|NOT|CRT) "#)
        #expect(screen.firstMatch(of: logLine) == nil, "a log record reached the terminal:\n\(screen)")
        #expect(!screen.contains("reconnect attempt"), "\(screen)")
        #expect(screen.contains("Connection lost — reconnecting (1/3)…"))
        withExtendedLifetime(edge) {}
    }
}
