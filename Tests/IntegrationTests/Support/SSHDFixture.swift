// A real OpenSSH server on loopback, and a real `ssh` client to reach it.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real OpenSSH `sshd` listening on 127.0.0.1 on a free port, with a fresh
/// ed25519 host key and a fresh ed25519 client key for `keyUser`, all in a
/// temporary directory that goes away with the fixture.
///
/// Needs root (sshd must switch to the test users), the OpenSSH server and
/// client, and the users `cfat-pw` and `cfat-key`: `scripts/setup` provides
/// them. Without them `init()` throws; the tests never skip.
final class SSHDFixture: @unchecked Sendable {
    /// The user that logs in with `password`.
    let passwordUser = "cfat-pw"
    /// The password of `passwordUser` (a test fixture, not a secret).
    let password = "cfat-test-pw-1"
    /// The user that logs in with the key at `clientKeyPath`; it has no password.
    let keyUser = "cfat-key"

    /// The port sshd listens on, on 127.0.0.1.
    let port: Int
    /// The host's public key as `type base64` (no comment).
    let hostKeyPublicLine: String
    /// A known_hosts file naming the host key for `[127.0.0.1]:port`.
    let knownHostsFile: URL
    /// The private key `keyUser` logs in with (its public half is authorized).
    let clientKeyPath: URL
    /// The temporary directory holding keys, config and known_hosts files.
    let directory: URL

    private let process: ManagedProcess

