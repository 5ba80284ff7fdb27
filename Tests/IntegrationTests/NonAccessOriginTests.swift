import AccessTestSupport
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// websockify (Debian's, not ours) with TLS from the test CA, in front of a TCP target: a
/// WebSocket origin with no Access application (it answers the discovery HEAD with 405).
final class WebsockifyFixture: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int

    /// websockify with TLS (the test CA's certificate) in front of `target`, on `port` (else a
    /// free one).
    init(target: String, port wanted: Int? = nil) throws {
        let websockify = which("websockify")
        try requireRealPart(websockify != nil, "websockify (package websockify)")
        let certs = try certs()
        var lastError = ""
        for _ in 0..<5 {
            let port = try wanted ?? freeLoopbackPort()
            let process = try ManagedProcess(URL(fileURLWithPath: websockify!),
                                             ["--cert", certs.certFile.path, "--key", certs.keyFile.path, "--ssl-only",
                                              "127.0.0.1:\(port)", target])
            let deadline = Date(timeIntervalSinceNow: 30)
            while Date() < deadline, process.isRunning, !loopbackPortAccepts(port) { usleep(100_000) }
            if process.isRunning, loopbackPortAccepts(port) {
                self.process = process
                self.port = port
                return
            }
            lastError = process.outputReport()
            process.terminate()
        }
        throw FixtureError("websockify did not start:\n\(lastError)")
    }

    deinit { process.terminate() }
}

/// Issue 11.1: an origin without an Access application just works with no credential.
@Suite("origins without Access", .serialized, .ownThreads)
struct NonAccessOriginTests {
    @Test("ssh through ProxyCommand with no credential, via websockify in front of sshd, runs a command")
    func sshThroughWebsockify() throws {
        let sshd = try SSHDFixture()
        let websockify = try WebsockifyFixture(target: "127.0.0.1:\(sshd.port)")
        let tokens = try makeTempDir("cfat-noaccess")
        defer { try? FileManager.default.removeItem(at: tokens) }
        let bin = try TestPaths.binary("cf-access-tcp").path
        let proxy = "\(bin) --hostname %h --connect-to 127.0.0.1:\(websockify.port) --ca-file \(try certs().caFile.path) "
            + "--token-dir \(tokens.path) --no-browser"
        let result = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost, command: "echo no-access-ok")
        #expect(result.status == 0, "ssh failed: \(result.stderr)\n\(websockify.process.stderrText.suffix(600))")
        #expect(result.stdout == "no-access-ok\n")
        // No login was attempted: no token, lock or URL file.
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: tokens.path)) ?? []).isEmpty)
    }

    @Test("listener mode with no credential bridges to an origin without Access")
    func listenerThroughWebsockify() throws {
        let echo = try TargetFixture(.echo)
        let websockify = try WebsockifyFixture(target: echo.address)
        let tokens = try makeTempDir("cfat-noaccess")
        defer { try? FileManager.default.removeItem(at: tokens) }
        let listener = try ListenerProcess(arguments: ["--hostname", testHost, "--connect-to", "127.0.0.1:\(websockify.port)",
                                                       "--ca-file", try certs().caFile.path, "--token-dir", tokens.path,
                                                       "--no-browser"])
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        let payload = Array("through websockify\n".utf8)
        try client.send(payload)
        var got: [UInt8] = []
        _ = try client.receive(count: payload.count) { got += $0 }
        #expect(got == payload)
    }

    @Test("issue 17.7: no credential and an origin whose HTTP requests fail: the tunnel dials first and works, no HEAD is sent")
    func headFailsButTheTunnelWorks() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let tokens = try makeTempDir("cfat-noaccess")
        defer { try? FileManager.default.removeItem(at: tokens) }
        // The origin is what the issue describes: its WebSocket works, a HEAD fails.
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let head = try run(URL(fileURLWithPath: curl!), ["-sS", "-I", "--max-time", "10", "--cacert", try certs().caFile.path,
                                                         "--connect-to", "\(testHost):443:127.0.0.1:\(edge.port)",
                                                         "https://\(testHost)/"], timeout: 20)
        #expect(head.status != 0, "the hostile origin answered a HEAD")
        _ = try edge.waitForEvent { $0.hasPrefix("not-an-upgrade HEAD") }

        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         ["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)",
                                          "--ca-file", try certs().caFile.path, "--token-dir", tokens.path, "--no-browser",
                                          "--half-close-linger", "0"], stdin: .pipe)
        defer { process.terminate() }
        try process.writeStdin(Data("dial first\n".utf8))
        let echoed = try process.waitForStdout(byteCount: 11, timeout: 60)
        #expect(echoed == Data("dial first\n".utf8), "\(process.outputReport())")
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 30) == ExitStatus.success.rawValue, "\(process.outputReport())")
        #expect(edge.events.filter { $0.hasPrefix("not-an-upgrade") }.count == 1, "the client sent an HTTP request: \(edge.events)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: tokens.path)) ?? []).isEmpty)
    }

    @Test("issue 17.7, the library: .oauth with the built-in login reaches an origin whose HEAD fails; no lookup, no login")
    func libraryHeadFails() async throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let tokens = try makeTempDir("cfat-noaccess")
        defer { try? FileManager.default.removeItem(at: tokens) }
        let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let presenter = RecordingPresenter()
        let provider = AccessTokenProvider(configuration: AccessLoginConfiguration(tokenDirectory: tokens.path,
                                                                                   caFile: try certs().caFile.path),
                                           logger: quiet, browser: NoBrowser(), presenter: presenter)
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: try certs().caFile.path, connectTimeout: .seconds(60), retry: .never)
        let tunnel = AccessTunnel(options: options, logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: .oauth(provider))
        try await stream.write(Array("library\n".utf8))
        var back: [UInt8] = []
        while back.count < 8, let chunk = try await stream.read() { back += chunk }
        #expect(back == Array("library\n".utf8))
        #expect(edge.events.filter { $0.hasPrefix("not-an-upgrade") }.isEmpty, "\(edge.events)")
        #expect(presenter.shown.isEmpty)
        await tunnel.disconnect()
    }
}
