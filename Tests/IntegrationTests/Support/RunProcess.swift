// Running a tool to completion with a time bound.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs `executable` to completion, bounded by `timeout` seconds (after which
/// it is killed and an error with its output is thrown), and returns its exit
/// status and output.
func run(
    _ executable: URL, _ arguments: [String], env: [String: String] = [:],
    stdin: Data? = nil, timeout: TimeInterval = 60
) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = try ManagedProcess(
        executable, arguments, environment: env, stdin: stdin.map { .data($0) } ?? .none)
    let status = try process.waitForExit(timeout: timeout)
    return (status, process.stdoutText, process.stderrText)
}

/// Runs the tool at `path` (or, without a slash, found by `which`) to
/// completion; see `run(_:_:env:stdin:timeout:)` taking a URL.
func run(
    _ path: String, _ arguments: [String], env: [String: String] = [:],
    stdin: Data? = nil, timeout: TimeInterval = 60
) throws -> (status: Int32, stdout: String, stderr: String) {
    guard let resolved = which(path) else {
        throw FixtureError("'\(path)' not found in PATH, /usr/sbin or /sbin; run scripts/setup")
    }
    return try run(URL(fileURLWithPath: resolved), arguments, env: env, stdin: stdin, timeout: timeout)
}
