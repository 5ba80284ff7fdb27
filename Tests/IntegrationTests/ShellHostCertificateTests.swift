import CFAccessSSH
import Foundation
import SystemPackage
import Testing

/// Issue 25 part 2 point 2: host certificates, against real sshd (`HostCertificate`) behind
/// websockify, on both engines, with real OpenSSH's `ssh` on the same known_hosts as the judge of
/// what the rules must decide.
@Suite("shell checks host certificates as OpenSSH does", .serialized, .ownThreads)
struct ShellHostCertificateTests {
    /// A CA (ssh-keygen's ed25519 key) and what signing with it makes.
    final class Authority: @unchecked Sendable {
        let directory: URL
        let key: URL
        /// `type base64` of the CA's public key.
        let publicLine: String

        init() throws {
            directory = try makeTempDir("cfat-host-ca")
            key = directory.appendingPathComponent("ca")
            try generateKey(at: key, comment: "cfat-host-ca")
            publicLine = try String(contentsOf: key.appendingPathExtension("pub"), encoding: .utf8)
                .split(separator: " ").prefix(2).joined(separator: " ")
        }

        deinit { try? FileManager.default.removeItem(at: directory) }

        /// A signer for ``SSHDFixture``: a host certificate for `principals`, valid for `validity`.
        func signer(principals: String, validity: String) -> (URL) throws -> URL {
            { [key] publicKey in
                let made = try run("ssh-keygen", ["-q", "-s", key.path, "-I", "cfat-host", "-h", "-n", principals, "-V", validity,
                                                  publicKey.path], timeout: 60)
                guard made.status == 0 else { throw FixtureError("ssh-keygen -s failed: \(made.stderr)") }
                return URL(fileURLWithPath: String(publicKey.path.dropLast(".pub".count)) + "-cert.pub")
            }
        }
    }

