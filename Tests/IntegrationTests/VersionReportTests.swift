import Foundation
import Testing

/// `cf-access-tcp --version` (issue 18.4): what a bug report needs.
@Suite("version report", .ownThreads)
struct VersionReportTests {
    @Test("--version, -v and version name the version, the git commit and every C library's version", arguments: [
        ["--version"], ["-v"], ["-V"], ["version"],
    ])
    func versionReport(arguments: [String]) throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: 20)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        let first = try #require(lines.first)
        // "cf-access-tcp 0.1.0 (commit 0123456789ab)", "-dirty" when built from a changed tree.
        #expect(first.wholeMatch(of: /cf-access-tcp \d+\.\d+\.\d+ \(commit [0-9a-f]{12}(-dirty)?\)/) != nil, "\(first)")
        // The commit is the one this checkout is at (the tests run on the tree they built).
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let head = try run(URL(fileURLWithPath: "/usr/bin/git"), ["-C", packageRoot.path, "rev-parse", "--short=12", "HEAD"],
                           timeout: 20).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(first.contains("(commit \(head)"), "\(first) vs HEAD \(head)")
        for library in ["OpenSSL", "libsodium", "libqrencode", "libcurl", "libssh", "libssh2"] {
            let line = lines.first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(library + " ") }
            let version = line?.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first
            #expect(version?.first?.isNumber == true, "no version for \(library) in:\n\(result.stdout)")
        }
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    @Test("version --short (-s) prints the bare version; update says the package manager updates the tool (exit 0, no network)")
    func shortVersionAndUpdate() throws {
        for arguments in [["version", "--short"], ["version", "-s"]] {
            let result = try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: 20)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.wholeMatch(of: /\d+\.\d+\.\d+\n/) != nil, "\(result.stdout)")
        }
        let update = try run(try TestPaths.binary("cf-access-tcp"), ["update"], timeout: 20)
        #expect(update.status == 0, "\(update.stderr)")
        #expect(update.stdout == "cf-access-tcp does not update itself: your package manager does (apt-get install --only-upgrade cf-access-tcp)\n")
        #expect(update.stderr.isEmpty)
    }

    @Test("--help still offers --version")
    func helpMentionsVersion() throws {
        let help = try run(try TestPaths.binary("cf-access-tcp"), ["--help"], timeout: 20)
        #expect(help.stdout.contains("--version"), "\(help.stdout)")
    }
}
