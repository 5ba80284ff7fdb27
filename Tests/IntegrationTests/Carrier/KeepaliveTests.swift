import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issues 11.4 and 12.13: keepalive pings every interval of silence; a dead edge is noticed
/// after three intervals even while we are sending.
@Suite("keepalive against the hostile edge", .serialized, .ownThreads)
struct KeepaliveTests {
    @Test("an idle tunnel with --keepalive 1 pings about every second, not every other one")
    func pingsEveryInterval() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try edge.clientArguments(extra: ["--keepalive", "1"]), stdin: .pipe)
        defer { process.terminate() }
        // Counted from the first ping (start-up may be slow here): over 9 more intervals,
        // every-interval pinging gives ~9 more pings, every-other-interval ~4.
        try edge.waitForEvent { $0 == "ping" }
        let first = edge.events.filter { $0 == "ping" }.count
        Thread.sleep(forTimeInterval: 9.3)
        let pings = edge.events.filter { $0 == "ping" }.count - first
        #expect(pings >= 7, "pings seen by the edge in 9 s: \(pings)")
        #expect(process.isRunning, "\(process.stderrText)")
    }

    @Test("the edge stops answering (SIGSTOP) during a slow upload: the tunnel ends with the keepalive line, exit 75")
    func deadEdgeWhileSending() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try edge.clientArguments(extra: ["--keepalive", "1"]), stdin: .pipe)
        defer {
            process.terminate()
            edge.process.send(signal: SIGCONT)
        }
        try process.writeStdin(Data("first\n".utf8))
        try process.waitForStdout(byteCount: 6, timeout: 30)
        edge.process.send(signal: SIGSTOP)
        // A trickle, so neither the kernel buffers nor the queue ever fill: the upload never stops.
        let writer = Thread {
            while process.isRunning {
                do { try process.writeStdin(Data(repeating: 0x61, count: 512)) } catch { return }
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        writer.start()
        let status = try process.waitForExit(timeout: 40)
        #expect(status == ExitStatus.connectionLost.rawValue, "\(process.stderrText)")
        #expect(process.stderrText == "cf-access-tcp: the edge did not answer for 3 s (keepalive): the tunnel to \(testHost) is lost\n")
    }
}
