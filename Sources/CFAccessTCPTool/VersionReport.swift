import AccessCore
import AccessTransport
import CFAccessSSH

/// What `cf-access-tcp --version` prints: the tool's version and the git commit it was built from,
/// then the version of every C library it runs with — the lines a bug report needs.
enum VersionReport {
    /// The first line, also the argument parser's short version: "cf-access-tcp 0.1.0".
    static let short = "cf-access-tcp " + Version.string

    /// The whole report, one library a line.
    static func text() -> String {
        var lines = ["\(short) (commit \(BuildInfo.commit))"]
        let engines = SSHEngineKind.allCases.map { ($0.rawValue, String($0.features.version.dropFirst($0.rawValue.count + 1))) }
        let libraries = LinkedLibraries.versions() + engines
        let width = libraries.map(\.name.count).max() ?? 0
        for (name, version) in libraries {
            lines.append("  " + name + String(repeating: " ", count: width - name.count) + "  " + version)
        }
        return lines.joined(separator: "\n")
    }

    /// Whether the command line asks for the version: `--version` or `-v` alone, cloudflared's
    /// spellings (`version` as a word is the subcommand `cloudflared version`).
    static func isRequested(by arguments: [String]) -> Bool {
        arguments == ["--version"] || arguments == ["-v"] || arguments == ["version"]
    }
}
