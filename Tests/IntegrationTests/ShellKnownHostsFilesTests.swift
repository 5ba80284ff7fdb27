import Foundation
import Testing

/// Issue 25 part 2 point 1: every known_hosts file counts, as in OpenSSH: the system's
/// (`GlobalKnownHostsFile`, `/etc/ssh/ssh_known_hosts` by default) and every `UserKnownHostsFile`.
/// Real sshd behind websockify (Debian's WebSocket server, not our emulator), on both engines.
@Suite("shell reads every known_hosts file", .serialized, .ownThreads)
struct ShellKnownHostsFilesTests {
    /// An ed25519 public key that is not sshd's, as a known_hosts key field.
    private func strangerKey(in world: WebsockifyShellWorld) throws -> String {
        let key = world.file("stranger")
        try generateKey(at: key, comment: "stranger")
        let line = try String(contentsOf: key.appendingPathExtension("pub"), encoding: .utf8)
        return line.split(separator: " ").prefix(2).joined(separator: " ")
    }

    @Test("a key pinned for the host in the system file is a changed key: refused with --accept-new, naming that file; nothing is added to the user's file", arguments: ShellEngine.allCases)
    func globalPinBeatsAcceptNew(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let global = world.file("ssh_known_hosts")
        try "\(testHost) \(try strangerKey(in: world))\n".write(to: global, atomically: true, encoding: .utf8)
        let user = world.file(".ssh/known_hosts")
        let result = try world.run(engine, ["--accept-new", "-o", "GlobalKnownHostsFile=\(global.path)"])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!"), "\(result.stderr)")
        #expect(result.stderr.contains("Offending ED25519 key in \(global.path):1"), "\(result.stderr)")
        #expect(result.stderr.contains("ssh-keygen -f \"\(global.path)\" -R \"\(testHost)\""), "\(result.stderr)")
        #expect(!result.stderr.contains("Permanently added"))
        #expect(result.stdout.isEmpty)
        let userText = (try? String(contentsOf: user, encoding: .utf8)) ?? ""
        #expect(userText.isEmpty, "\(userText)")
        #expect(!world.sshd.logText.contains("Accepted publickey"), "no credential after a refused host key")
    }

