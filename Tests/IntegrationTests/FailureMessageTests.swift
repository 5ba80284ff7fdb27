import Foundation
import Testing

/// Every refusal ends the process quickly with its own plain one-line message.
@Suite("failures are plain and fast", .serialized, .ownThreads)
struct FailureMessageTests {
    /// Runs cf-access-tcp in ProxyCommand mode with stdin held open (as ssh does) and returns its
    /// exit status and stderr; the process must end by itself within `limit` seconds.
    private func runProxyMode(_ arguments: [String], limit: TimeInterval = 5) throws -> (status: Int32, stderr: String, stdout: Data) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, stdin: .pipe)
        let status = try process.waitForExit(timeout: limit)
        return (status, process.stderrText, process.stdoutData)
    }

    @Test("a wrong service token: the clear message and a non-zero exit within 5 s")
    func wrongServiceToken() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try runProxyMode(try clientArguments(edge: edge, token: (testTokenID, "not-the-secret")))
        #expect(result.status != 0)
        #expect(result.stderr.contains("Cloudflare Access rejected the service token for \(testHost) (redirected to login)"))
        #expect(result.stdout.isEmpty, "nothing but tunnel bytes may reach stdout")
        #expect(!result.stderr.contains("not-the-secret"))
    }

    @Test("no credential: the login starts (app discovery honours --connect-to); an unreachable key set is one plain line")
    func missingCredential() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let tokens = try makeTempDir("cfat-tokens")
        defer { try? FileManager.default.removeItem(at: tokens) }
        // Nothing listens on 127.0.0.1:443 (login tests use emulators on other loopback addresses).
        let result = try runProxyMode(try clientArguments(edge: edge, token: nil, extra: [
            "--token-dir", tokens.path, "--resolve", "emulator.cloudflareaccess.com:443:127.0.0.1"]))
        #expect(result.status != 0)
        // The metadata came from the emulator through --connect-to; its key set lives on the
        // team domain, which nothing serves here.
        #expect(result.stderr == "cf-access-tcp: Connection refused by emulator.cloudflareaccess.com (127.0.0.1:443): is the edge address right?\n")
    }

    @Test("a rejected access token says so")
    func rejectedAccessToken() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", appTokens: ["good.app.token"])
        let result = try runProxyMode(try clientArguments(edge: edge, token: nil, extra: ["--access-token", "stale.app.token"]))
        #expect(result.status != 0)
        #expect(result.stderr.contains("Cloudflare Access rejected the access token for \(testHost)"))
        #expect(!result.stderr.contains("stale.app.token"))
    }

    @Test("an accepted access token is sent as Cf-Access-Token")
    func acceptedAccessToken() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, appTokens: ["good.app.token"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try clientArguments(edge: edge, token: nil, extra: ["--access-token", "good.app.token"]),
                                         stdin: .pipe)
        try process.writeStdin(Data("hello".utf8))
        let echoed = try process.waitForStdout(byteCount: 5, timeout: 20)
        #expect(echoed == Data("hello".utf8))
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 10) == 0)
        let stats = try edge.stats(host: testHost)
        #expect(stats.lastHeaderNames.contains("cf-access-token"))
    }

    @Test("HTTP refusals each get their own message", arguments: [
        (403, "Cloudflare Access denied \(testHost) (HTTP 403 Forbidden)"),
        (502, "HTTP 502"),
        (503, "HTTP 503"),
    ])
    func forcedStatus(status: Int, expected: String) throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)],
                                   forceStatus: status)
        let result = try runProxyMode(try clientArguments(edge: edge))
        #expect(result.status != 0)
        #expect(result.stderr.contains(expected), "\(result.stderr)")
    }

    @Test("TLS failure: an untrusted CA gives the real reason")
    func untrustedCertificate() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        // Without --ca-file the system store is used, which does not know the test CA.
        let args = ["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)", "--id", testTokenID, "--secret", testTokenSecret]
        let result = try runProxyMode(args)
        #expect(result.status != 0)
        #expect(result.stderr.contains("TLS with \(testHost) failed: unable to get local issuer certificate"), "\(result.stderr)")
    }

    @Test("TLS failure: a certificate for another name is refused (hostname mismatch)")
    func hostnameMismatch() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try runProxyMode(try clientArguments(edge: edge, host: "unlisted.cfat.test"))
        #expect(result.status != 0)
        #expect(result.stderr.contains("TLS with unlisted.cfat.test failed: hostname mismatch"), "\(result.stderr)")
    }

    @Test("connection refused")
    func connectionRefused() throws {
        let port = try freeLoopbackPort()
        let result = try runProxyMode(["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)"])
        #expect(result.status != 0)
        // No credential: the first dial is the login's app discovery (libcurl), which names the address too.
        #expect(result.stderr.hasPrefix("cf-access-tcp: Connection refused by ") && result.stderr.contains("127.0.0.1:\(port)"),
                "\(result.stderr)")
    }

    @Test("a name that does not resolve")
    func dnsFailure() throws {
        let result = try runProxyMode(["--hostname", "no-such-host.invalid"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("Cannot resolve no-such-host.invalid"), "\(result.stderr)")
    }

    @Test("bad flags: one plain line each, before anything is dialled", arguments: [
        (["--hostname", testHost, "--url", "0.0.0.0:0"], "--allow-non-loopback"),
        (["--hostname", testHost, "--url", "[::]:0"], "--allow-non-loopback"),
        (["--hostname", testHost, "-H", "X-Bad: a\r\nb"], "line break"),
        (["--hostname", testHost, "-H", "Bad Name: x"], "--header"),
        (["--hostname", ""], "--hostname"),
        (["--hostname", "ftp://\(testHost)"], "ftp"),
        (["--url", "127.0.0.1:0"], "--hostname is required"),
        (["--hostname", testHost, "--id", "only-id"], "--service-token-secret"),
        (["--hostname", testHost, "--loglevel", "chatty"], "--loglevel"),
    ])
    func badFlags(arguments: [String], expected: String) throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: 10)
        #expect(result.status != 0)
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "expected one line, got: \(result.stderr)")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }
}
