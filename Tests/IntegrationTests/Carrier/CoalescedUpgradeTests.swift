import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 12.1: bytes that arrive with the `101` (same TLS record) or right after it, whatever
/// the record boundaries, reach the local side — in ProxyCommand (stdio) and listener mode.
@Suite("bytes right after the 101", .serialized, .ownThreads)
struct CoalescedUpgradeTests {
    static let payload = "hello from the edge\n"
    /// The hostile edge's 101 response is 129 bytes; its frame is 2 + 20.
    static let responseLength = 129
    static let frameLength = 2 + 20

    /// Runs the client in stdio mode (stdin held open, as ssh does) until it exits by itself.
    private func runStdio(_ edge: HostileEdge) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try edge.clientArguments(), stdin: .pipe)
        let status = try process.waitForExit(timeout: 30)
        return (status, process.stdoutText, process.stderrText)
    }

    @Test("stdio: a frame in the same TLS write as the 101 reaches stdout")
    func stdioCoalesced() throws {
        let edge = try HostileEdge(mode: "coalesce")
        let result = try runStdio(edge)
        #expect(result.stdout == Self.payload, "stderr: \(result.stderr)")
        #expect(result.status == 0, "the edge closed cleanly (Close 1000); stderr: \(result.stderr)")
    }

    @Test("stdio: the 101 and a frame split across two TLS writes at every offset near the boundary")
    func stdioSplitSweep() throws {
        let first = Self.responseLength - 4
        let last = Self.responseLength + Self.frameLength
        let edge = try HostileEdge(mode: "split", extra: ["--split", String(first), "--sweep"])
        for offset in first...last {
            let result = try runStdio(edge)
            #expect(result.stdout == Self.payload, "split at \(offset): stderr \(result.stderr)")
            #expect(result.status == 0, "split at \(offset): stderr \(result.stderr)")
        }
    }

    @Test("listener: a coalesced frame and every split offset of the whole 101 + frame reach the local socket")
    func listenerSplitSweep() throws {
        let edge = try HostileEdge(mode: "split", extra: ["--split", "0", "--sweep"])
        let listener = try ListenerProcess(arguments: try edge.clientArguments())
        defer { listener.stop() }
        // The listener's start-up probe took offset 0; one connection per further offset (and
        // the full length, which is the coalesced case).
        for offset in 1...(Self.responseLength + Self.frameLength) {
            let client = try ClientSocket(port: listener.port)
            var received = [UInt8]()
            _ = try client.receive(count: Self.payload.utf8.count) { received += $0 }
            #expect(String(decoding: received, as: UTF8.self) == Self.payload, "split at \(offset)")
            #expect(client.waitForEOF(timeout: 20), "split at \(offset): the edge's Close ends the connection")
        }
    }
}
