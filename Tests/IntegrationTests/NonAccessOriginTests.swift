import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// websockify (Debian's, not ours) with TLS from the test CA, in front of a TCP target: a
/// WebSocket origin with no Access application (it answers the discovery HEAD with 405).
final class WebsockifyFixture: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int

    init(target: String) throws {
        let websockify = which("websockify")
        try requireRealPart(websockify != nil, "websockify (package websockify)")
        let certs = try certs()
        var lastError = ""
        for _ in 0..<5 {
            let port = try freeLoopbackPort()
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
@Suite("origins without Access", .serialized)
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
}
