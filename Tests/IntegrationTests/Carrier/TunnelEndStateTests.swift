import AccessCore
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
private let serviceToken = try! ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)

private func options(port: Int, limits: ListenerLimits = .singleConnection, keepalive: Duration = .seconds(30)) throws -> AccessTunnel.Options {
    AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(port)"), caFile: try certs().caFile.path,
                         connectTimeout: .seconds(60), retry: .never, limits: limits, keepaliveInterval: keepalive)
}

/// Collects every state a subscriber sees, from before `connect`.
private final class StateLog: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [ConnectionState] = []
    private var task: Task<Void, Never>?

    init(_ tunnel: AccessTunnel) {
        let stream = tunnel.state
        task = Task { [weak self] in
            for await state in stream { self?.append(state) }
        }
    }

    deinit { task?.cancel() }

    private func append(_ state: ConnectionState) {
        lock.lock()
        seen.append(state)
        lock.unlock()
    }

    var states: [ConnectionState] {
        lock.lock()
        defer { lock.unlock() }
        return seen
    }

    /// Waits (bounded) until a seen state satisfies `predicate`.
    /// Bounded generously: swift-testing runs synchronous tests on the same two pool threads, and
    /// two of them blocking at once can hold this subscriber's task back for tens of seconds.
    func wait(timeout: TimeInterval = 120, _ predicate: (ConnectionState) -> Bool) async throws {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if states.contains(where: predicate) { return }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw FixtureError("no matching state within \(timeout) s; saw \(states)")
    }
}

private func isFailed(_ state: ConnectionState) -> Bool {
    if case .failed = state { return true }
    return false
}

/// Issue 13.3 / 11.7 / issue 10 "Also": the library's state leaves `.connected` when the tunnel
/// ends, and says why.
@Suite("library state follows the tunnel's end", .serialized, .ownThreads)
struct TunnelEndStateTests {
    @Test("stream: the edge resets the tunnel (drop-tunnels) → failed, after idle → authenticating → connecting → connected in order")
    func streamResetByEdge() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(port: edge.port), logger: quiet)
        let log = StateLog(tunnel)
        try await log.wait { $0 == .idle }
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(serviceToken))
        defer { stream.close() }
        #expect(try edge.admin("drop-tunnels") == "dropped 1 tunnels\n")
        let end = await stream.ended
        #expect(!end.isClean, "a reset is not a clean end: \(end)")
        if case .reset = end {} else { Issue.record("expected a reset, got \(end)") }
        try await log.wait(isFailed)
        #expect(Array(log.states.prefix(4)) == [.idle, .authenticating, .connecting, .connected(localPort: 0)])
        #expect(log.states.count == 5, "\(log.states)")
        #expect(await tunnel.lastEnd == end)
        await tunnel.disconnect()
    }

    @Test("stream: the local side closes the stream → disconnected (a clean end)")
    func streamClosedLocally() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(port: edge.port), logger: quiet)
        let log = StateLog(tunnel)
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(serviceToken))
        stream.close()
        let end = await stream.ended
        #expect(end.isClean, "\(end)")
        try await log.wait { $0 == .disconnected }
        #expect(!log.states.contains(where: isFailed), "\(log.states)")
        await tunnel.disconnect()
    }

    @Test("stream: the edge closes cleanly (the target ends) → disconnected")
    func streamClosedByEdge() async throws {
        let source = try TargetFixture(.source, bytes: 1000)
        let edge = try EdgeFixture(certs: try certs(), target: source.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(port: edge.port), logger: quiet)
        let log = StateLog(tunnel)
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(serviceToken))
        defer { stream.close() }
        let end = await stream.ended
        #expect(end == .closedByEdge(code: 1000), "\(end)")
        try await log.wait { $0 == .disconnected }
        await tunnel.disconnect()
    }

    @Test("single-connection listener: its connection is reset by the edge → failed; the port is closed")
    func singleConnectionListenerReset() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(port: edge.port), logger: quiet)
        let log = StateLog(tunnel)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        let client = try ClientSocket(port: Int(port))
        try client.send(Array("ping\n".utf8))
        var back = [UInt8]()
        _ = try client.receive(count: 5) { back += $0 }
        #expect(back == Array("ping\n".utf8))
        #expect(try edge.admin("drop-tunnels") == "dropped 1 tunnels\n")
        try await log.wait(isFailed)
        #expect(Array(log.states.prefix(4)) == [.idle, .authenticating, .connecting, .connected(localPort: port)])
        #expect(!loopbackPortAccepts(Int(port)))
        await tunnel.disconnect()
    }

    @Test("single-connection listener: the local client closes → disconnected")
    func singleConnectionListenerClosed() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(port: edge.port), logger: quiet)
        let log = StateLog(tunnel)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        do {
            let client = try ClientSocket(port: Int(port))
            try client.send(Array("ping\n".utf8))
            var back = [UInt8]()
            _ = try client.receive(count: 5) { back += $0 }
        }
        try await log.wait { $0 == .disconnected }
        #expect(await tunnel.lastEnd?.isClean == true)
        await tunnel.disconnect()
    }
}
