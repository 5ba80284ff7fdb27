import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The emulator's `drop-tunnels` admin call: every open tunnel is reset, new ones still work.
@Suite("emulator drop-tunnels", .serialized, .ownThreads)
struct DropTunnelsTests {
    @Test("drop-tunnels resets the open tunnel, says how many it dropped, and later upgrades work")
    func dropsOpenTunnels() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        #expect(try edge.admin("drop-tunnels") == "dropped 0 tunnels\n")
        let client = try ClientSocket(port: listener.port)
        try client.send(Array("hello\n".utf8))
        var echoed = [UInt8]()
        _ = try client.receive(count: 6) { echoed += $0 }
        #expect(echoed == Array("hello\n".utf8))
        let closesBefore = try edge.stats(host: testHost).closeFramesReceived
        #expect(try edge.admin("drop-tunnels") == "dropped 1 tunnels\n")
        #expect(client.waitForEOF(timeout: 20), "the local connection ends once its tunnel is reset")
        try edge.waitForStats(host: testHost, timeout: 20) { $0.activeTunnels == 0 }
        // The edge did not get a Close frame from a tunnel it cut itself.
        #expect(try edge.stats(host: testHost).closeFramesReceived == closesBefore)
        let again = try ClientSocket(port: listener.port)
        try again.send(Array("again\n".utf8))
        var second = [UInt8]()
        _ = try again.receive(count: 6) { second += $0 }
        #expect(second == Array("again\n".utf8))
    }
}
