import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// New connections to the edge resume the TLS session of earlier ones (issue 5: connection setup),
/// and fall back to a full, verified handshake when the edge cannot resume.
@Suite("TLS session resumption", .serialized, .ownThreads)
struct TLSResumptionTests {
    /// One echoed byte string through the listener, on a new connection.
    private func echoOnce(port: Int, _ text: String) throws {
        let client = try ClientSocket(port: port)
        let payload = Array(text.utf8)
        try client.send(payload)
        var back: [UInt8] = []
        let n = try client.receive(count: payload.count) { back += $0 }
        #expect(n == payload.count && back == payload, "echo of \(text) came back as \(back)")
    }

    /// Waits for the listener's debug line about connection `id`'s handshake and returns its verdict.
    private func handshakeKind(_ listener: ListenerProcess, connection id: Int) -> String? {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            for line in listener.process.stderrText.split(separator: "\n") {
                for kind in ["TLS session resumed", "full TLS handshake"]
                where line.contains("connection \(id): \(kind) (") {
                    return kind
                }
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return nil
    }

    @Test("the second and later connections resume the edge's TLS session; bytes are unchanged")
    func laterConnectionsResume() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--loglevel", "debug"]))
        defer { listener.stop() }
        for n in 1...4 { try echoOnce(port: listener.port, "resumption check \(n)") }
        // The listener's start-up probe runs on a carrier of its own: its connection 1 is one line,
        // the listener's first connection another; both are full handshakes.
        #expect(handshakeKind(listener, connection: 1) == "full TLS handshake")
        for id in 2...4 {
            #expect(handshakeKind(listener, connection: id) == "TLS session resumed",
                    "connection \(id): \(listener.process.stderrText.suffix(2000))")
        }
        // Our cipher order puts AES-128-GCM first, and the edge honours the client's order.
        let handshakes = listener.process.stderrText.split(separator: "\n").filter { $0.contains("TLS session resumed (") }
        #expect(handshakes.count >= 3 && handshakes.allSatisfy { $0.hasSuffix("(TLS_AES_128_GCM_SHA256)") }, "\(handshakes)")
        try edge.waitForStats(host: testHost) { $0.upgradesAccepted == 5 && $0.activeTunnels == 0 }
    }

    /// An echo target, an edge and a debug-logging listener whose connection 2 resumed the session
    /// of connection 1; then the edge is stopped, so a test can put another on its address.
    private func listenerWithCachedSession() throws -> (echo: TargetFixture, edgeAddress: String, listener: ListenerProcess) {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--loglevel", "debug"]))
        try echoOnce(port: listener.port, "first")
        try echoOnce(port: listener.port, "second")
        #expect(handshakeKind(listener, connection: 2) == "TLS session resumed")
        edge.stop()
        return (echo, "\(edge.address):\(edge.port)", listener)
    }

    @Test("an edge that no longer knows the session (restarted) gets a full, verified handshake, and the connection works")
    func restartedEdgeFallsBack() throws {
        let (echo, address, listener) = try listenerWithCachedSession()
        defer { listener.stop() }
        // Same address, new process: new ticket keys, so the stored ticket cannot be decrypted.
        let second = try EdgeFixture(certs: try certs(), target: echo.address,
                                     serviceTokens: [(testTokenID, testTokenSecret)], listen: address)
        defer { second.stop() }
        try echoOnce(port: listener.port, "after the restart")
        #expect(handshakeKind(listener, connection: 3) == "full TLS handshake")
        // The new edge's tickets are used from then on.
        try echoOnce(port: listener.port, "after the restart 2")
        #expect(handshakeKind(listener, connection: 4) == "TLS session resumed")
        try second.waitForStats(host: testHost) { $0.upgradesAccepted == 2 && $0.activeTunnels == 0 }
    }

    @Test("a cached session never lets an edge with an untrusted certificate in")
    func impostorIsRefused() throws {
        let (echo, address, listener) = try listenerWithCachedSession()
        defer { listener.stop() }
        // The same address now answers with a certificate for the same name from another CA.
        let otherCA = try EdgeFixture.makeCerts(hosts: [testHost])
        let impostor = try EdgeFixture(certs: otherCA, target: echo.address,
                                       serviceTokens: [(testTokenID, testTokenSecret)], listen: address)
        defer { impostor.stop() }
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("must not arrive".utf8))
        #expect(client.waitForEOF(timeout: 30), "the local connection stayed open")
        _ = try listener.process.waitForStderr(containing: "unable to get local issuer certificate", timeout: 20)
        let stats = try impostor.stats(host: testHost)
        #expect(stats.upgradesAccepted == 0 && stats.bytesIn == 0, "the impostor got \(stats)")
    }
}
