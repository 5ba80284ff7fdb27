import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` logging in as a person would (issue 16, points 7, 8, 10): prompts that
/// wait for the person, PAM's Password prompt and the keyring, `-i` keys and many agent keys,
/// against real sshd through the emulator.
@Suite("shell mode logins: prompts without a clock, PAM and the keyring, -i and agent keys", .serialized, .ownThreads)
struct ShellLoginTests {
    /// A world whose emulator reaches a PAM sshd (keyboard-interactive only), its host key known.
    private func pamWorld() throws -> (PAMSSHDFixture, ShellWorld, EdgeFixture) {
        let pam = try PAMSSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(pam.port)", serviceTokens: [(testTokenID, testTokenSecret)])
        let world = try ShellWorld(edge: edge, sshd: try SSHDFixture())
        try "\(testHost) \(pam.hostKeyPublicLine)\n".write(to: world.knownHostsFile, atomically: true, encoding: .utf8)
        return (pam, world, edge)
    }

    @Test("point 7: keyboard-interactive (PAM) answered after more than --timeout (5 s) still logs in; so does a host-key question")
    func promptsOutliveTheTimeout() throws {
        let (pam, world, edge) = try pamWorld()
        try FileManager.default.removeItem(at: world.knownHostsFile)
        let user = world.sshd.passwordUser
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: user, extra: ["--timeout", "5"], command: ["echo", "slow-person"])))
        try terminal.waitFor("Are you sure you want to continue connecting (yes/no/[fingerprint])?")
        sleep(7)   // the person reads the fingerprint: longer than the timeout
        try terminal.type("yes")
        try terminal.waitFor("Password: ")
        sleep(8)   // and looks the password up: longer than the timeout again
        try terminal.type(world.sshd.password)
        let status = try terminal.exitStatus()
        let screen = try terminal.screen()
        #expect(status == 0, "\(screen)")
        #expect(screen.contains("slow-person"))
        #expect(!screen.contains("timed out"))
        #expect(pam.logText.contains("Accepted keyboard-interactive/pam for \(user)"))
        withExtendedLifetime(edge) {}
    }

    @Test("point 8: a password typed at PAM's Password prompt is offered for saving; the next run answers PAM from the keyring")
    func pamPasswordSavedAndReused() throws {
        let (pam, world, edge) = try pamWorld()
        let keyring = try KeyringFixture(home: world.home)
        let user = world.sshd.passwordUser
        let first = try TmuxTerminal(command: try world.toolCommandLine(world.arguments(user: user, command: ["echo", "typed"]),
                                                                        environment: keyring.environment))
        try first.waitFor("Password: ")
        try first.type(world.sshd.password)
        try first.waitFor("Save password for future connections? [y/N]")
        try first.type("y")
        #expect(try first.exitStatus() == 0)
        #expect(try first.screen().contains("Password saved in the keyring for \(user)@\(testHost):22."))
        #expect(try keyring.lookup(user: user, host: testHost, port: 22) == world.sshd.password)

        // The next run asks nothing: PAM's round is answered from the keyring (no terminal at all).
        let second = try world.runTool(world.arguments(user: user, command: ["echo", "from-keyring"]), environment: keyring.environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout == "from-keyring\n")
        #expect(!second.stderr.contains("Password:"))
        #expect(pam.logText.components(separatedBy: "Accepted keyboard-interactive/pam for \(user)").count - 1 == 2)
        withExtendedLifetime(edge) {}
    }

    /// `count` fresh ed25519 keys nobody authorized.
    private func strangerKeys(_ count: Int, in world: ShellWorld) throws -> [URL] {
        try (1...count).map { index in
            let key = world.home.appendingPathComponent("stranger_\(index)")
            try generateKey(at: key, comment: "stranger-\(index)")
            return key
        }
    }

    @Test("point 10: with six other keys in the agent, -i good.key logs in (it is tried before them; sshd's MaxAuthTries is 6)")
    func explicitKeyBeforeSixAgentKeys() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let agent = try AgentFixture(keys: try strangerKeys(6, in: world))
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                                                       command: ["echo", "good-key"]),
                                       environment: ["SSH_AUTH_SOCK": agent.socket])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "good-key\n")
    }

    @Test("point 10: too many authentication failures (seven wrong agent keys) end with exit 77 and sshd's reason, not 75")
    func tooManyFailures() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let agent = try AgentFixture(keys: try strangerKeys(7, in: world))
        let result = try world.runTool(world.arguments(user: world.sshd.keyUser, command: ["echo", "never"]),
                                       environment: ["SSH_AUTH_SOCK": agent.socket])
        #expect(result.status == 77, "\(result.stderr)")
        #expect(result.stderr.components(separatedBy: "\n").filter { !$0.isEmpty }.count == 1, "one line: \(result.stderr) SSHD \(world.sshd.logText)")
        #expect(result.stderr.contains("Authentication failed: the SSH server disconnected: Too many authentication failures"),
                "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("point 10: --identities-only keeps the agent's other keys out: the agent's good key is not used for -i other.key")
    func identitiesOnly() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let agent = try AgentFixture(key: world.sshd.clientKeyPath)
        let other = try strangerKeys(1, in: world)[0]
        let environment = ["SSH_AUTH_SOCK": agent.socket]
        let open = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", other.path], command: ["echo", "agent"]),
                                     environment: environment)
        #expect(open.status == 0, "without --identities-only the agent's key is tried after -i: \(open.stderr)")
        let only = try world.runTool(world.arguments(user: world.sshd.keyUser, extra: ["-i", other.path, "--identities-only"],
                                                     command: ["echo", "never"]),
                                     environment: environment)
        #expect(only.status == 77, "\(only.stderr)")
        #expect(only.stdout.isEmpty)
        // The agent's copy of an -i key is still used (OpenSSH does the same).
        let copy = try world.runTool(world.arguments(user: world.sshd.keyUser,
                                                     extra: ["-i", world.sshd.clientKeyPath.path, "--identities-only"],
                                                     command: ["echo", "copy"]),
                                     environment: environment)
        #expect(copy.status == 0, "\(copy.stderr)")
    }
}
