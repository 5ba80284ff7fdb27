// Failing fixtures, where the built products and tools are, and private temporary directories.
// Plain Foundation + Glibc so the fixtures depend on nothing under test.

import Foundation
#if canImport(Glibc)
import Glibc
#endif

// MARK: - Errors

/// An integration-test fixture could not do its job. The message says what
/// went wrong and carries whatever output helps (a child's stderr, say).
struct FixtureError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// Fails, with a clear message, unless a real part the integration tests need
/// (a tool, a test user, a running service) is present.
///
/// The integration tests never skip: a missing part is a failure, in CI
/// (`CI=true`) and on a developer's machine alike. `scripts/setup` installs
/// every part.
func requireRealPart(_ condition: Bool, _ what: String) throws {
    if condition { return }
    let ci = ProcessInfo.processInfo.environment["CI"] == "true" ? " (CI)" : ""
    throw FixtureError(
        "missing real part\(ci): \(what). Run scripts/setup to install it; "
            + "integration tests fail rather than skip when a part is missing.")
}

// MARK: - Paths

/// Where the built products live.
enum TestPaths {
    /// The directory holding the built `cf-access-tcp` and `cf-access-edge`.
    ///
    /// `CF_ACCESS_TCP_BIN_DIR` overrides it. Otherwise it is the directory of
    /// the running test executable: on Linux the test bundle
    /// `.build/<config>/cf-access-tcpPackageTests.xctest` is an executable in
    /// the same directory as the package's products.
    static var binDir: URL {
        if let override = ProcessInfo.processInfo.environment["CF_ACCESS_TCP_BIN_DIR"],
            !override.isEmpty
        {
            return URL(fileURLWithPath: override, isDirectory: true).standardizedFileURL
        }
        return runningExecutable.deletingLastPathComponent()
    }

    /// The built product `name` in `binDir`; throws if it is not there.
    static func binary(_ name: String) throws -> URL {
        let url = binDir.appendingPathComponent(name)
        guard isExecutableFile(url.path) else {
            throw FixtureError(
                "built product '\(name)' not found at \(url.path); build it with `swift build` "
                    + "(or point CF_ACCESS_TCP_BIN_DIR at the directory holding it)")
        }
        return url
    }

    /// The running executable, with symbolic links resolved.
    private static var runningExecutable: URL {
        if let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: resolved)
        }
        let argv0 = CommandLine.arguments.first ?? "."
        let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)
        return URL(fileURLWithPath: argv0, relativeTo: cwd).standardizedFileURL.resolvingSymlinksInPath()
    }
}

/// Whether `path` names a regular file this process may execute.
private func isExecutableFile(_ path: String) -> Bool {
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
        && !isDirectory.boolValue && access(path, X_OK) == 0
}

/// The full path of `tool`, looked up in `PATH` and then in `/usr/sbin` and
/// `/sbin` (where `sshd` lives); nil if it is nowhere. A `tool` containing a
/// slash is taken as a path.
func which(_ tool: String) -> String? {
    if tool.contains("/") {
        return isExecutableFile(tool) ? tool : nil
    }
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    let directories = path.split(separator: ":").map(String.init) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
    for directory in directories where !directory.isEmpty {
        let candidate = directory + "/" + tool
        if isExecutableFile(candidate) {
            return candidate
        }
    }
    return nil
}

/// A new, empty, private (0700) directory under the temporary directory,
/// named `<prefix>.XXXXXX`. The caller removes it.
func makeTempDir(_ prefix: String) throws -> URL {
    let base = FileManager.default.temporaryDirectory.path
    var template = Array((base + "/" + prefix + ".XXXXXX").utf8CString)
    let created = template.withUnsafeMutableBufferPointer { buffer -> Bool in
        mkdtemp(buffer.baseAddress!) != nil
    }
    guard created else {
        throw FixtureError("mkdtemp under \(base) failed: \(String(cString: strerror(errno)))")
    }
    let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    return URL(fileURLWithPath: path, isDirectory: true)
}
