import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// After the 101 a TLS 1.3 stream's records are sealed and opened by the bridge itself, and a TLS
/// 1.2 stream's stay OpenSSL's (issue 27 point 1, reference/DECISIONS.md "TLS 1.3 records after the
/// upgrade are ours"), against an edge we did not write: Python's `ssl` (OpenSSL's record layer on
/// the other side) in scripts/hostile-tls-edge.py, which echoes every binary frame.
@Suite("the bridge's own TLS 1.3 records", .serialized, .ownThreads)
struct OwnRecordsTests {
    /// Python's server picks by its own order (TLS_AES_256_GCM_SHA384 with Debian's OpenSSL).
    static let announcement = "TLS records from here on sealed and opened by the bridge (TLS_"

    @Test("stdio: 2 MiB echoed in order through either record layer; only TLS 1.3 says the bridge took over",
          arguments: [false, true])
    func echoed(tls12: Bool) throws {
        let edge = try HostileEdge(mode: "idle-drop", extra: ["--idle-limit", "30"] + (tls12 ? ["--tls12"] : []),
                                   script: "hostile-tls-edge.py")
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try edge.clientArguments(extra: ["--loglevel", "debug"]), stdin: .pipe)
        defer { process.terminate() }
        // Sizes that cross the 16 KiB record and the 256 KiB buffer at many offsets.
        var payload = Data()
        var size = 1
        while payload.count < 2 << 20 {
            payload.append(Data((0..<size).map { UInt8(truncatingIfNeeded: ($0 &* 31) &+ size) }))
            size = size * 3 + 7
            if size > 300_000 { size = 5 }
        }
        try process.writeStdin(payload)
        let echoed = try process.waitForStdout(byteCount: payload.count, timeout: 60)
        #expect(echoed == payload, "\(echoed.count) of \(payload.count) bytes; first difference at \(zip(echoed, payload).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1)")
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 30) == 0, "stderr: \(process.stderrText.suffix(2000))")
        let stderr = process.stderrText
        if tls12 {
            #expect(!stderr.contains("sealed and opened by the bridge"), "stderr: \(stderr.suffix(2000))")
            // The handshake line names a TLS 1.2 suite, so the stream really was TLS 1.2.
            let handshake = stderr.split(separator: "\n").first { $0.contains("TLS handshake (") }
            #expect(handshake.map { !$0.contains("TLS_AES_") } == true, "stderr: \(stderr.suffix(2000))")
        } else {
            #expect(stderr.contains(Self.announcement), "stderr: \(stderr.suffix(2000))")
        }
        #expect(edge.events.contains("request-in-time"), "\(edge.events)")
    }
}
