import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension EdgeFixture {
    /// `POST /cdn-cgi/edge/admin/<path>` on this emulator as `host`; returns the body.
    @discardableResult
    func admin(_ path: String, host: String = testHost) throws -> String {
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let arguments = ["-sS", "--fail-with-body", "--max-time", "10", "-X", "POST"] + curlArguments(host: host)
            + ["\(url(host: host))/cdn-cgi/edge/admin/\(path)"]
        let result = try run(URL(fileURLWithPath: curl!), arguments, timeout: 20)
        guard result.status == 0 else {
            throw FixtureError("admin \(path) failed (\(result.status)): \(result.stdout) \(result.stderr)")
        }
        return result.stdout
    }
}

/// The repository's root, from this file's place in it.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

/// `scripts/hostile-edge.py`: a TLS WebSocket edge that answers the upgrade correctly, then
/// misbehaves as `mode` says (see the script's header). It serves the test certificate, so a
/// client reaches it as `testHost` with `--connect-to`.
final class HostileEdge: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int

    /// Starts `scripts/<script>` in `mode`: hostile-edge.py (Python's TLS sockets), or
    /// hostile-tls-edge.py (TLS in memory, every write built byte by byte: the ends of a TLS stream).
    init(mode: String, extra: [String] = [], script scriptName: String = "hostile-edge.py") throws {
        let python = which("python3")
        try requireRealPart(python != nil, "python3 (package python3)")
        let script = repositoryRoot.appendingPathComponent("scripts/\(scriptName)")
        let certs = try certs()
        process = try ManagedProcess(URL(fileURLWithPath: python!),
                                     ["-u", script.path, "--cert", certs.certFile.path, "--key", certs.keyFile.path,
                                      "--mode", mode] + extra)
        let prefix = "hostile-edge listening on 127.0.0.1:"
        let line = try process.waitForLine(matching: prefix, timeout: 30)
        guard let port = Int(line.dropFirst(prefix.count)) else { throw FixtureError("no port in: \(line)") }
        self.port = port
    }

    deinit { process.terminate() }

    /// The event lines the edge printed so far (after its "listening" line).
    var events: [String] {
        process.stdoutText.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("hostile-edge listening") }
    }

    /// Waits (bounded) until an event line satisfies `predicate`; returns it.
    @discardableResult
    func waitForEvent(timeout: TimeInterval = 30, _ predicate: (String) -> Bool) throws -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if let line = events.first(where: predicate) { return line }
            usleep(50_000)
        }
        throw FixtureError("the hostile edge saw no matching event within \(timeout) s: \(events)\n"
                           + process.outputReport())
    }

    /// `waitForEvent` for async tests: it sleeps with `Task.sleep`, so it never holds one of the
    /// few threads of Swift's cooperative pool (two on a 2-core machine) that the tunnels under
    /// test need.
    @discardableResult
    func event(timeout: TimeInterval = 120, _ predicate: (String) -> Bool) async throws -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if let line = events.first(where: predicate) { return line }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        throw FixtureError("the hostile edge saw no matching event within \(timeout) s: \(events)\n"
                           + process.outputReport())
    }

    /// `cf-access-tcp` arguments that reach this edge as `testHost` with the test CA.
    func clientArguments(extra: [String] = []) throws -> [String] {
        ["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)", "--ca-file", try certs().caFile.path,
         "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret] + extra
    }
}

/// Runs blocking work (a fixture's start, socket I/O) on a thread of its own and awaits it, so an
/// async test never holds one of the few threads of Swift's cooperative pool.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
