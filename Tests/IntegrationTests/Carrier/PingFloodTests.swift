import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 12.2: an edge that floods pings and never reads cannot grow the client's memory.
@Suite("ping flood from an edge that never reads", .serialized)
struct PingFloodTests {
    @Test("stdio: the client's RSS stays under 96 MiB while the edge floods pings for 10 s")
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
    }
}
