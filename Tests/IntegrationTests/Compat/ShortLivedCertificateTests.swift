import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 17: Access short-lived SSH certificates end to end — real `ssh` with the block
/// `ssh-config --short-lived-cert` prints, through the emulator, to an sshd that trusts only the
/// emulator's SSH user CA (no authorized_keys).
@Suite("short-lived SSH certificates", .serialized, .ownThreads)
struct ShortLivedCertificateTests {
    /// An SSH user CA made by `cf-access-edge ssh-ca`, with its directory.
    final class SSHCA: @unchecked Sendable {
        let directory: URL
        let publicKey: String
        var keyPath: String { directory.appendingPathComponent("ssh-ca").path }

        init() throws {
            directory = try makeTempDir("cfat-ssh-ca")
            let made = try run(try TestPaths.binary("cf-access-edge"), ["ssh-ca", "--out", directory.path], timeout: 60)
            guard made.status == 0 else { throw FixtureError("cf-access-edge ssh-ca failed: \(made.stderr)") }
            publicKey = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        deinit { try? FileManager.default.removeItem(at: directory) }
    }

    /// The whole set-up: CA, sshd trusting only it, the login world whose signed-in user is
    /// `cfat-key@…`, and an ssh config file holding what `ssh-config --short-lived-cert` printed.
    final class World: @unchecked Sendable {
        let ca: SSHCA
        let sshd: SSHDFixture
        let login: LoginWorld
        let configFile: URL
        let printed: String

        init(edgeArguments: [String] = []) throws {
            ca = try SSHCA()
            sshd = try SSHDFixture(trustedUserCA: ca.publicKey)
            let world = try LoginWorld(target: "127.0.0.1:\(sshd.port)",
                                       edgeArguments: ["--ssh-ca-key", ca.keyPath, "--login-email", "cfat-key@example.test"]
                                           + edgeArguments)
            login = world
            let flags = world.commonArguments.filter { $0 != "--token-dir" && $0 != world.tokenDir.path }
            let result = try run(try TestPaths.binary("cf-access-tcp"),
                                 ["access", "ssh-config", "--hostname", testHost, "--short-lived-cert",
                                  "--token-dir", world.tokenDir.path, "--"] + flags, timeout: 30)
            guard result.status == 0 else { throw FixtureError("ssh-config failed: \(result.stderr)") }
            printed = result.stdout
            configFile = world.tokenDir.deletingLastPathComponent().appendingPathComponent("ssh_config")
            try printed.write(to: configFile, atomically: true, encoding: .utf8)
        }

        var keyFile: URL { login.tokenDir.appendingPathComponent("\(testHost)-cf_key") }
        var certificateFile: URL { login.tokenDir.appendingPathComponent("\(testHost)-cf_key-cert.pub") }

        /// Real ssh as cfat-key with the printed config, key authentication only, strict host keys.
        func ssh(_ command: String, config: URL? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
            let arguments = [
                "-F", (config ?? configFile).path, "-T", "-l", sshd.keyUser, "-p", String(sshd.port),
                "-o", "HostKeyAlias=\(testHost)", "-o", "StrictHostKeyChecking=yes",
                "-o", "UserKnownHostsFile=\(sshd.knownHosts(for: testHost).path)", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "CheckHostIP=no", "-o", "UpdateHostKeys=no", "-o", "BatchMode=yes", "-o", "IdentityAgent=none",
                "-o", "IdentitiesOnly=yes", "-o", "PreferredAuthentications=publickey", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no", "-o", "ConnectTimeout=60", "-o", "LogLevel=ERROR",
                testHost, "--", command,
            ]
            return try run("ssh", arguments, env: try login.browserEnvironment(), timeout: 120)
        }

        /// Replaces the certificate with one for the same key that expired in 2020, signed by the same CA.
        func expireCertificate() throws {
            let scratch = try makeTempDir("cfat-expired")
            defer { try? FileManager.default.removeItem(at: scratch) }
            let publicKey = scratch.appendingPathComponent("key.pub")
            try FileManager.default.copyItem(at: login.tokenDir.appendingPathComponent("\(testHost)-cf_key.pub"), to: publicKey)
            let signed = try run("ssh-keygen", ["-q", "-s", ca.keyPath, "-I", "expired", "-n", sshd.keyUser,
                                                "-V", "20200101000000:20200102000000", publicKey.path], timeout: 30)
            guard signed.status == 0 else { throw FixtureError("ssh-keygen -s failed: \(signed.stderr)") }
            let expired = try Data(contentsOf: scratch.appendingPathComponent("key-cert.pub"))
            try expired.write(to: certificateFile)
            chmod(certificateFile.path, 0o600)
        }
    }

