import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 27 point 5: a listener needs two descriptors per connection, so it raises its soft
/// open-file limit toward the hard one (up to 65,536) before it serves; stdio mode keeps the limit.
@Suite("the listener raises its open-file limit", .serialized)
struct DescriptorLimitTests {
    /// The soft and hard "Max open files" of `pid`.
    private func limits(_ pid: pid_t) throws -> (soft: String, hard: String) {
        let text = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("Max open files") })
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        return (String(fields[3]), String(fields[4]))
    }

    @Test("started with a soft limit of 256: the listener serves with the hard limit (2,000; the machine's own), at most 65,536; it still serves")
    func raisedTowardTheHardLimit() throws {
        try requireRealPart(FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit"), "prlimit (package util-linux)")
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        // This machine's own hard limit bounds what a test may ask for (20,000 in the CI container).
        var own = rlimit()
        _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &own)
        let highest = Int(clamping: own.rlim_max)
        for (hard, expected) in [(2000, "2000"), (highest, String(min(highest, 65_536)))] {
            let process = try ManagedProcess(URL(fileURLWithPath: "/usr/bin/prlimit"),
                                             ["--nofile=256:\(hard)", try TestPaths.binary("cf-access-tcp").path]
                                             + (try clientArguments(edge: edge)) + ["--url", "127.0.0.1:0"])
            defer { process.terminate() }
            let line = try process.waitForStderr(containing: "listening on 127.0.0.1:", timeout: 30)
            let port = try #require(Int(line[line.range(of: "listening on 127.0.0.1:")!.upperBound...].prefix { $0.isNumber }))
            let seen = try limits(process.pid)
            #expect(seen.soft == expected && seen.hard == String(hard), "\(seen)")
            #expect(try echo("still serving\n", port: port) == "still serving\n")
        }
    }
}
