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

    /// What cloudflared's `update` would do, said in one line: the package manager updates us.
    static let updateNote = "cf-access-tcp does not update itself: your package manager does (apt-get install --only-upgrade cf-access-tcp)"

    /// The answer to a command line that only asks about the tool, printed before the argument
    /// parser sees anything, or nil: the long report for `--version`, `-v`, `-V` or `version`
    /// (cloudflared's spellings), the bare version number for `version --short` (`-s`), and
    /// `updateNote` for `update`.
    static func earlyAnswer(to arguments: [String]) -> String? {
        switch arguments {
        case ["--version"], ["-v"], ["-V"], ["version"]: return text()
        case ["version", "--short"], ["version", "-s"]: return Version.string
        case ["update"]: return updateNote
        default: return nil
        }
    }
}