    @Test("real ssh with the printed block logs in with a certificate only; it is reused while good and renewed once expired")
    func sshWithShortLivedCertificate() throws {
        let world = try World()
        #expect(world.printed.hasPrefix("Match host \(testHost) exec \""), "\(world.printed)")

        // Without the certificate block, sshd (no authorized_keys) refuses the tunnel's ssh.
        let plainConfig = world.configFile.deletingLastPathComponent().appendingPathComponent("plain_config")
        try world.printed.split(separator: "\n").filter { $0.hasPrefix("Host ") || $0.hasPrefix("  ProxyCommand") }
            .joined(separator: "\n").appending("\n").write(to: plainConfig, atomically: true, encoding: .utf8)

        let first = try world.ssh("echo cert-ok; whoami")
        #expect(first.status == 0, "ssh failed: \(first.stderr)\n--- sshd ---\n\(world.sshd.logText)")
        #expect(first.stdout == "cert-ok\ncfat-key\n")
        #expect(world.sshd.logText.contains("ECDSA-CERT"), "sshd did not see a certificate: \(world.sshd.logText)")
        #expect(world.login.browserOpens.count == 1, "ssh-gen logs in first when there is no app token")
        #expect(try world.login.counter("sshCertificatesSigned") == 1)
        #expect(fileMode(world.keyFile) == 0o600)
        #expect(fileMode(world.certificateFile) == 0o600)
        let key = try String(contentsOf: world.keyFile, encoding: .utf8)
        #expect(key.hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
        let certificate = try String(contentsOf: world.certificateFile, encoding: .utf8)
        #expect(certificate.hasPrefix("ecdsa-sha2-nistp256-cert-v01@openssh.com "))

        // A good certificate is reused: no second signature, the key pair stays.
        let second = try world.ssh("echo again")
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try world.login.counter("sshCertificatesSigned") == 1)
        #expect(try String(contentsOf: world.keyFile, encoding: .utf8) == key)

        // ssh-gen with a good certificate: quiet (ssh shows its stderr) and without a request.
        let requests = try world.login.counter("metadataRequests")
        let quiet = try run(try TestPaths.binary("cf-access-tcp"), ["access", "ssh-gen", "--hostname", testHost]
                                + world.login.commonArguments, env: try world.login.browserEnvironment(), timeout: 60)
        #expect(quiet.status == 0 && quiet.stdout.isEmpty && quiet.stderr.isEmpty, "\(quiet.stderr)")
        #expect(try world.login.counter("metadataRequests") == requests, "a good certificate needs no request")

        // An expired certificate is renewed on the next connection (sshd refuses the expired one).
        try world.expireCertificate()
        let third = try world.ssh("echo renewed")
        #expect(third.status == 0, "ssh with an expired certificate was not renewed: \(third.stderr)")
        #expect(third.stdout == "renewed\n")
        #expect(try world.login.counter("sshCertificatesSigned") == 2)
        #expect(try String(contentsOf: world.certificateFile, encoding: .utf8) != certificate)
        #expect(try String(contentsOf: world.keyFile, encoding: .utf8) == key, "the key pair is reused")
        #expect(world.login.browserOpens.count == 1, "the cached app token served the renewal")

        let refused = try world.ssh("echo never", config: plainConfig)
        #expect(refused.status != 0 && refused.stdout.isEmpty, "sshd accepted a login without the certificate")
    }

    @Test("ssh-gen: an error answer of cert_sign is one plain line and exit 77; the key pair is OpenSSH's")
    func signingRefused() throws {
        let world = try World(edgeArguments: ["--cert-sign-mode", "refuse"])
        let gen = try run(try TestPaths.binary("cf-access-tcp"), ["access", "ssh-gen", "--hostname", testHost] + world.login.commonArguments,
                          env: try world.login.browserEnvironment(), timeout: 120)
        #expect(gen.status == 77, "\(gen.stderr)")
        // The scripted browser logs to stderr too: our lines are those with our prefix.
        let ours = gen.stderr.split(separator: "\n").filter { $0.hasPrefix("cf-access-tcp:") }.joined(separator: "\n") + "\n"
        #expect(ours == "cf-access-tcp: Cloudflare Access did not sign an SSH certificate for \(testHost) "
                + "(403: short-lived certificates are not enabled for this application (emulated)); check that the "
                + "application allows short-lived certificates, then try again\n", "\(gen.stderr)")
        #expect(!FileManager.default.fileExists(atPath: world.certificateFile.path))
        // The key pair was made, and OpenSSH derives the same public key from the private one.
        let derived = try run("ssh-keygen", ["-y", "-f", world.keyFile.path], timeout: 30)
        #expect(derived.status == 0, "\(derived.stderr)")
        let written = try String(contentsOf: world.keyFile.appendingPathExtension("pub"), encoding: .utf8)
        #expect(derived.stdout.split(separator: " ").prefix(2) == written.split(separator: " ").prefix(2))
    }

    @Test("ssh-gen without --hostname is a usage error")
    func missingHostname() throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"), ["access", "ssh-gen"], timeout: 30)
        #expect(result.status == 64)
        #expect(result.stderr.contains("--hostname is required"), "\(result.stderr)")
    }
}
