import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issues 11.5 and 11.6: a local half-close still gets the edge's reply; the Close handshake
/// ends with a TLS close_notify; a malformed Close from the edge is answered with 1002.
@Suite("half-close and the Close handshake", .serialized, .ownThreads)
struct HalfCloseAndCloseTests {
    @Test("stdio: `printf 'req\\n' | cf-access-tcp` against an echo target prints the reply and exits 0")
    func stdinEOFStillGetsTheReply() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             try clientArguments(edge: edge, extra: ["--half-close-linger", "2"]),
                             stdin: Data("req\n".utf8), timeout: 30)
        #expect(result.stdout == "req\n", "stderr: \(result.stderr)")
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("listener: shutdown(SHUT_WR) on the local connection still gets the reply, then EOF")
    func listenerHalfClose() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--half-close-linger", "2"]))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("request\n".utf8))
        _ = shutdown(client.fd, Int32(SHUT_WR))
        var back = [UInt8]()
        _ = try client.receive(count: 8) { back += $0 }
        #expect(String(decoding: back, as: UTF8.self) == "request\n")
        #expect(client.waitForEOF(timeout: 30), "the linger is bounded: the connection ends")
    }

    @Test("--half-close-linger out of range is refused with one line")
    func lingerFlagRange() throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             ["--hostname", testHost, "--half-close-linger", "4000"], timeout: 30)
        #expect(result.status == ExitStatus.usage.rawValue)
        #expect(result.stderr == "cf-access-tcp: --half-close-linger must be between 0 (close at once) and 3600 seconds\n")
    }

    @Test("after the Close handshake the client sends a TLS close_notify")
    func closeNotify() throws {
        let edge = try HostileEdge(mode: "echo-close")
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             try edge.clientArguments(extra: ["--half-close-linger", "0"]), stdin: Data(), timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        try edge.waitForEvent { $0 == "client-close 1000" }
        let end = try edge.waitForEvent { $0.hasPrefix("tls-") }
        #expect(end == "tls-close-notify", "\(edge.events)")
    }

    @Test("a malformed Close from the edge is answered with Close 1002", arguments: [
        ("03", "1-byte payload"), ("03ed", "code 1005"), ("03ee", "code 1006"), ("03e8ff", "invalid UTF-8 reason"),
    ])
    func malformedClose(payload: String, what: String) throws {
        let edge = try HostileEdge(mode: "bad-close", extra: ["--close-payload", payload])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(), stdin: .pipe)
        let status = try process.waitForExit(timeout: 30)
        try edge.waitForEvent { $0.hasPrefix("client-close") }
        #expect(edge.events.contains("client-close 1002"), "\(what): \(edge.events)")
        #expect(status == ExitStatus.protocolError.rawValue, "\(what): \(process.stderrText)")
    }

    @Test("a well-formed Close 1000 from the edge is echoed and the run exits 0")
    func wellFormedClose() throws {
        let edge = try HostileEdge(mode: "bad-close", extra: ["--close-payload", "03e8"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(), stdin: .pipe)
        let status = try process.waitForExit(timeout: 30)
        try edge.waitForEvent { $0.hasPrefix("client-close") }
        #expect(edge.events.contains("client-close 1000"), "\(edge.events)")
        #expect(status == 0, "\(process.stderrText)")
    }
}
