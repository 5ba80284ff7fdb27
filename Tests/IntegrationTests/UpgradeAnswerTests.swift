import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `scripts/hostile-upgrade-edge.py`: a TLS edge in Python that answers the WebSocket upgrade
/// wrongly on purpose (a bad `Sec-WebSocket-Accept`, endless headers, …).
final class UpgradeEdge: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int
    private let dir: URL

    init(mode: String) throws {
        let python = which("python3")
        try requireRealPart(python != nil, "python3 (package python3)")
        dir = try makeTempDir("cfat-upgrade-edge")
        let portFile = dir.appendingPathComponent("port")
        let certs = try certs()
        process = try ManagedProcess(URL(fileURLWithPath: python!),
                                     [repositoryRoot.appendingPathComponent("scripts/hostile-upgrade-edge.py").path,
                                      "--cert", certs.certFile.path, "--key", certs.keyFile.path,
                                      "--port-file", portFile.path, "--mode", mode])
        let deadline = Date(timeIntervalSinceNow: 30)
        var found: Int?
        while found == nil, Date() < deadline, process.isRunning {
            if let text = try? String(contentsOf: portFile, encoding: .utf8) { found = Int(text) } else { usleep(50_000) }
        }
        guard let found else {
            process.terminate()
            throw FixtureError("the upgrade edge did not start:\n\(process.outputReport())")
        }
        port = found
    }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: dir)
    }

    func arguments() throws -> [String] {
        ["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)", "--ca-file", try certs().caFile.path,
         "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret]
    }
}

/// Issue 12.6: each broken answer gets its true reason, not "Network unavailable".
@Suite("broken upgrade answers", .serialized, .ownThreads)
struct UpgradeAnswerTests {
    private func runTool(_ arguments: [String]) throws -> (status: Int32, stderr: String) {
        let result = try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: 40)
        return (result.status, result.stderr)
    }

    @Test("a 101 with a wrong Sec-WebSocket-Accept is the edge's protocol error (exit 76)")
    func badAccept() throws {
        let edge = try UpgradeEdge(mode: "bad-accept")
        let result = try runTool(try edge.arguments())
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("wrong Sec-WebSocket-Accept"), "\(result.stderr)")
        #expect(!result.stderr.contains("Network unavailable"))
    }

    @Test("endless response headers are the edge's protocol error, not the network's")
    func endlessHeaders() throws {
        let edge = try UpgradeEdge(mode: "endless")
        let result = try runTool(try edge.arguments())
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("cannot be parsed"), "\(result.stderr)")
        #expect(!result.stderr.contains("Network unavailable"))
    }

    @Test("an answer that is not HTTP, then a close, is named as such (exit 76), not 'Network unavailable'")
    func notHTTPThenClose() throws {
        let edge = try UpgradeEdge(mode: "not-http-close")
        let result = try runTool(try edge.arguments())
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("answered the WebSocket upgrade with \"SSH-2.0…\", which is not HTTP"), "\(result.stderr)")
        #expect(!result.stderr.contains("Network unavailable"))
    }

    @Test("an answer that is not HTTP on a connection held open is named at once, not after the connect timeout")
    func notHTTPHeldOpen() throws {
        let edge = try UpgradeEdge(mode: "not-http")
        // A timeout longer than the run's own limit: only the true reason can end it in time.
        let result = try runTool(try edge.arguments() + ["--connect-timeout", "120"])
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("answered the WebSocket upgrade with \"SSH-2.0…\", which is not HTTP"), "\(result.stderr)")
        #expect(!result.stderr.contains("timed out"))
    }

    @Test("a 101 without Upgrade: websocket is the edge's protocol error (exit 76)")
    func noUpgradeHeader() throws {
        let edge = try UpgradeEdge(mode: "no-upgrade")
        let result = try runTool(try edge.arguments())
        #expect(result.status == 76, "\(result.stderr)")
        #expect(result.stderr.contains("a 101 answer without \"Upgrade: websocket\""), "\(result.stderr)")
    }

    /// Runs the tool in stdio mode until the banner arrives, then ends stdin: exit 0 expected.
    private func bannerThroughTool(_ arguments: [String], environment: [String: String] = [:]) throws -> (String, Int32, String) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments + ["--half-close-linger", "0"],
                                         environment: environment, stdin: .pipe)
        defer { process.terminate() }
        let banner = (try? process.waitForStdout(byteCount: Self.banner.utf8.count, timeout: 30)) ?? Data()
        process.closeStdin()
        let status = try process.waitForExit(timeout: 20)
        return (String(decoding: banner, as: UTF8.self), status, process.stderrText)
    }

    static let banner = "SSH-2.0-HostileEdge_1.0\r\n"

    @Test("a 101 and its first frame dribbled one byte per TLS record reach stdout whole (our own answer parser)")
    func dribbledAnswer() throws {
        let edge = try UpgradeEdge(mode: "dribble")
        let (banner, status, stderr) = try bannerThroughTool(try edge.arguments())
        #expect(banner == Self.banner, "\(stderr)")
        #expect(status == 0, "\(stderr)")
    }

    @Test("a proxy whose 200 comes one byte per TCP write: the TLS handshake after it is not disturbed")
    func dribblingProxy() throws {
        let proxy = try UpgradeEdge(mode: "proxy-dribble")
        let (banner, status, stderr) = try bannerThroughTool(try proxy.arguments(),
                                                             environment: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        #expect(banner == Self.banner, "\(stderr)")
        #expect(status == 0, "\(stderr)")
        #expect(proxy.process.stderrText.contains("proxy 0: CONNECT 127.0.0.1:\(proxy.port) HTTP/1.1"), "\(proxy.process.stderrText)")
    }

    @Test("a proxy that refuses CONNECT (407), closes, or answers something else than HTTP is named (exit 69)",
          arguments: ["proxy-407", "proxy-close", "proxy-not-http"])
    func refusingProxy(_ mode: String) throws {
        let proxy = try UpgradeEdge(mode: mode)
        let result = try run(try TestPaths.binary("cf-access-tcp"), try proxy.arguments(),
                             env: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"], timeout: 40)
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.contains("The proxy 127.0.0.1:\(proxy.port) refused to connect to 127.0.0.1:\(proxy.port), "
            + "or answered CONNECT with something else than 200"), "\(result.stderr)")
    }

    @Test("request headers too large for one request say so (exit 64), not 'Network unavailable'")
    func oversizedRequestHeaders() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let big = String(repeating: "a", count: 70_000)
        let result = try runTool(try clientArguments(edge: edge, extra: ["-H", "X-Big: \(big)"]))
        #expect(result.status == 64, "\(result.stderr.prefix(600))")
        #expect(result.stderr.contains("shorten the extra headers"), "\(result.stderr.prefix(600))")
        #expect(!result.stderr.contains("Network unavailable"))
    }

    @Test("running out of file descriptors says so with the limit (exit 74), never 'Internal error … a bug'", arguments: [6, 9, 12])
    func outOfFileDescriptors(limit: Int) throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tool = try TestPaths.binary("cf-access-tcp").path
        let line = "ulimit -n \(limit) && exec " + ([tool] + (try clientArguments(edge: edge))).map { "'\($0)'" }.joined(separator: " ")
        let result = try run(URL(fileURLWithPath: "/bin/sh"), ["-c", line], timeout: 40)
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains("Too many open files (the limit is \(limit))"), "\(result.stderr)")
        #expect(!result.stderr.contains("Internal error"))
    }
}