    @Test("@revoked in the system file refuses the key even when the user's file trusts it and with --accept-new", arguments: ShellEngine.allCases)
    func globalRevocation(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let global = world.file("ssh_known_hosts")
        try "@revoked \(testHost) \(world.sshd.hostKeyPublicLine)\n".write(to: global, atomically: true, encoding: .utf8)
        let user = world.file(".ssh/known_hosts")
        try "\(testHost) \(world.sshd.hostKeyPublicLine)\n".write(to: user, atomically: true, encoding: .utf8)
        let result = try world.run(engine, ["--accept-new", "-o", "GlobalKnownHostsFile=\(global.path)"])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("WARNING: REVOKED HOST KEY DETECTED!"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("a key known only to the system file, or to a second UserKnownHostsFile, is trusted without a question, and the first user file is left alone", arguments: ShellEngine.allCases)
    func keyInAnotherFile(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let global = world.file("ssh_known_hosts")
        try "\(testHost) \(world.sshd.hostKeyPublicLine)\n".write(to: global, atomically: true, encoding: .utf8)
        let first = world.file(".ssh/known_hosts")
        let viaGlobal = try world.run(engine, ["-o", "GlobalKnownHostsFile=\(global.path)", "-o", "StrictHostKeyChecking=yes"])
        #expect(viaGlobal.status == 0, "\(viaGlobal.stderr)")
        #expect(viaGlobal.stdout == "reached\n")
        #expect(!FileManager.default.fileExists(atPath: first.path))

        let second = world.file("second_known_hosts")
        try "\(testHost) \(world.sshd.hostKeyPublicLine)\n".write(to: second, atomically: true, encoding: .utf8)
        let viaSecond = try world.run(engine, ["-o", "UserKnownHostsFile=\(first.path) \(second.path)", "-o", "GlobalKnownHostsFile=none",
                                               "-o", "StrictHostKeyChecking=yes"])
        #expect(viaSecond.status == 0, "\(viaSecond.stderr)")
        #expect(viaSecond.stdout == "reached\n")
        #expect(!FileManager.default.fileExists(atPath: first.path))

        // Known nowhere: strict checking refuses it; with --accept-new it goes to the first user file.
        let unknown = try world.run(engine, ["-o", "UserKnownHostsFile=\(first.path) \(world.file("empty").path)",
                                             "-o", "GlobalKnownHostsFile=none", "--accept-new"])
        #expect(unknown.status == 0, "\(unknown.stderr)")
        #expect(knownHosts(try String(contentsOf: first, encoding: .utf8), names: testHost, key: world.sshd.hostKeyPublicLine))
    }

    // MARK: Point 5: ssh_config keywords that change what ssh does are followed, or refused in one line

    @Test("HashKnownHosts and HostKeyAlias: the entry added is hashed (or plain with no) and names the alias; RemoteCommand runs when the command line has none, and both are ssh's error", arguments: ShellEngine.allCases)
    func knownHostsAndCommandKeywords(engine: ShellEngine) throws {
        let world = try WebsockifyShellWorld()
        let user = world.file(".ssh/known_hosts")
        let plain = try world.run(engine, ["--accept-new", "-o", "HashKnownHosts=no", "-o", "GlobalKnownHostsFile=none"])
        #expect(plain.status == 0, "\(plain.stderr)")
        #expect(try String(contentsOf: user, encoding: .utf8) == "\(testHost) \(world.sshd.hostKeyPublicLine)\n")

        try FileManager.default.removeItem(at: user)
        let aliased = try world.run(engine, ["--accept-new", "-o", "HashKnownHosts=yes", "-o", "HostKeyAlias=alias.cfat.test",
                                             "-o", "GlobalKnownHostsFile=none"])
        #expect(aliased.status == 0, "\(aliased.stderr)")
        #expect(aliased.stderr.contains("Permanently added 'alias.cfat.test' (ED25519)"), "\(aliased.stderr)")
        let hashed = try String(contentsOf: user, encoding: .utf8)
        #expect(hashed.hasPrefix("|1|"), "\(hashed)")
        #expect(knownHosts(hashed, names: "alias.cfat.test", key: world.sshd.hostKeyPublicLine))
        #expect(!knownHosts(hashed, names: testHost, key: world.sshd.hostKeyPublicLine))

        let configured = try world.run(engine, ["--accept-new", "-o", "RemoteCommand=echo from-config"], command: nil)
        #expect(configured.status == 0, "\(configured.stderr)")
        #expect(configured.stdout == "from-config\n")
        let both = try world.run(engine, ["-o", "RemoteCommand=echo from-config"])
        #expect(both.status == 64 && both.stderr.contains("Cannot execute command-line and remote command."), "\(both.stderr)")
    }

    @Test("authentication keywords: PubkeyAuthentication=no and PreferredAuthentications without publickey keep the key unused (refused, never offered); another order, and algorithm lists, are refused in one line naming the keyword")
    func authenticationKeywords() throws {
        let world = try WebsockifyShellWorld()
        for extra in [["-o", "PubkeyAuthentication=no"], ["-o", "PreferredAuthentications=password"]] {
            let refused = try world.run(.command, ["--accept-new", "-o", "BatchMode=yes"] + extra)
            #expect(refused.status == 77, "\(extra): \(refused.stderr)")
            #expect(refused.stdout.isEmpty)
        }
        #expect(!world.sshd.logText.contains("Accepted publickey"), "the key was offered: \(world.sshd.logText.suffix(800))")
        let allowed = try world.run(.command, ["--accept-new", "-o", "PreferredAuthentications=publickey,password"])
        #expect(allowed.status == 0 && allowed.stdout == "reached\n", "\(allowed.stderr)")

        let order = try world.run(.command, ["-o", "PreferredAuthentications=password,publickey"])
        #expect(order.status == 64 && order.stderr.contains("PreferredAuthentications password,publickey: only OpenSSH's default order"),
                "\(order.stderr)")
        for keyword in ["Ciphers=aes128-ctr", "KexAlgorithms=curve25519-sha256", "HostKeyAlgorithms=ssh-ed25519", "MACs=hmac-sha2-256"] {
            let name = String(keyword.prefix { $0 != "=" })
            let result = try world.run(.command, ["-o", keyword])
            #expect(result.status == 64, "\(keyword): \(result.stderr)")
            #expect(result.stderr.contains("\(name) is not supported by this client"), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "one line: \(result.stderr)")
        }
    }

    @Test("BatchMode=yes on a terminal: no password question and no host-key question; the login fails at once, as ssh's does")
    func batchModeNeverAsks() throws {
        let world = try WebsockifyShellWorld()
        let binary = try TestPaths.binary("cf-access-tcp").path
        for extra in [["--accept-new"], []] {
            let arguments = try world.arguments(.command, ["-o", "BatchMode=yes"] + extra, user: world.sshd.passwordUser)
            let line = (["env", "-u", "SSH_AUTH_SOCK", "-u", "DBUS_SESSION_BUS_ADDRESS", "HOME=\(world.home.path)", "USER=nobody-cfat",
                         shellQuote(binary)] + arguments.map(shellQuote)).joined(separator: " ")
            let terminal = try TmuxTerminal(command: line)
            let status = try terminal.exitStatus(timeout: 60)
            let screen = try terminal.screen()
            #expect(status == 77, "\(extra): \(screen)")
            #expect(!screen.contains("password:") && !screen.contains("Are you sure you want to continue connecting"), "\(screen)")
        }
    }
}
