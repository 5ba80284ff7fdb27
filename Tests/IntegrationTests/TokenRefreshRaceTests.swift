import AccessTestSupport
import AccessTransport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 12.3: a listener logged in with OAuth, the edge revoking every app token, then 20
/// connections at once, wave after wave: not one connection may fail.
@Suite("token refresh under load", .serialized, .ownThreads)
struct TokenRefreshRaceTests {
    @Test("revocation waves with 20 parallel connections each: zero failed connections")
    func revocationWaves() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        let listener = try ListenerProcess(arguments: world.tunnelArguments, environment: try world.browserEnvironment())
        defer { listener.stop() }

        @Sendable func roundTrip(_ text: String) throws {
            let client = try ClientSocket(port: listener.port)
            var timeout = timeval(tv_sec: 30, tv_usec: 0)
            _ = setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            try client.send(Array(text.utf8))
            var got: [UInt8] = []
            while got.count < text.utf8.count {
                let n = try client.receive(count: text.utf8.count - got.count) { got += $0 }
                if n == 0 { break }
            }
            guard got == Array(text.utf8) else { throw FixtureError("\(text): got \(got.count) bytes back") }
        }
        try roundTrip("warm-up")
        var failedWaves: [String] = []
        for wave in 1...6 {
            #expect(try world.admin("revoke").hasPrefix("revoked"))
            let failures = LockedBox<[String]>([])
            let group = DispatchGroup()
            for index in 0..<20 {
                group.enter()
                DispatchQueue.global().async {
                    defer { group.leave() }
                    do { try roundTrip("wave-\(wave)-\(index)") } catch { failures.withLock { $0.append("\(error)") } }
                }
            }
            group.wait()
            let failed = failures.withLock { $0 }
            if !failed.isEmpty { failedWaves.append("wave \(wave): \(failed.count) failed: \(failed.prefix(3))") }
        }
        #expect(failedWaves.isEmpty, "\(failedWaves)\n\(listener.process.stderrText.suffix(1500))")
        #expect(world.browserOpens.count == 1, "the org token must serve every refresh")
        #expect(!listener.process.stderrText.contains("rejected the access token"), "\(listener.process.stderrText.suffix(1500))")
    }
}
