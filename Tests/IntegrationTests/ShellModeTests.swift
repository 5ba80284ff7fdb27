import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` without a terminal: exec, stdin, exit status, host keys, keys, agent,
/// plain failures (issue 10), against a real sshd through the emulator.
@Suite("shell mode: commands, host keys, keys, errors", .serialized, .ownThreads)
struct ShellModeTests {
    @Test("exec: stdout and stderr stay apart and the remote exit status is the tool's")
    func execStatusAndStreams() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                       command: ["printf ok; printf oops >&2; exit 3"]))
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stdout == "ok")
        #expect(result.stderr.contains("oops"))
        #expect(!result.stderr.contains("Connecting to") && !result.stderr.contains("Connected to"),
                "a command is silent, as in ssh (issue 25.2.6): \(result.stderr)")
        // The session ended with a disconnect, and the tunnel closed.
        try world.edge.waitForStats(host: testHost) { $0.activeTunnels == 0 && $0.upgradesAccepted == 1 }
    }

    @Test("exec: a remote command killed by a signal gives 128 + its number, and a line saying so")
    func execKilledBySignal() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                       command: ["printf before; kill -TERM $$"]))
        #expect(result.status == 143, "\(result.stderr)")
        #expect(result.stdout == "before")
        #expect(result.stderr.contains("the remote command was killed by signal TERM"))
    }

    @Test("exec: stdin piped to the tool reaches the remote command (wc -c)")
    func execForwardsStdin() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let input = Data(try randomBytes(300_000))
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                       command: ["wc", "-c"]), stdin: input)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "300000")
    }

    @Test("keys: ~/.ssh/id_ed25519 is found without -i; an agent's key works without any key file")
    func defaultKeyAndAgent() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let key = world.sshDirectory.appendingPathComponent("id_ed25519")
        try FileManager.default.copyItem(at: world.sshd.clientKeyPath, to: key)
        let byFile = try world.runTool(world.arguments(user: world.sshd.keyUser, command: ["echo", "by-file"]))
        #expect(byFile.status == 0, "\(byFile.stderr)")
        #expect(byFile.stdout == "by-file\n")
        try FileManager.default.removeItem(at: key)

        let agent = try AgentFixture(key: world.sshd.clientKeyPath)
        let byAgent = try world.runTool(world.arguments(user: world.sshd.keyUser, command: ["echo", "by-agent"]),
                                        environment: ["SSH_AUTH_SOCK": agent.socket])
        #expect(byAgent.status == 0, "\(byAgent.stderr)")
        #expect(byAgent.stdout == "by-agent\n")
        // Without the agent and without keys: no way in.
        let none = try world.runTool(world.arguments(user: world.sshd.keyUser, command: ["echo", "never"]))
        #expect(none.status == 77, "\(none.stderr)")
        #expect(none.stderr.contains("Authentication failed"))
        #expect(none.stdout.isEmpty)
    }

    @Test("host keys: unknown is refused without a terminal (fingerprint shown), --accept-new adds it, hashed entries match")
    func unknownAndAcceptNew() throws {
        let world = try ShellWorld()
        let expected = try fingerprint(of: world.sshd.hostKeyPublicLine)
        let key = ["-i", world.sshd.clientKeyPath.path]
        let refused = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: key, command: ["echo", "never"]))
        #expect(refused.status == 77, "\(refused.stderr)")
        #expect(refused.stderr.contains("The authenticity of host '\(testHost)' can't be established."))
        #expect(refused.stderr.contains("ED25519 key fingerprint is \(expected)."))
        #expect(refused.stderr.contains("Host key verification failed"))
        #expect(!FileManager.default.fileExists(atPath: world.knownHostsFile.path))

        let accepted = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: key + ["--accept-new"],
                                                         command: ["echo", "accepted"]))
        #expect(accepted.status == 0, "\(accepted.stderr)")
        #expect(accepted.stdout == "accepted\n")
        #expect(accepted.stderr.contains("Permanently added '\(testHost)' (ED25519) to the list of known hosts."))
        let written = try String(contentsOf: world.knownHostsFile, encoding: .utf8)
        #expect(knownHosts(written, names: testHost, key: world.sshd.hostKeyPublicLine), "\(written)")

        // Hash the file the way OpenSSH does (ssh-keygen -H): still a match.
        let hashed = try run("ssh-keygen", ["-H", "-f", world.knownHostsFile.path], timeout: 30)
        #expect(hashed.status == 0, "\(hashed.stderr)")
        #expect(try String(contentsOf: world.knownHostsFile, encoding: .utf8).hasPrefix("|1|"))
        let again = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: key, command: ["echo", "hashed"]))
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout == "hashed\n")
        #expect(!again.stderr.contains("Permanently added"))
    }

    @Test("host keys: a changed key is refused with OpenSSH's warning, even with --accept-new")
    func changedHostKey() throws {
        let world = try ShellWorld()
        let other = world.home.appendingPathComponent("other_key")
        let made = try run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", other.path], timeout: 30)
        #expect(made.status == 0)
        let otherLine = try String(contentsOf: other.appendingPathExtension("pub"), encoding: .utf8)
            .split(separator: " ").prefix(2).joined(separator: " ")
        try "\(testHost) \(otherLine)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                       extra: ["-i", world.sshd.clientKeyPath.path, "--accept-new"],
                                                       command: ["echo", "never"]))
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!"))
        #expect(result.stderr.contains(try fingerprint(of: world.sshd.hostKeyPublicLine)))
        #expect(result.stderr.contains("Host key verification failed."))
        // known_hosts is left alone.
        #expect(try String(contentsOf: world.knownHostsFile, encoding: .utf8) == "\(testHost) \(otherLine)\n")
    }

    @Test("failures: timed out, refused, Access rejected, each with its line and exit status")
    func plainFailures() throws {
        // An edge whose target accepts TCP but never speaks SSH: the handshake times out.
        let silent = try TargetFixture(.sink)
        let sshd = try SSHDFixture()
        let silentEdge = try EdgeFixture(certs: try certs(), target: silent.address,
                                         serviceTokens: [(testTokenID, testTokenSecret)])
        let world = try ShellWorld(edge: silentEdge, sshd: sshd)
        try world.trustHostKey()
        let timedOut = try world.runTool(world.arguments(user: sshd.keyUser, extra: ["--timeout", "3"], command: ["true"]))
        #expect(timedOut.status == 69, "\(timedOut.stderr)")
        #expect(timedOut.stderr.contains("Connection timed out."))

        // Nothing listens where the edge should be.
        let closed = try freeLoopbackPort()
        let refused = try world.runTool(["shell", "x@\(testHost)", "--connect-to", "127.0.0.1:\(closed)",
                                         "--ca-file", silentEdge.certs.caFile.path, "--", "true"])
        #expect(refused.status == 69, "\(refused.stderr)")
        #expect(refused.stderr.contains("Connection refused"))

        // A wrong service token: Access's refusal, and the secret never printed.
        let rejected = try world.runTool(world.arguments(user: sshd.keyUser, command: ["true"]),
                                         environment: ["TUNNEL_SERVICE_TOKEN_SECRET": "wrong-secret-cfat"])
        #expect(rejected.status == 77, "\(rejected.stderr)")
        #expect(rejected.stderr.contains("Cloudflare Access rejected the service token"))
        #expect(!rejected.stderr.contains("wrong-secret-cfat"))

        // Bad flags.
        let usage = try world.runTool(["shell", "x@\(testHost)", "--timeout", "0", "--", "true"])
        #expect(usage.status == 64)
        #expect(usage.stderr.contains("--timeout must be between 1 and 600 seconds"))
    }

    @Test("usage errors: one line each, exit 64, before any connection")
    func usageErrors() throws {
        let world = try ShellWorld()
        let cases: [([String], String)] = [
            (["shell", "me@\(testHost)", "--url", "127.0.0.1:0", "--", "true"], "--url cannot be used with shell"),
            (["shell", "me@\(testHost)", "--hostname", "other.cfat.test", "--", "true"], "differs from the destination's host"),
            (["shell", "me@\(testHost)", "--tmux", "main", "--", "true"], "give either --tmux or a command"),
            (["shell", "me@\(testHost)", "--tmux", "a;b"], "--tmux NAME may only use"),
            (["shell", "me@\(testHost)", "-i", "/nonexistent/key", "--", "true"], "-i /nonexistent/key: no such readable key file"),
            (["shell", "me@\(testHost)", "-p", "0", "--", "true"], "-p must be a port"),
            (["shell", "@\(testHost)", "--", "true"], "no user to log in as"),
            (["shell", "-T", "-t", "me@\(testHost)"], "-T (no terminal) and -t (a terminal) contradict each other"),
            (["shell", "me@\(testHost)", "-T", "--tmux", "main"], "--tmux needs a terminal"),
            (["shell", "me@\(testHost)", "-o", "Port=none", "true"], "-o Port=none: Port none is not a port number"),
            (["shell", "-F", "/nonexistent/ssh_config", "me@\(testHost)", "true"], "/nonexistent/ssh_config: no such file"),
        ]
        for (arguments, message) in cases {
            let result = try world.runTool(arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("Connecting"), "\(arguments) connected before refusing")
        }
        try world.edge.waitForStats(host: testHost) { $0.upgradesAccepted == 0 }
    }
}

/// `SHA256:…` of a `type base64` public key line, as ssh-keygen prints it.
func fingerprint(of publicLine: String) throws -> String {
    let directory = try makeTempDir("cfat-fp")
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("key.pub")
    try (publicLine + "\n").write(to: file, atomically: true, encoding: .utf8)
    let result = try run("ssh-keygen", ["-l", "-E", "sha256", "-f", file.path], timeout: 30)
    guard result.status == 0, let field = result.stdout.split(separator: " ").first(where: { $0.hasPrefix("SHA256:") }) else {
        throw FixtureError("ssh-keygen -l failed: \(result.stderr)")
    }
    return String(field)
}