    /// Starts sshd and waits (bounded) until it accepts connections. Its one host key is of
    /// `hostKeyType` (ssh-keygen's `-t`).
    ///
    /// With `trustedUserCA` (an OpenSSH public key line), sshd trusts user certificates that CA
    /// signed (`TrustedUserCAKeys`) and nothing else for keys: no `authorized_keys` at all.
    ///
    /// `extraConfig` lines go first in sshd_config (sshd takes a keyword's first value), e.g.
    /// `RekeyLimit 1M`.
    ///
    /// With `signHostKey`, sshd also presents a host certificate (`HostCertificate`): the closure
    /// gets the host's public key file and returns the certificate file it made (ssh-keygen -s).
    init(hostKeyType: String = "ed25519", trustedUserCA: String? = nil, extraConfig: String = "",
         signHostKey: ((URL) throws -> URL)? = nil) throws {
        let sshdPath = which("sshd")
        try requireRealPart(sshdPath != nil, "OpenSSH server /usr/sbin/sshd (package openssh-server)")
        try requireRealPart(which("ssh") != nil, "OpenSSH client ssh (package openssh-client)")
        try requireRealPart(which("ssh-keygen") != nil, "ssh-keygen (package openssh-client)")
        try requireRealPart(geteuid() == 0, "root privileges, which sshd needs to log in as the test users")
        try requireRealPart(getpwnam("cfat-pw") != nil, "local test user cfat-pw")
        try requireRealPart(getpwnam("cfat-key") != nil, "local test user cfat-key")
        try requireRealPart(
            FileManager.default.fileExists(atPath: "/run/sshd"),
            "sshd's privilege separation directory /run/sshd")

        let directory = try makeTempDir("cfat-sshd")
        self.directory = directory
        var started: (ManagedProcess, Int)?
        do {
            // sshd reads authorized_keys as the logging-in user: that user
            // must be able to reach the file.
            try setMode(0o755, directory)
            let hostKey = directory.appendingPathComponent("host_\(hostKeyType)_key")
            try generateKey(at: hostKey, comment: "cfat-sshd-host", type: hostKeyType)
            let clientKey = directory.appendingPathComponent("client_ed25519_key")
            try generateKey(at: clientKey, comment: "cfat-key-client")

            let authorizedKeys = directory.appendingPathComponent("authorized_keys", isDirectory: true)
            try FileManager.default.createDirectory(at: authorizedKeys, withIntermediateDirectories: false)
            try setMode(0o755, authorizedKeys)
            let keyUserFile = authorizedKeys.appendingPathComponent(keyUser)
            try Data(contentsOf: clientKey.appendingPathExtension("pub")).write(to: keyUserFile)
            try setMode(0o644, keyUserFile)

            let publicKey = try String(contentsOf: hostKey.appendingPathExtension("pub"), encoding: .utf8)
            let fields = publicKey.split(whereSeparator: \.isWhitespace)
            guard fields.count >= 2 else {
                throw FixtureError("unexpected host public key: \(publicKey)")
            }
            hostKeyPublicLine = "\(fields[0]) \(fields[1])"
            clientKeyPath = clientKey
            let certificateLine = try signHostKey.map { sign in
                let certificate = try sign(hostKey.appendingPathExtension("pub"))
                try setMode(0o644, certificate)
                return "HostCertificate \(certificate.path)\n"
            } ?? ""

            // The port is free when chosen but may be taken before sshd binds
            // it: retry a few times on "Address already in use".
            var lastError: Error?
            for _ in 0..<5 {
                let candidate = try freeLoopbackPort()
                let config = directory.appendingPathComponent("sshd_config")
                var text = extraConfig + (extraConfig.isEmpty || extraConfig.hasSuffix("\n") ? "" : "\n") + certificateLine
                    + Self.config(port: candidate, hostKey: hostKey, directory: directory)
                if let trustedUserCA {
                    let caFile = directory.appendingPathComponent("trusted_user_ca_keys")
                    try (trustedUserCA + "\n").write(to: caFile, atomically: true, encoding: .utf8)
                    try setMode(0o644, caFile)
                    text = text.replacingOccurrences(of: "AuthorizedKeysFile \(directory.path)/authorized_keys/%u",
                                                     with: "AuthorizedKeysFile none\nTrustedUserCAKeys \(caFile.path)")
                }
                try text.write(to: config, atomically: true, encoding: .utf8)
                let sshd = try ManagedProcess(
                    URL(fileURLWithPath: sshdPath!), ["-D", "-e", "-f", config.path])
                do {
                    try Self.waitUntilListening(sshd, port: candidate, timeout: 15)
                    started = (sshd, candidate)
                    break
                } catch {
                    sshd.terminate()
                    lastError = error
                    if !sshd.stderrText.contains("Address already in use") { throw error }
                }
            }
            guard let started else {
                throw lastError ?? FixtureError("sshd did not start")
            }
            self.process = started.0
            self.port = started.1
            knownHostsFile = directory.appendingPathComponent("known_hosts")
            try "[127.0.0.1]:\(started.1) \(hostKeyPublicLine)\n"
                .write(to: knownHostsFile, atomically: true, encoding: .utf8)
        } catch {
            started?.0.terminate()
            try? FileManager.default.removeItem(at: directory)
            throw error
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Stops sshd (and any session it still runs). Idempotent.
    func stop() {
        process.terminate()
    }

    /// sshd's log so far (it logs to stderr at LogLevel VERBOSE).
    var logText: String { process.stderrText }

    /// A known_hosts file naming the host key for `hostAlias` (bare, and as
    /// `[hostAlias]:port`), for `ssh -o HostKeyAlias=hostAlias` with strict
    /// checking, e.g. through a ProxyCommand.
    func knownHosts(for hostAlias: String) -> URL {
        let safeName = String(hostAlias.map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? $0 : "_" })
        let file = directory.appendingPathComponent("known_hosts.\(safeName)")
        let contents = "\(hostAlias) \(hostKeyPublicLine)\n[\(hostAlias)]:\(port) \(hostKeyPublicLine)\n"
        // Our own fresh temporary directory: writing cannot fail short of a
        // broken machine, and a missing file would only surface later as a
        // puzzling "Host key verification failed".
        let written = FileManager.default.createFile(atPath: file.path, contents: Data(contents.utf8))
        precondition(written, "could not write \(file.path)")
        return file
    }

    /// `ssh` options for logging in as `user` with strict host key checking,
    /// no user or system configuration, and no prompts but sshpass's.
    ///
    /// For `passwordUser`: password authentication only, `BatchMode=no` (run
    /// it under `sshpass -e` with `SSHPASS` set to `password`). For `keyUser`:
    /// `clientKeyPath` only, `BatchMode=yes`.
    ///
    /// `extra` comes first: ssh keeps the first value it sees for an option,
    /// so `extra` can override the defaults. No host or command is included.
    func sshArguments(user: String, knownHosts: URL? = nil, extra: [String] = []) -> [String] {
        var arguments = extra
        arguments += [
            "-F", "/dev/null",
            "-T",
            "-l", user,
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=\((knownHosts ?? knownHostsFile).path)",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "CheckHostIP=no",
            "-o", "UpdateHostKeys=no",
            "-o", "ConnectTimeout=10",
            "-o", "ConnectionAttempts=1",
            "-o", "ServerAliveInterval=15",
            "-o", "LogLevel=ERROR",
            "-o", "IdentityAgent=none",
            "-o", "ForwardAgent=no",
            "-o", "ControlMaster=no",
            "-o", "ControlPath=none",
        ]
        if user == passwordUser {
            arguments += [
                "-o", "BatchMode=no",
                "-o", "PreferredAuthentications=password",
                "-o", "PubkeyAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no",
                "-o", "NumberOfPasswordPrompts=1",
            ]
        } else {
            arguments += [
                "-i", clientKeyPath.path,
                "-o", "IdentitiesOnly=yes",
                "-o", "PreferredAuthentications=publickey",
                "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no",
                "-o", "BatchMode=yes",
            ]
        }
        return arguments
    }

    /// Runs a real `ssh` as `user` that executes `command` remotely, bounded
    /// by `timeout` seconds. The password user goes through `sshpass -e`.
    ///
    /// The host key is checked strictly under `hostAlias` (`HostKeyAlias`,
    /// with a known_hosts file made for it). With a `proxyCommand` ssh
    /// connects to `hostAlias` through it (`%h` is the alias, `%p` the port);
    /// without one it connects straight to 127.0.0.1. `port` defaults to the
    /// fixture's. `environment` is added to ssh's (and so the proxy's).
    func runSSH(
        user: String, proxyCommand: String? = nil, hostAlias: String = "cfat-sshd.test",
        port: Int? = nil, command: String, environment: [String: String] = [:],
        stdin: Data? = nil, timeout: TimeInterval = 60
    ) throws -> (status: Int32, stdout: String, stderr: String) {
        var extra = ["-o", "HostKeyAlias=\(hostAlias)", "-p", String(port ?? self.port)]
        if let proxyCommand {
            extra += ["-o", "ProxyCommand=\(proxyCommand)"]
        }
        var arguments = sshArguments(user: user, knownHosts: knownHosts(for: hostAlias), extra: extra)
        arguments += [proxyCommand == nil ? "127.0.0.1" : hostAlias, "--", command]

        let ssh = which("ssh")
        try requireRealPart(ssh != nil, "OpenSSH client ssh (package openssh-client)")
        var env = environment
        if user == passwordUser {
            let sshpass = which("sshpass")
            try requireRealPart(sshpass != nil, "sshpass (package sshpass)")
            env["SSHPASS"] = password
            return try run(
                URL(fileURLWithPath: sshpass!), ["-e", ssh!] + arguments, env: env, stdin: stdin,
                timeout: timeout)
        }
        return try run(URL(fileURLWithPath: ssh!), arguments, env: env, stdin: stdin, timeout: timeout)
    }

    // MARK: - Private

    private static func config(port: Int, hostKey: URL, directory: URL) -> String {
        """
        ListenAddress 127.0.0.1
        Port \(port)
        HostKey \(hostKey.path)
        PidFile \(directory.appendingPathComponent("sshd.pid").path)
        PasswordAuthentication yes
        PermitEmptyPasswords no
        KbdInteractiveAuthentication no
        PubkeyAuthentication yes
        AuthorizedKeysFile \(directory.path)/authorized_keys/%u
        StrictModes no
        UsePAM no
        AllowUsers cfat-pw cfat-key
        PermitRootLogin no
        LogLevel VERBOSE
        UseDNS no
        PrintMotd no
        PrintLastLog no
        X11Forwarding no
        Subsystem sftp /usr/lib/openssh/sftp-server
        LoginGraceTime 180
        MaxStartups 64:30:128
        AcceptEnv LANG LC_* CFAT_*

        """
    }

    /// Waits until sshd accepts TCP connections on `port` while still alive.
    private static func waitUntilListening(_ sshd: ManagedProcess, port: Int, timeout: TimeInterval) throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            guard sshd.isRunning else {
                _ = try? sshd.waitForExit(timeout: 2)
                throw FixtureError("sshd exited while starting\n" + sshd.outputReport())
            }
            // "Server listening" is logged once the socket is bound and
            // listening; connect to be sure.
            if sshd.stderrText.contains("Server listening on 127.0.0.1 port \(port)"),
                loopbackPortAccepts(port)
            {
                return
            }
            usleep(20_000)
        }
        throw FixtureError("sshd did not accept connections on 127.0.0.1:\(port) within \(timeout) s\n"
            + sshd.outputReport())
    }
}

/// Generates an unencrypted key pair of `type` (ed25519 by default) at `url` and `url.pub`.
func generateKey(at url: URL, comment: String, type: String = "ed25519") throws {
    let result = try run("ssh-keygen", ["-q", "-t", type, "-N", "", "-C", comment, "-f", url.path], timeout: 60)
    guard result.status == 0 else {
        throw FixtureError("ssh-keygen failed with status \(result.status): \(result.stderr)")
    }
}

private func setMode(_ mode: Int, _ url: URL) throws {
    try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: url.path)
}
