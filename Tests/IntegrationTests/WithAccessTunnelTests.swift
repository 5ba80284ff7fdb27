import AccessTransport
import CFAccessTCP
import Foundation
import Logging
import Testing

private let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// The scoped form (issue 19 §4): `withAccessTunnel { tunnel in … }` always disconnects — after a
/// return, a throw and a cancellation — so its listener's port is free and its state
/// `.disconnected` once it returns.
@Suite("withAccessTunnel always disconnects", .serialized, .ownThreads)
struct WithAccessTunnelTests {
    private struct Planned: Error {}

    private static func options(_ edge: EdgeFixture) throws -> AccessTunnel.Options {
        AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"), caFile: edge.certs.caFile.path,
                             connectTimeout: .seconds(60), retry: .never, limits: .unlimited)
    }

    private static var method: AuthenticationMethod {
        get throws { .serviceToken(try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)) }
    }

    @Test("a body that returns: its value comes back, the tunnel is disconnected and its port closed")
    func returns() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let method = try Self.method
        let (tunnel, port, echoed) = try await withAccessTunnel(options: try Self.options(edge), logger: quiet) { tunnel in
            let port = try await tunnel.connect(hostname: testHost, method: method)
            let client = try ClientSocket(port: Int(port))
            try client.send(Array("scoped\n".utf8))
            var back: [UInt8] = []
            _ = try client.receive(count: 7) { back += $0 }
            return (tunnel, port, back)
        }
        #expect(echoed == Array("scoped\n".utf8))
        #expect(tunnel.currentState == .disconnected)
        #expect(!loopbackPortAccepts(Int(port)), "the listener outlived withAccessTunnel")
    }

    @Test("a body that throws: the error comes back as it is (typed), after the disconnect")
    func throwsTyped() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let method = try Self.method
        let options = try Self.options(edge)
        let seen = LockedBox<(AccessTunnel, UInt16)?>(nil)
        do throws(Planned) {
            try await withAccessTunnel(options: options, logger: quiet) { (tunnel) async throws(Planned) in
                guard let port = try? await tunnel.connect(hostname: testHost, method: method) else {
                    Issue.record("connect failed")
                    return
                }
                seen.withLock { $0 = (tunnel, port) }
                throw Planned()
            }
            Issue.record("the body's error was not rethrown")
        } catch {
            // `error` is a Planned: the typed throw passed through.
        }
        let (tunnel, port) = try #require(seen.withLock { $0 })
        #expect(tunnel.currentState == .disconnected)
        #expect(!loopbackPortAccepts(Int(port)))
    }

    @Test("a cancelled task: the body's wait ends, the tunnel is disconnected before withAccessTunnel returns")
    func cancelled() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let method = try Self.method
        let options = try Self.options(edge)
        let seen = LockedBox<(AccessTunnel, UInt16)?>(nil)
        let ended = OneShot<Void>()
        let task = Task {
            defer { ended.signal() }
            try await withAccessTunnel(options: options, logger: quiet) { tunnel in
                let port = try await tunnel.connect(hostname: testHost, method: method)
                seen.withLock { $0 = (tunnel, port) }
                try await Task.sleep(for: .seconds(600))
            }
        }
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(60)
        while seen.withLock({ $0 }) == nil, clock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let (tunnel, port) = try #require(seen.withLock { $0 })
        #expect(tunnel.currentState == .connected(localPort: port))
        task.cancel()
        #expect(await ended.value(within: 60) != nil, "withAccessTunnel did not return after its task was cancelled")
        #expect(tunnel.currentState == .disconnected)
        #expect(!loopbackPortAccepts(Int(port)))
        await #expect(throws: CancellationError.self) { try await task.value }
    }
}
