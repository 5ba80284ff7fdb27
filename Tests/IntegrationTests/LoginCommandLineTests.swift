import Foundation
import Testing

/// The `login`, `token`, `logout` and `ssh-config` subcommands, run as the built binary.
@Suite("login subcommands (the built binary)", .ownThreads)
struct LoginCommandLineTests {
    static let appHost = "ssh.login.test"
    static let authDomain = "emulator.cloudflareaccess.com"
    static let transferHost = "login.cloudflareaccess.org"

    func tool(_ arguments: [String], timeout: TimeInterval = 30) throws -> (status: Int32, stdout: String, stderr: String) {
        try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: timeout)
    }

    // MARK: ssh-config

    @Test func sshConfigPrintsAHostBlockForThisBinary() throws {
        let binary = try TestPaths.binary("cf-access-tcp").resolvingSymlinksInPath().path
        let plain = try tool(["ssh-config", "--hostname", "SSH.Example.com"])
        #expect(plain.status == 0)
        // Only the block on stdout (so `>> ~/.ssh/config` works); the hint goes to stderr.
        #expect(plain.stdout == "Host ssh.example.com\n  ProxyCommand \(binary) access ssh --hostname %h\n")
        #expect(plain.stderr.contains("Add to your ~/.ssh/config"))
        // --short-lived-cert: CLIHardeningTests.sshConfig and ShortLivedCertificateTests.
        let bad = try tool(["ssh-config", "--hostname", "ssh example"])
        #expect(bad.status == 64 && bad.stdout.isEmpty)
        #expect(bad.stderr.hasPrefix("cf-access-tcp: --hostname"))
    }

    @Test("17.8: ssh-config without --hostname prints cloudflared's template block, exit 0")
    func sshConfigTemplate() throws {
        let binary = try TestPaths.binary("cf-access-tcp").resolvingSymlinksInPath().path
        let template = try tool(["access", "ssh-config"])
        #expect(template.status == 0, "\(template.stderr)")
        #expect(template.stdout == "Host [your hostname]\n  ProxyCommand \(binary) access ssh --hostname %h\n")
        let short = try tool(["access", "ssh-config", "--short-lived-cert"])
        #expect(short.status == 0, "\(short.stderr)")
        #expect(short.stdout.hasPrefix("Match host [your hostname] exec \"\(binary) access ssh-gen --hostname %h"), "\(short.stdout)")
    }

    // MARK: flag checks

    @Test("usage errors", arguments: [
        (["login", "https://ssh.example.com", "--transfer-url", "http://x.example"], "--transfer-url must be an https:// URL"),
        (["login", "https://ssh.example.com", "--transfer-url", "https://"], "--transfer-url must be an https:// URL"),
        (["login", "https://ssh.example.com", "--transfer-polls", "0"], "--transfer-polls must be between 1 and 100"),
        (["login", "https://ssh.example.com", "--transfer-poll-interval", "61"],
         "--transfer-poll-interval must be between 0 and 60 seconds"),
        (["logout", "https://ssh.example.com", "--resolve", "ssh.example.com:443"], "--resolve \"ssh.example.com:443\""),
        (["token", "https://ssh.example.com", "--loglevel", "chatty"], "chatty"),
        (["token", "https://ssh example.com"], "the URL"),
    ])
    func usageError(_ arguments: [String], _ message: String) throws {
        let dir = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: dir) }
        let result = try tool(arguments + ["--token-dir", dir.path])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("cf-access-tcp: ") && result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    // MARK: logout without the network

    @Test func logoutOfEverythingRemovesTokenFilesOnly() throws {
        let dir = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: dir) }
        for name in ["a.example-aud1-token", "team.cloudflareaccess.com-org-token", "team.cloudflareaccess.com-jwks"] {
            #expect(FileManager.default.createFile(atPath: dir.path + "/" + name, contents: Data("x".utf8),
                                                   attributes: [.posixPermissions: 0o600]))
        }
        let first = try tool(["logout", "--token-dir", dir.path])
        #expect(first.status == 0)
        #expect(Set(first.stderr.split(separator: "\n")) == [
            "cf-access-tcp: removed \(dir.path)/a.example-aud1-token",
            "cf-access-tcp: removed \(dir.path)/team.cloudflareaccess.com-org-token",
        ])
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["team.cloudflareaccess.com-jwks"])
        let second = try tool(["logout", "--token-dir", dir.path])
        #expect(second.status == 0 && second.stderr == "cf-access-tcp: no cached token to remove\n")
    }

    @Test func tokenForAnUnreachableAppFailsWithTheReason() throws {
        let dir = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: dir) }
        let port = try freeLoopbackPort()
        let result = try tool(["token", "https://ssh.example.com:\(port)", "--resolve", "ssh.example.com:\(port):127.0.0.1",
                               "--token-dir", dir.path])
        #expect(result.status == 69)   // ExitStatus.unavailable
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.hasPrefix("cf-access-tcp: Connection refused by ssh.example.com"), "\(result.stderr)")
    }

    // MARK: a whole login against the emulator

    /// Runs `arguments` inside network namespace `namespace`.
    func inNamespace(_ namespace: String, _ arguments: [String]) -> [String] {
        ["netns", "exec", namespace] + arguments
    }

    /// `login` in device mode (no browser): the test plays the other device by opening the printed URL
    /// with curl; then `token` prints the cached token, `logout` removes it and `token` says to log in.
    /// Everything runs in a network namespace of its own, where the emulator can listen on
    /// 127.0.0.1:443 (the key set is fetched from `https://<auth_domain>/`, port 443).
    @Test func deviceLoginThenTokenThenLogout() throws {
        try requireRealPart(which("ip") != nil, "iproute2's ip (for a test network namespace)")
        try requireRealPart(which("curl") != nil, "curl (plays the other device)")
        let namespace = "cfat-login-\(getpid())"
        _ = try? run("ip", ["netns", "del", namespace])  // left over by a killed run with the same pid
        #expect(try run("ip", ["netns", "add", namespace]).status == 0)
        defer { _ = try? run("ip", ["netns", "del", namespace]) }
        #expect(try run("ip", inNamespace(namespace, ["ip", "link", "set", "lo", "up"])).status == 0)

        let certs = try EdgeFixture.makeCerts(hosts: [Self.appHost, Self.authDomain, Self.transferHost])
        let tokens = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: tokens) }
        let ip = try #require(which("ip"))
        let edge = try ManagedProcess(URL(fileURLWithPath: ip), inNamespace(namespace, [
            try TestPaths.binary("cf-access-edge").path, "serve", "--listen", "127.0.0.1:443",
            "--cert", certs.certFile.path, "--key", certs.keyFile.path, "--team", "emulator",
        ]))
        defer { edge.terminate() }
        _ = try edge.waitForLine(matching: "cf-access-edge listening on ", timeout: 30)

        let resolve = [Self.appHost, Self.authDomain, Self.transferHost].flatMap { ["--resolve", "\($0):443:127.0.0.1"] }
        let common = ["--ca-file", certs.caFile.path, "--token-dir", tokens.path] + resolve
        let bin = try TestPaths.binary("cf-access-tcp").path
        let app = "https://\(Self.appHost)"

        let login = try ManagedProcess(URL(fileURLWithPath: ip), inNamespace(namespace, [
            bin, "login", app, "--print", "--no-browser", "--transfer-polls", "100", "--transfer-poll-interval", "0.5",
        ] + common))
        defer { login.terminate() }
        let shown = try login.waitForStderr(containing: "/cdn-cgi/access/cli?", timeout: 60)
        #expect(shown.contains("No browser could be opened here"))
        let url = try #require(shown.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .first { $0.hasPrefix("\(app)/cdn-cgi/access/cli?") })
        // The other device opens the URL (the emulator completes the login when its cli page is opened).
        let device = try run("ip", inNamespace(namespace, [
            "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--noproxy", "*", "--cacert", certs.caFile.path,
            "--resolve", "\(Self.appHost):443:127.0.0.1", url,
        ]))
        #expect(device.stdout == "200", "\(device.stderr)")
        #expect(try login.waitForExit(timeout: 120) == 0, "\(login.outputReport())")
        let token = login.stdoutText.trimmingCharacters(in: .newlines)
        #expect(token.hasPrefix("eyJ") && token.split(separator: ".").count == 3)
        #expect(login.stderrText.contains("cf-access-tcp: logged in to \(Self.appHost); the token is cached in \(tokens.path)"))

        let cached = try run("ip", inNamespace(namespace, [bin, "token", app] + common))
        #expect(cached.status == 0 && cached.stdout == token + "\n", "\(cached.stderr)")

        let logout = try run("ip", inNamespace(namespace, [bin, "logout", app] + common))
        #expect(logout.status == 0)
        #expect(logout.stderr.hasPrefix("cf-access-tcp: removed \(tokens.path)/\(Self.appHost)-"), "\(logout.stderr)")

        let gone = try run("ip", inNamespace(namespace, [bin, "token", app] + common))
        #expect(gone.status == 77 && gone.stdout.isEmpty)   // ExitStatus.accessDenied
        #expect(gone.stderr == "cf-access-tcp: no valid cached token for \(Self.appHost): run `cf-access-tcp login \(Self.appHost)`\n")
    }
}
