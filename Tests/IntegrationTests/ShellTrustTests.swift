import CFAccessSSH
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` against hostile and misconfigured SSH servers (issue 16, points 1–4
/// and 9): a paramiko server (`scripts/hostile-ssh.py`) or a real sshd behind the emulator.
/// The engines a shell session runs on (issue 16 point 15): libssh for a command, libssh2 for a
/// terminal (`-tt`) while libssh is older than 0.11 (it cannot send terminal modes). The tests
/// of points 1–4 run on both.
enum ShellEngine: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case command
    case terminal

    /// The tool's flags for this engine.
    var flags: [String] { self == .terminal ? ["-tt"] : [] }

    /// The client identification the server sees (paramiko's `client` event).
    var clientEvent: String {
        self == .terminal && !SSHEngineKind.libssh.sendsTerminalModes ? "client SSH-2.0-libssh2_" : "client SSH-2.0-libssh_"
    }

    /// Whether `events` (a paramiko server's) show this engine's identification.
    func ran(in events: [String]) -> Bool {
        events.contains { $0.hasPrefix(clientEvent) }
    }

    var testDescription: String {
        self == .terminal ? "a terminal (-tt)" : "a command"
    }
}

@Suite("shell mode against hostile and misconfigured servers", .serialized, .ownThreads)
struct ShellTrustTests {
    /// A world whose emulator reaches `target` (the hostile server), with a real sshd next to it
    /// (unused by these tests, required by the world).
    private func world(reaching target: String) throws -> ShellWorld {
        let edge = try EdgeFixture(certs: try certs(), target: target, serviceTokens: [(testTokenID, testTokenSecret)])
        return try ShellWorld(edge: edge, sshd: try SSHDFixture())
    }

    // MARK: Point 1: a key of another type is a changed key; known types are asked for first

    @Test("a known host presenting a key of ANOTHER type: refused as a changed key, with --accept-new too, never called unknown, never added", arguments: ShellEngine.allCases)
    func otherKeyTypeRefused(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ecdsa"])
        let world = try world(reaching: server.address)
        let known = "\(testHost) \(try server.otherKey("ed25519"))\n"
        try known.write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        for extra in [["--accept-new"], []] {
            let result = try world.runTool(world.arguments(user: "me", extra: engine.flags + extra, command: ["true"]))
            #expect(result.status == 77, "\(extra): \(result.stderr)")
            #expect(result.stderr.contains("WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!"), "\(extra): \(result.stderr)")
            #expect(result.stderr.contains("The fingerprint for the ECDSA key sent by the remote host is"))
            #expect(result.stderr.contains("Offending ED25519 key in \(world.knownHostsFile.path):1"))
            #expect(result.stderr.contains("Host key for \(testHost) has changed and you have requested strict checking."))
            #expect(!result.stderr.contains("can't be established"), "the host is not unknown: \(result.stderr)")
            #expect(!result.stderr.contains("Permanently added"))
            #expect(result.stdout.isEmpty)
        }
        #expect(try String(contentsOf: world.knownHostsFile, encoding: .utf8) == known)
        #expect(!server.events.contains { $0.hasPrefix("auth-") }, "no authentication after a refused key: \(server.events)")
        #expect(engine.ran(in: server.events), "\(server.events)")
    }

    @Test("a server with ECDSA and ED25519 host keys presents the type known_hosts already has (the key exchange asks for it first)", arguments: ShellEngine.allCases)
    func knownTypeAskedFirst(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ecdsa", "ed25519"])
        let world = try world(reaching: server.address)
        for (type, algorithm) in [("ed25519", "ssh-ed25519"), ("ecdsa", "ecdsa-sha2-nistp256")] {
            try "\(testHost) \(server.publicLines[type]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
            let before = server.events.filter { $0.hasPrefix("hostkey ") }.count
            let result = try world.runTool(world.arguments(user: "me", extra: engine.flags, command: ["true"]))
            #expect(result.status == 0, "known \(type): \(result.stderr)")
            #expect(result.stdout == "ran\n")
            let negotiated = server.events.filter { $0.hasPrefix("hostkey ") }.dropFirst(before)
            #expect(Array(negotiated) == ["hostkey \(algorithm)"], "known \(type): \(server.events)")
        }
        #expect(engine.ran(in: server.events), "\(server.events)")
        #expect(server.events.contains("pty") == (engine == .terminal), "\(server.events)")
    }

    @Test("-C asks for compression (issue 25.2.6): the server sees zlib chosen; without it, none", arguments: ShellEngine.allCases)
    func compression(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"])
        let world = try world(reaching: server.address)
        try "\(testHost) \(server.publicLines["ed25519"]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        for (flags, expected) in [(["-C"], true), ([], false)] {
            let before = server.events.count
            let result = try world.runTool(world.arguments(user: "me", extra: engine.flags + flags, command: ["true"]))
            #expect(result.status == 0, "\(flags): \(result.stderr)")
            let chosen = server.events.dropFirst(before).filter { $0.hasPrefix("compression ") }
            #expect(chosen.count == 1 && chosen.allSatisfy { $0.hasPrefix("compression zlib") == expected }, "\(flags): \(server.events)")
        }
    }

    @Test("a server that opens channels never asked for (its own agent channel, a forwarded-tcpip for a port nobody forwarded) gets none of them; the command runs as usual", arguments: ShellEngine.allCases)
    func unsolicitedChannels(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"], extra: ["--open-inbound"])
        let world = try world(reaching: server.address)
        try "\(testHost) \(server.publicLines["ed25519"]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let result = try world.runTool(world.arguments(user: "me", extra: engine.flags, command: ["true"]))
        #expect(result.status == 0 && result.stdout == "ran\n", "\(result.stderr)")
        for kind in ["auth-agent@openssh.com", "forwarded-tcpip"] {
            let seen = server.events.filter { $0.hasPrefix("inbound \(kind) ") }
            #expect(seen.count == 1 && !seen[0].hasSuffix(" opened"), "\(kind): \(server.events)")
        }
        #expect(engine.ran(in: server.events), "\(server.events)")
    }

    // MARK: Point 3: markers, patterns, destinations

    @Test("@revoked: refused with OpenSSH's warning even with --accept-new, and known_hosts is left alone", arguments: ShellEngine.allCases)
    func revokedHostKey(engine: ShellEngine) throws {
        let world = try ShellWorld()
        let known = "@revoked *.cfat.test \(world.sshd.hostKeyPublicLine)\n\(testHost) \(world.sshd.hostKeyPublicLine)\n"
        try known.write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: engine.flags + ["-i", world.sshd.clientKeyPath.path, "--accept-new"],
                                                       command: ["echo", "never"]))
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("WARNING: REVOKED HOST KEY DETECTED!"))
        #expect(result.stderr.contains("The ED25519 host key for \(testHost) is marked as revoked."))
        #expect(result.stderr.contains("ED25519 host key for \(testHost) was revoked and you have requested strict checking."))
        #expect(result.stdout.isEmpty)
        #expect(try String(contentsOf: world.knownHostsFile, encoding: .utf8) == known)
        #expect(!world.sshd.logText.contains("Accepted publickey"))
    }

    @Test("patterns: a wildcard entry matches (nothing added); a negated one excludes the host; @cert-authority does not vouch for a plain key", arguments: ShellEngine.allCases)
    func patternsAndCertificateAuthorities(engine: ShellEngine) throws {
        let world = try ShellWorld()
        let key = ["-i", world.sshd.clientKeyPath.path]
        let wildcard = "*.cfat.test,other.example \(world.sshd.hostKeyPublicLine)\n"
        try wildcard.write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let matched = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: engine.flags + key + ["--accept-new"], command: ["echo", "wild"]))
        #expect(matched.status == 0, "\(matched.stderr)")
        #expect(matched.stdout.replacingOccurrences(of: "\r", with: "") == "wild\n")
        #expect(try String(contentsOf: world.knownHostsFile, encoding: .utf8) == wildcard, "a matching pattern adds nothing")

        for excluded in ["*.cfat.test,!\(testHost) \(world.sshd.hostKeyPublicLine)\n",
                         "@cert-authority *.cfat.test \(world.sshd.hostKeyPublicLine)\n"] {
            try excluded.write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
            let unknown = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: engine.flags + key, command: ["echo", "never"]))
            #expect(unknown.status == 77, "\(excluded): \(unknown.stderr)")
            #expect(unknown.stderr.contains("The authenticity of host '\(testHost)' can't be established."), "\(excluded): \(unknown.stderr)")
        }
    }

    @Test("user@host:22 is refused (no bogus 'host:22' entry); ssh://user@host:PORT is read as OpenSSH reads it")
    func destinationWithPort() throws {
        let world = try ShellWorld()
        let key = ["-i", world.sshd.clientKeyPath.path, "--accept-new"]
        let refused = try world.runTool(["shell", "\(world.sshd.keyUser)@\(testHost):22", "--connect-to", "127.0.0.1:\(world.edge.port)",
                                         "--ca-file", world.edge.certs.caFile.path] + key + ["--", "true"])
        #expect(refused.status == 64, "\(refused.stderr)")
        #expect(refused.stderr.contains("the destination \(testHost):22 is not a host name: give the port with -p 22, "
                                        + "or write ssh://\(world.sshd.keyUser)@\(testHost):22"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("Connecting"))
        #expect(!FileManager.default.fileExists(atPath: world.knownHostsFile.path))

        for (port, entry) in [(22, testHost), (2222, "[\(testHost)]:2222")] {
            let url = try world.runTool(["shell", "ssh://\(world.sshd.keyUser)@\(testHost):\(port)", "--connect-to",
                                         "127.0.0.1:\(world.edge.port)", "--ca-file", world.edge.certs.caFile.path] + key + ["--", "echo", "url"])
            #expect(url.status == 0, "\(url.stderr)")
            #expect(url.stdout == "url\n")
            let known = try String(contentsOf: world.knownHostsFile, encoding: .utf8)
            #expect(knownHosts(known, names: entry, key: world.sshd.hostKeyPublicLine, lines: nil), "\(known)")
        }
        let known = try String(contentsOf: world.knownHostsFile, encoding: .utf8)
        #expect(!knownHosts(known, names: "\(testHost):22", key: world.sshd.hostKeyPublicLine, lines: nil), "\(known)")
    }

    // MARK: Point 2: server text is visible-safe

    @Test("escape sequences in keyboard-interactive texts and the exit-signal name reach the terminal as visible text: the title stays, the screen is not cleared", arguments: ShellEngine.allCases)
    func escapesOnTheTerminal(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"], extra: [
            "--auth", "kbd", "--kbd-name", "\\x1b]0;pwned-name\\x07", "--kbd-instruction", "\\x1b[2J\\x1b[31mcleared",
            "--kbd-prompt", "Code\\x1b]2;pwned-prompt\\x07: ", "--answer", "right", "--exec-signal", "TERM\\x1b]0;pwned-signal\\x07",
        ])
        let world = try world(reaching: server.address)
        try "\(testHost) \(server.publicLines["ed25519"]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let terminal = try TmuxTerminal(command: "echo cfat-before-the-tool; "
                                        + (try world.toolCommandLine(world.arguments(user: "me", extra: engine.flags, command: ["true"]))))
        let title = try terminal.control(["display-message", "-p", "-t", "t", "#{pane_title}"])
        try terminal.waitFor("Code\\033]2;pwned-prompt\\007: ")
        try terminal.type("right")
        #expect(try terminal.exitStatus() == 255, "an unknown signal name gives 128 + 127")
        let screen = try terminal.screen()
        #expect(screen.contains("cfat-before-the-tool"), "the screen was cleared:\n\(screen)")
        #expect(screen.contains("\\033]0;pwned-name\\007"))
        #expect(screen.contains("\\033[2J\\033[31mcleared"))
        #expect(screen.contains("killed by signal TERM\\033]0;pwned-signal\\007"))
        #expect(try terminal.control(["display-message", "-p", "-t", "t", "#{pane_title}"]) == title)
        #expect(server.events.contains("answer right"))
        #expect(engine.ran(in: server.events), "\(server.events)")
    }

    @Test("escape sequences in a disconnect message, an exit-signal name and the method list never reach stderr raw", arguments: ShellEngine.allCases)
    func escapesOnStderr(engine: ShellEngine) throws {
        let disconnecting = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"], extra: [
            "--auth", "disconnect", "--disconnect-text", "go away\\x1b]0;pwned\\x07\\x1b[2J",
        ])
        let world = try world(reaching: disconnecting.address)
        try "\(testHost) \(disconnecting.publicLines["ed25519"]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let result = try world.runTool(world.arguments(user: "me", extra: engine.flags, command: ["true"]))
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("Authentication failed: the SSH server disconnected: go away\\033]0;pwned\\007\\033[2J"),
                "\(result.stderr)")
        #expect(!result.stderr.utf8.contains(0x1B) && !result.stderr.utf8.contains(0x07))

        let signalling = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"], extra: ["--exec-signal", "KILL\\x1b[2J\\r"])
        let second = try self.world(reaching: signalling.address)
        try "\(testHost) \(signalling.publicLines["ed25519"]!)\n".write(to: second.knownHostsFile, atomically: true, encoding: .utf8)
        let killed = try second.runTool(second.arguments(user: "me", extra: engine.flags, command: ["true"]))
        #expect(killed.status == 255, "\(killed.stderr)")
        #expect(killed.stderr.contains("the remote command was killed by signal KILL\\033[2J\\015"))
        #expect(!killed.stderr.utf8.contains(0x1B) && !killed.stderr.utf8.contains(0x0D))
        #expect(engine.ran(in: disconnecting.events) && engine.ran(in: signalling.events), "\(signalling.events)")
    }

    // MARK: Point 4: every wait bounded

    @Test("an endless stream of lines before the identification ends: a fast one as 'not an SSH server', a slow one at --timeout", arguments: ShellEngine.allCases)
    func endlessPreBanner(engine: ShellEngine) throws {
        let flood = try HostileSSHServer(mode: "prebanner-flood")
        let world = try world(reaching: flood.address)
        let flooded = try world.runTool(world.arguments(user: "me", extra: engine.flags + ["--timeout", "20"], command: ["true"]), timeout: 120)
        #expect(flooded.status == 76, "\(flooded.stderr)")
        #expect(flooded.stderr.contains("The peer is not an SSH server: it sent more than 1024 lines and no SSH identification "
                                        + "(it began \"This is not an SSH server yet"), "\(flooded.stderr)")

        let drip = try HostileSSHServer(mode: "prebanner-drip")
        let slow = try self.world(reaching: drip.address)
        let dripped = try slow.runTool(slow.arguments(user: "me", extra: engine.flags + ["--timeout", "5"], command: ["true"]), timeout: 120)
        #expect(dripped.status == 69, "\(dripped.stderr)")
        #expect(dripped.stderr.contains("Connection timed out: the server sent "), "\(dripped.stderr)")
        #expect(dripped.stderr.contains("lines but no SSH identification within 5 s (it began \"still warming up, line 1\")"))
    }

    @Test("a 1 MiB junk banner is 'not an SSH server', not 'did not answer'", arguments: ShellEngine.allCases)
    func junkBanner(engine: ShellEngine) throws {
        let junk = try HostileSSHServer(mode: "junk-banner")
        let world = try world(reaching: junk.address)
        let result = try world.runTool(world.arguments(user: "me", extra: engine.flags + ["--timeout", "20"], command: ["true"]), timeout: 120)
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("The peer is not an SSH server: it sent 8192 bytes without a line end and no SSH identification"),
                "\(result.stderr)")
        #expect(!result.stderr.contains("timed out"))
    }

    @Test("an empty authentication-method list (here: only a name no one knows, full of escapes) is 'no authentication method offered'", arguments: ShellEngine.allCases)
    func emptyMethodList(engine: ShellEngine) throws {
        let server = try HostileSSHServer(mode: "ssh", hostKeys: ["ed25519"], extra: ["--auth", "empty", "--methods", "\\x1b]0;x\\x07"])
        let world = try world(reaching: server.address)
        try "\(testHost) \(server.publicLines["ed25519"]!)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let result = try world.runTool(world.arguments(user: "me", extra: engine.flags, command: ["true"]))
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.contains("Authentication failed: no authentication method offered by the server for me@\(testHost)"),
                "\(result.stderr)")
        #expect(!result.stderr.utf8.contains(0x1B))
        #expect(engine.ran(in: server.events), "\(server.events)")
    }

    @Test("a wedged session bus (accepts, never answers) does not hang the password path: one line at --timeout, then the prompt")
    func wedgedSecretService() throws {
        let bus = try WedgedBus()
        let world = try ShellWorld()
        try world.trustHostKey()
        let user = world.sshd.passwordUser
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: user, extra: ["--timeout", "5"], command: ["echo", "past-the-bus"]),
            environment: ["DBUS_SESSION_BUS_ADDRESS": bus.address]))
        try terminal.waitFor("\(user)@\(testHost)'s password: ", timeout: 90)
        #expect(bus.accepted, "the store never reached the wedged bus")
        let screen = try terminal.screen()
        #expect(screen.contains("cf-access-tcp: the saved password cannot be looked up: the Secret Service (D-Bus) did not answer within 5 s"),
                "\(screen)")
        try terminal.type(world.sshd.password)
        #expect(try terminal.exitStatus() == 0)
        #expect(try terminal.screen().contains("past-the-bus"))
    }

    // MARK: Point 9: RSA (libssh signs and verifies rsa-sha2; libssh2 1.10 does not)

    @Test("a server with only an RSA host key (OpenSSH 9.2, and paramiko without ssh-rsa) logs in; a terminal session runs on libssh then (known RSA key, decided before connecting), or connects again on libssh when libssh2 found the unknown server RSA-only (a typed limitation, not a message)", arguments: ShellEngine.allCases)
    func rsaOnlyHostKey(engine: ShellEngine) throws {
        let sshd = try SSHDFixture(hostKeyType: "rsa")
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)", serviceTokens: [(testTokenID, testTokenSecret)])
        let real = try ShellWorld(edge: edge, sshd: sshd)
        try real.trustHostKey()
        let paramiko = try HostileSSHServer(mode: "ssh", hostKeys: ["rsa"], extra: ["--no-ssh-rsa"])
        let hostile = try world(reaching: paramiko.address)
        try "\(testHost) \(paramiko.publicLines["rsa"]!)\n".write(to: hostile.knownHostsFile, atomically: true, encoding: .utf8)
        let libssh2Terminal = engine == .terminal && !SSHEngineKind.libssh.sendsTerminalModes
        for (name, world, user) in [("sshd", real, sshd.keyUser), ("paramiko", hostile, "me")] {
            let log = world.home.appendingPathComponent("rsa-host.log")
            let extra = engine.flags + (name == "sshd" ? ["-i", sshd.clientKeyPath.path] : []) + ["--loglevel", "debug", "--logfile", log.path]
            let result = try world.runTool(world.arguments(user: user, extra: extra, command: ["echo", "rsa-host"]))
            #expect(result.status == 0, "\(name): \(result.stderr)")
            #expect(result.stdout.replacingOccurrences(of: "\r", with: "") == (name == "sshd" ? "rsa-host\n" : "ran\n"), "\(name)")
            if libssh2Terminal {
                let said = try String(contentsOf: log, encoding: .utf8)
                #expect(said.contains("the session runs on \(SSHEngineFeatures.libssh.version): the host's known key is an RSA key, which libssh2 "),
                        "\(said)")
            }
        }
        #expect(paramiko.events.contains { $0.hasPrefix("client SSH-2.0-libssh_") }, "\(paramiko.events)")

        // Not yet known: libssh2 meets the RSA-only server in the key exchange, then libssh logs in.
        try FileManager.default.removeItem(at: hostile.knownHostsFile)
        let log = hostile.home.appendingPathComponent("rsa-new.log")
        let added = try hostile.runTool(hostile.arguments(user: "me", extra: engine.flags + ["--accept-new", "--loglevel", "debug", "--logfile", log.path],
                                                          command: ["echo", "rsa-host"]))
        #expect(added.status == 0, "\(added.stderr)")
        #expect(knownHosts(try String(contentsOf: hostile.knownHostsFile, encoding: .utf8), names: testHost,
                           key: paramiko.publicLines["rsa"]!.trimmingCharacters(in: .newlines)))
        let said = try String(contentsOf: log, encoding: .utf8)
        #expect(said.contains("the session runs on \(SSHEngineFeatures.libssh.version): the server needs RSA, which libssh2 1.")
                == libssh2Terminal, "\(said)")
        #expect(said.contains("The SSH server has only an RSA host key") == libssh2Terminal, "\(said)")
        #expect(added.stderr.contains("Permanently added '\(testHost)' (RSA)"), "\(added.stderr)")
        #expect(!added.stderr.contains("Connecting to"), "a command is silent: \(added.stderr)")
        #expect(!added.stderr.contains("RSA keys need"), "\(added.stderr)")
    }

    @Test("an RSA user key against OpenSSH 9.2 (which refuses ssh-rsa signatures) logs in, in a terminal session too: on libssh whenever an RSA key is among those to offer, decided before the login, so no key is offered twice and nothing is asked twice", arguments: ShellEngine.allCases)
    func rsaUserKey(engine: ShellEngine) throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let key = world.home.appendingPathComponent("id_rsa_user")
        try generateKey(at: key, comment: "cfat-rsa", type: "rsa")
        let authorized = world.sshd.directory.appendingPathComponent("authorized_keys/\(world.sshd.keyUser)")
        let handle = try FileHandle(forWritingTo: authorized)
        handle.seekToEndOfFile()
        handle.write(try Data(contentsOf: key.appendingPathExtension("pub")))
        try handle.close()
        let log = world.home.appendingPathComponent("rsa-user.log")
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                       extra: engine.flags + ["-i", key.path, "--loglevel", "debug", "--logfile", log.path],
                                                       command: ["echo", "rsa-user"]))
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.replacingOccurrences(of: "\r", with: "") == "rsa-user\n")
        #expect(!result.stderr.contains("RSA keys need"), "\(result.stderr)")
        let said = try String(contentsOf: log, encoding: .utf8)
        let libssh2Terminal = engine == .terminal && !SSHEngineKind.libssh.sendsTerminalModes
        let onLibssh = "the session runs on \(SSHEngineFeatures.libssh.version): a key to offer is an RSA key"
        #expect(said.contains(onLibssh) == libssh2Terminal, "\(said)")
        guard engine == .terminal else { return }

        // A key the server does not know first, then the RSA key: libssh from the start (no
        // second connection); no notice, one progress line.
        let stranger = world.home.appendingPathComponent("id_stranger")
        try generateKey(at: stranger, comment: "cfat-stranger")
        let laterLog = world.home.appendingPathComponent("rsa-later.log")
        let later = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                      extra: engine.flags + ["-i", stranger.path, "-i", key.path,
                                                                             "--loglevel", "debug", "--logfile", laterLog.path],
                                                      command: ["echo", "rsa-later"]))
        #expect(later.status == 0, "\(later.stderr)")
        #expect(later.stdout.replacingOccurrences(of: "\r", with: "") == "rsa-later\n")
        #expect(!later.stderr.contains("RSA keys need") && !later.stderr.contains("password"), "\(later.stderr)")
        #expect(!later.stderr.contains("Connecting to"), "a command is silent: \(later.stderr)")
        let laterSaid = try String(contentsOf: laterLog, encoding: .utf8)
        #expect(laterSaid.contains(onLibssh) == libssh2Terminal, "\(laterSaid)")
        #expect(!laterSaid.contains("the server needs RSA"), "no second connection: \(laterSaid)")

        // The server's ed25519 key first, the RSA key after it: still libssh (the RSA key might be
        // needed, and a second connection would offer the first key again).
        let firstLog = world.home.appendingPathComponent("rsa-second.log")
        let first = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                      extra: engine.flags + ["-i", world.sshd.clientKeyPath.path, "-i", key.path,
                                                                             "--loglevel", "debug", "--logfile", firstLog.path],
                                                      command: ["echo", "ed25519-first"]))
        #expect(first.status == 0, "\(first.stderr)")
        let firstSaid = try String(contentsOf: firstLog, encoding: .utf8)
        #expect(firstSaid.contains(onLibssh) == libssh2Terminal, "\(firstSaid)")
        #expect(!firstSaid.contains("the server needs RSA"), "\(firstSaid)")
    }
}
