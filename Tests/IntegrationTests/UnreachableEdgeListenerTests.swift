import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 26.1: a listener started while the edge cannot be reached (boot before the network, a VPN
/// not up yet) keeps listening and serves as soon as an edge is there; `--fail-fast` keeps the old
/// start. The edge that appears is websockify, which shares no code with us.
@Suite("a listener started while the edge is unreachable", .serialized, .ownThreads)
struct UnreachableEdgeListenerTests {
    private func arguments(port: Int, extra: [String] = []) throws -> [String] {
        ["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)", "--ca-file", try certs().caFile.path,
         "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret] + extra
    }

    @Test("it listens, says the edge is not reachable yet, closes a connection it cannot serve with one line, and serves once websockify appears")
    func servesOnceTheEdgeAppears() throws {
        let port = try freeLoopbackPort()
        let echo = try TargetFixture(.echo)
        let listener = try ListenerProcess(arguments: try arguments(port: port))
        defer { listener.stop() }
        #expect(listener.process.stderrText.contains(
            "the edge is not reachable yet (Connection refused by 127.0.0.1:\(port): is the edge address right?); listening all the same"),
            "\(listener.process.stderrText)")

        // While the edge is down: the connection is closed, with the reason in the log.
        do {
            let client = try ClientSocket(port: listener.port)
            try? client.send(Array("anyone there?\n".utf8))
            let (bytes, end) = client.readToEnd(timeout: 30)
            #expect(bytes.isEmpty)
            // A reset: an end that looked clean would read as an empty answer.
            #expect(end == ECONNRESET, "errno \(end)")
        }
        _ = try listener.process.waitForStderr(containing: "cf-access-tcp: Connection refused by 127.0.0.1:\(port)", timeout: 30)
        #expect(listener.process.isRunning)

        // The edge comes up on the same address: the next connection is served.
        let edge = try WebsockifyFixture(target: echo.address, port: port)
        _ = edge
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("hello through the late edge\n".utf8))
        var back = [UInt8]()
        _ = try client.receive(count: 28) { back += $0 }
        #expect(String(decoding: back, as: UTF8.self) == "hello through the late edge\n")
        #expect(listener.process.isRunning)
    }

    @Test("with --retries, a connection made while the edge is down waits, its dial retried after 1 s, 5 s: served once websockify appears")
    func connectionWaitsForTheEdge() throws {
        let port = try freeLoopbackPort()
        let echo = try TargetFixture(.echo)
        let listener = try ListenerProcess(arguments: try arguments(port: port, extra: ["--retries", "2"]))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("sent while the edge was down\n".utf8))
        _ = try listener.process.waitForStderr(containing: "dialling again in 1.0 seconds (attempt 2 of 3)", timeout: 30)
        let edge = try WebsockifyFixture(target: echo.address, port: port)
        _ = edge
        var back = [UInt8]()
        _ = try client.receive(count: 29) { back += $0 }
        #expect(String(decoding: back, as: UTF8.self) == "sent while the edge was down\n")
        #expect(!listener.process.stderrText.contains("cf-access-tcp: Connection refused by"), "\(listener.process.stderrText)")
    }

    @Test("a connection whose retries run out is closed with one line; the listener goes on")
    func retriesRunOut() throws {
        let port = try freeLoopbackPort()
        let listener = try ListenerProcess(arguments: try arguments(port: port, extra: ["--retries", "1"]))
        defer { listener.stop() }
        let started = Date()
        let client = try ClientSocket(port: listener.port)
        let (bytes, _) = client.readToEnd(timeout: 30)
        #expect(bytes.isEmpty)
        #expect(Date().timeIntervalSince(started) >= 0.9, "closed before its one retry after 1 s")
        let line = "cf-access-tcp: Connection refused by 127.0.0.1:\(port): is the edge address right?"
        _ = try listener.process.waitForStderr(containing: line, timeout: 30)
        #expect(listener.process.stderrText.components(separatedBy: line).count == 2, "one line: \(listener.process.stderrText)")
        #expect(listener.process.stderrText.contains("dialling again in 1.0 seconds (attempt 2 of 2)"))
        #expect(listener.process.isRunning)
    }

    @Test("--fail-fast: exit 69 at start with the plain line, as before; stdio mode stays fail-fast without it")
    func failFast() throws {
        let port = try freeLoopbackPort()
        let listener = try run(try TestPaths.binary("cf-access-tcp"),
                               try arguments(port: port, extra: ["--url", "127.0.0.1:0", "--fail-fast"]), timeout: 60)
        #expect(listener.status == ExitStatus.unavailable.rawValue, "\(listener.stderr)")
        #expect(listener.stderr == "cf-access-tcp: Connection refused by 127.0.0.1:\(port): is the edge address right?\n")
        let stdio = try run(try TestPaths.binary("cf-access-tcp"), try arguments(port: port), stdin: Data(), timeout: 60)
        #expect(stdio.status == ExitStatus.unavailable.rawValue, "\(stdio.stderr)")
        #expect(!stdio.stderr.contains("listening"))
    }
}