    /// Runs real OpenSSH's ssh straight to `world`'s sshd, judging the host by `knownHosts` (as
    /// `testHost`), strict: its exit status (0 when it trusted the host and ran the command).
    private func openSSH(_ world: WebsockifyShellWorld, knownHosts: URL) throws -> (status: Int32, stderr: String) {
        let result = try run("ssh", ["-F", "none", "-p", "\(world.sshd.port)", "-i", world.sshd.clientKeyPath.path,
                                     "-o", "HostKeyAlias=\(testHost)", "-o", "UserKnownHostsFile=\(knownHosts.path)",
                                     "-o", "GlobalKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                                     "-o", "IdentitiesOnly=yes", "\(world.sshd.keyUser)@127.0.0.1", "true"], timeout: 60)
        return (result.status, result.stderr)
    }

    /// A CA, sshd with a certificate it signed for the test host (valid now) behind websockify,
    /// and the known_hosts file to use.
    private func certifiedWorld() throws -> (Authority, WebsockifyShellWorld, URL) {
        let authority = try Authority()
        let world = try WebsockifyShellWorld(sshd: try SSHDFixture(signHostKey: authority.signer(principals: testHost, validity: "-5m:+1h")))
        return (authority, world, world.file("known_hosts"))
    }

    @Test("a host certificate from a CA named by @cert-authority logs in with strict checking and nothing else known, as OpenSSH's ssh does; nothing is added; on either library (the certificate is read on a second tunnel)", arguments: ShellEngine.allCases)
    func trustedByItsAuthority(engine: ShellEngine) throws {
        let (authority, world, file) = try certifiedWorld()
        let text = "@cert-authority *.cfat.test \(authority.publicLine)\n"
        try text.write(to: file, atomically: true, encoding: .utf8)
        let result = try world.run(engine, ["--known-hosts", file.path, "-o", "GlobalKnownHostsFile=none",
                                            "-o", "StrictHostKeyChecking=yes", "-v"])
        #expect(result.status == 0 && result.stdout == "reached\n", "\(result.stderr)")
        #expect(try String(contentsOf: file, encoding: .utf8) == text, "nothing is added")
        // The certificate is read on a second tunnel, whichever library runs the session.
        #expect(result.stderr.contains(engine == .terminal ? "the session runs on libssh2" : "the session runs on libssh "),
                "\(result.stderr)")
        #expect(try openSSH(world, knownHosts: file).status == 0, "OpenSSH agrees")
    }

    @Test("a certificate that does not hold (expired; another host's) is said in OpenSSH's words and its key judged as a plain key: refused when strict (as OpenSSH's ssh refuses), added with --accept-new", arguments: ShellEngine.allCases)
    func certificateThatDoesNotHold(engine: ShellEngine) throws {
        let authority = try Authority()
        for (principals, validity, reason) in [(testHost, "20200101:20200102", "Certificate invalid: expired"),
                                               ("other.cfat.test", "-5m:+1h", "Certificate invalid: name is not a listed principal")] {
            let sshd = try SSHDFixture(signHostKey: authority.signer(principals: principals, validity: validity))
            let world = try WebsockifyShellWorld(sshd: sshd)
            let file = world.file("known_hosts")
            try "@cert-authority *.cfat.test \(authority.publicLine)\n".write(to: file, atomically: true, encoding: .utf8)
            let strict = try world.run(engine, ["--known-hosts", file.path, "-o", "GlobalKnownHostsFile=none",
                                                "-o", "StrictHostKeyChecking=yes"])
            #expect(strict.status == 77, "\(reason): \(strict.stderr)")
            #expect(strict.stderr.contains(reason), "\(strict.stderr)")
            #expect(strict.stderr.contains("No ED25519 host key is known for \(testHost)"), "\(strict.stderr)")
            #expect(!world.sshd.logText.contains("Accepted publickey"), "no credential after a refused host key")
            let judge = try openSSH(world, knownHosts: file)
            #expect(judge.status == 255 && judge.stderr.contains(reason), "OpenSSH refuses too: \(judge.stderr)")

            let added = try world.run(engine, ["--known-hosts", file.path, "-o", "GlobalKnownHostsFile=none", "--accept-new"])
            #expect(added.status == 0 && added.stdout == "reached\n", "\(added.stderr)")
            #expect(knownHosts(try String(contentsOf: file, encoding: .utf8), names: testHost, key: world.sshd.hostKeyPublicLine,
                               lines: 2), "the plain key is recorded")
        }
    }

    @Test("a revoked CA refuses the certificate with OpenSSH's warning even with --accept-new; a CA known_hosts does not name leaves the plain key's rules", arguments: ShellEngine.allCases)
    func revokedAndUnknownAuthorities(engine: ShellEngine) throws {
        let (authority, world, file) = try certifiedWorld()
        try "@cert-authority *.cfat.test \(authority.publicLine)\n@revoked * \(authority.publicLine)\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let revoked = try world.run(engine, ["--known-hosts", file.path, "-o", "GlobalKnownHostsFile=none", "--accept-new"])
        #expect(revoked.status == 77, "\(revoked.stderr)")
        #expect(revoked.stderr.contains("WARNING: REVOKED HOST KEY DETECTED!"), "\(revoked.stderr)")
        #expect(!world.sshd.logText.contains("Accepted publickey"))

        let stranger = try Authority()
        try "@cert-authority *.cfat.test \(stranger.publicLine)\n\(testHost) \(world.sshd.hostKeyPublicLine)\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let plain = try world.run(engine, ["--known-hosts", file.path, "-o", "GlobalKnownHostsFile=none", "-o", "StrictHostKeyChecking=yes"])
        #expect(plain.status == 0 && plain.stdout == "reached\n", "\(plain.stderr)")
        #expect(!plain.stderr.contains("Certificate"), "\(plain.stderr)")
    }

    @Test("the library: a certificate read on the second connection counts only for the key the session's own key exchange proved; a valid certificate of another server (same CA, same name) is never taken for this one")
    func certificateOfAnotherServer() async throws {
        let authority = try Authority()
        let first = try SSHDFixture(signHostKey: authority.signer(principals: testHost, validity: "-5m:+1h"))
        let second = try SSHDFixture(signHostKey: authority.signer(principals: testHost, validity: "-5m:+1h"))
        let directory = try makeTempDir("cfat-cert-library")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("known_hosts")
        try "@cert-authority *.cfat.test \(authority.publicLine)\n".write(to: file, atomically: true, encoding: .utf8)

        /// The handshake with `server`, its certificate read from `certificateServer`: nil when trusted.
        func handshake(with server: SSHDFixture, certificateFrom certificateServer: SSHDFixture) async throws -> SSHFailure? {
            let socket = try ClientSocket(port: server.port)
            let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: file.path), otherKnownHosts: [],
                                                                   host: testHost, checking: .strict))
            var configuration = SSHSession.Configuration(hostKeyDelegate: verifier)
            configuration.hostCertificateConnection = {
                guard let side = try? ClientSocket(port: certificateServer.port) else { return nil }
                return SSHCertificateConnection(fileDescriptor: FileDescriptor(rawValue: side.fd)) { withExtendedLifetime(side) {} }
            }
            let session = try SSHSession(fileDescriptor: FileDescriptor(rawValue: socket.fd), configuration: configuration)
            defer { withExtendedLifetime(socket) {} }
            do {
                let key = try await session.handshake()
                #expect(key.isCertificate, "the key the delegate accepted is the certificate")
                await session.disconnect()
                return nil
            } catch {
                await session.disconnect()
                return error
            }
        }
        #expect(try await handshake(with: first, certificateFrom: first) == nil)
        let refused = try await handshake(with: first, certificateFrom: second)
        #expect(refused?.kind == .hostKeyRejected, "\(String(describing: refused))")
    }
}
