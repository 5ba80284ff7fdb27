// A second real sshd that offers keyboard-interactive authentication through PAM (the main
// SSHDFixture runs without PAM, so it offers no keyboard-interactive device).

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// sshd on 127.0.0.1 with `UsePAM yes`, keyboard-interactive only, for `cfat-pw` (PAM asks
/// "Password: " and checks /etc/shadow).
final class PAMSSHDFixture: @unchecked Sendable {
    let port: Int
    let hostKeyPublicLine: String
    private let directory: URL
    private let process: ManagedProcess

    init() throws {
        let sshd = which("sshd")
        try requireRealPart(sshd != nil, "OpenSSH server /usr/sbin/sshd (package openssh-server)")
        try requireRealPart(geteuid() == 0, "root privileges, which sshd needs to log in as the test users")
        try requireRealPart(FileManager.default.fileExists(atPath: "/etc/pam.d/sshd"), "sshd's PAM configuration /etc/pam.d/sshd")
        directory = try makeTempDir("cfat-pam-sshd")
        let hostKey = directory.appendingPathComponent("host_key")
        let made = try run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", hostKey.path], timeout: 30)
        guard made.status == 0 else { throw FixtureError("ssh-keygen failed: \(made.stderr)") }
        hostKeyPublicLine = try String(contentsOf: hostKey.appendingPathExtension("pub"), encoding: .utf8)
            .split(separator: " ").prefix(2).joined(separator: " ")
        var started: (ManagedProcess, Int)?
        for _ in 0..<5 {
            let candidate = try freeLoopbackPort()
            let config = directory.appendingPathComponent("sshd_config")
            try """
            ListenAddress 127.0.0.1
            Port \(candidate)
            HostKey \(hostKey.path)
            PidFile \(directory.appendingPathComponent("sshd.pid").path)
            UsePAM yes
            KbdInteractiveAuthentication yes
            PasswordAuthentication no
            PubkeyAuthentication no
            AllowUsers cfat-pw
            LogLevel VERBOSE
            UseDNS no
            PrintMotd no
            PrintLastLog no

            """.write(to: config, atomically: true, encoding: .utf8)
            let process = try ManagedProcess(URL(fileURLWithPath: sshd!), ["-D", "-e", "-f", config.path])
            let deadline = Date(timeIntervalSinceNow: 15)
            while Date() < deadline && process.isRunning
                    && !(process.stderrText.contains("Server listening") && loopbackPortAccepts(candidate)) {
                usleep(20_000)
            }
            if process.isRunning && loopbackPortAccepts(candidate) {
                started = (process, candidate)
                break
            }
            process.terminate()
        }
        guard let started else { throw FixtureError("sshd with PAM did not start") }
        (process, port) = started
    }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }

    var logText: String { process.stderrText }
}
