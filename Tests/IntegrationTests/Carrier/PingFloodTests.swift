import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 12.2: an edge that floods pings and never reads cannot grow the client's memory.
@Suite("ping flood from an edge that never reads", .serialized, .ownThreads)
struct PingFloodTests {
    @Test("stdio: the client's RSS stays under 96 MiB while the edge floods pings for 10 s, and it stops reading the flood")
    func pingFloodStaysBounded() throws {
        let edge = try HostileEdge(mode: "ping-flood")
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(), stdin: .pipe)
        defer { process.terminate() }
        var peak = 0
        for _ in 0..<40 {
            usleep(250_000)
            guard process.isRunning, let rss = residentKiB(pid: process.pid) else { break }
            peak = max(peak, rss)
        }
        #expect(process.isRunning, "the tunnel must survive a ping flood: \(process.stderrText)")
        #expect(peak > 0)
        #expect(peak < 96 * 1024, "peak RSS \(peak) KiB")
        // The client stopped reading from an edge that does not read its pong: the edge could
        // only fill the socket buffers, not push gigabytes of pings.
        process.terminate()
        let ended = try edge.waitForEvent { $0.hasPrefix("flood-ended") }
        let sent = Int(ended.split(separator: " ").last ?? "") ?? -1
        #expect(sent >= 0 && sent < 64 << 20, "the edge pushed \(sent) bytes of pings: \(ended)")
    }
}
