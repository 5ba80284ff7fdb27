import Foundation
import Testing

/// Issue 25 part 2 point 1: every known_hosts file counts, as in OpenSSH: the system's
/// (`GlobalKnownHostsFile`, `/etc/ssh/ssh_known_hosts` by default) and every `UserKnownHostsFile`.
/// Real sshd behind websockify (Debian's WebSocket server, not our emulator), on both engines.
@Suite("shell reads every known_hosts file", .serialized, .ownThreads)
struct ShellKnownHostsFilesTests {
    /// sshd behind websockify, the tool's HOME, and `shell` arguments that reach them.
    private final class World: @unchecked Sendable {
        let sshd: SSHDFixture
        let websockify: WebsockifyFixture
        let home: URL

        init() throws {
            sshd = try SSHDFixture()
            websockify = try WebsockifyFixture(target: "127.0.0.1:\(sshd.port)")
            home = try makeTempDir("cfat-known-hosts")
            try FileManager.default.createDirectory(at: home.appendingPathComponent(".ssh"), withIntermediateDirectories: true)
        }

        deinit { try? FileManager.default.removeItem(at: home) }

        func file(_ name: String) -> URL { home.appendingPathComponent(name) }

        /// Runs `shell` as sshd's key user with `extra`, the command `echo reached`.
        func run(_ engine: ShellEngine, _ extra: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
            let arguments = ["shell", "\(sshd.keyUser)@\(testHost)", "--connect-to", "127.0.0.1:\(websockify.port)",
                             "--ca-file", try certs().caFile.path, "--token-dir", file("tokens").path,
                             "-i", sshd.clientKeyPath.path] + engine.flags + extra + ["--", "echo", "reached"]
            let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments,
                                             environment: ["HOME": home.path, "USER": "nobody-cfat"],
                                             removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: .none)
            let status = try process.waitForExit(timeout: 90)
            return (status, process.stdoutText.replacingOccurrences(of: "\r", with: ""), process.stderrText)
        }
    }

    /// An ed25519 public key that is not sshd's, as a known_hosts key field.
    private func strangerKey(in world: World) throws -> String {
        let key = world.file("stranger")
        try generateKey(at: key, comment: "stranger")
        let line = try String(contentsOf: key.appendingPathExtension("pub"), encoding: .utf8)
        return line.split(separator: " ").prefix(2).joined(separator: " ")
    }

    @Test("a key pinned for the host in the system file is a changed key: refused with --accept-new, naming that file; nothing is added to the user's file", arguments: ShellEngine.allCases)
    func globalPinBeatsAcceptNew(engine: ShellEngine) throws {
        let world = try World()
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
        let world = try World()
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
        let world = try World()
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
        #expect(try String(contentsOf: first, encoding: .utf8) == "\(testHost) \(world.sshd.hostKeyPublicLine)\n")
    }
}
