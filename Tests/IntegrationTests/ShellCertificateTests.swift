import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `cf-access-tcp shell` with the Access short-lived SSH certificate (issue 17): libssh2 presents
/// the OpenSSH certificate itself, to an sshd that trusts only the emulator's SSH user CA (no
/// authorized_keys), through the emulator, logged in with the (scripted) browser.
@Suite("shell mode with short-lived SSH certificates", .serialized, .ownThreads)
struct ShellCertificateTests {
    /// Runs `shell` as cfat-key on `world` with `extra` flags and `command`; a private HOME with
    /// no keys, no agent, no service token.
    private func shell(_ world: ShortLivedCertificateTests.World, home: URL, extra: [String], tokenDir: URL? = nil,
                       command: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        var common = world.login.commonArguments
        if let tokenDir, let index = common.firstIndex(of: "--token-dir") { common[index + 1] = tokenDir.path }
        let arguments = ["shell", "\(world.sshd.keyUser)@\(testHost)", "--known-hosts", world.sshd.knownHosts(for: testHost).path]
            + common + extra + ["--"] + command
        var environment = try world.login.browserEnvironment()
        environment["HOME"] = home.path
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, environment: environment,
                                         removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS",
                                                               "TUNNEL_SERVICE_TOKEN_ID", "TUNNEL_SERVICE_TOKEN_SECRET"])
        let status = try process.waitForExit(timeout: 180)
        return (status, process.stdoutText, process.stderrText)
    }

    @Test("--short-lived-cert logs in with the certificate (made after the login); later runs find the key and use it without the flag; none without it")
    func shellWithCertificate() throws {
        let world = try ShortLivedCertificateTests.World()
        let home = try makeTempDir("cfat-cert-home")
        defer { try? FileManager.default.removeItem(at: home) }

        let first = try shell(world, home: home, extra: ["--short-lived-cert"], command: ["echo cert-ok; whoami"])
        #expect(first.status == 0, "shell failed: \(first.stderr)\n--- sshd ---\n\(world.sshd.logText)")
        #expect(first.stdout == "cert-ok\ncfat-key\n")
        #expect(world.sshd.logText.contains("ECDSA-CERT"), "sshd did not see a certificate: \(world.sshd.logText)")
        #expect(world.login.browserOpens.count == 1, "one login serves the tunnel and the certificate")
        #expect(try world.login.counter("sshCertificatesSigned") == 1)
        #expect(FileManager.default.fileExists(atPath: world.certificateFile.path))

        // The key is there: used without the flag, the certificate on disk reused.
        let second = try shell(world, home: home, extra: [], command: ["echo again"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout == "again\n")
        #expect(try world.login.counter("sshCertificatesSigned") == 1)

        // An expired certificate is renewed before the login.
        try world.expireCertificate()
        let renewed = try shell(world, home: home, extra: [], command: ["echo renewed"])
        #expect(renewed.status == 0, "\(renewed.stderr)")
        #expect(try world.login.counter("sshCertificatesSigned") == 2)

        // Another token directory, with no key in it: no certificate, and sshd trusts nothing else.
        let otherTokens = try makeTempDir("cfat-cert-tokens")
        defer { try? FileManager.default.removeItem(at: otherTokens) }
        let without = try shell(world, home: home, extra: [], tokenDir: otherTokens, command: ["echo never"])
        #expect(without.status == 77, "\(without.stderr)")
        #expect(without.stdout.isEmpty)
    }
}
