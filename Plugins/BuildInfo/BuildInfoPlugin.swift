import Foundation
import PackagePlugin

/// Writes `BuildInfo.swift` for the `cf-access-tcp` executable before every build: the git commit
/// the tool is built from, so `cf-access-tcp --version` (and a bug report quoting it) names the
/// exact source. `unknown` when the package is not a git checkout (a source tarball); `-dirty`
/// when the work tree differs from that commit. The file is rewritten only when its text changes,
/// so an unchanged tree rebuilds nothing.
@main
struct BuildInfoPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "generated")
        let script = """
            commit="$(git -C "$1" rev-parse --short=12 HEAD 2>/dev/null)" || commit=unknown
            if [ "$commit" != unknown ] && ! git -C "$1" diff --quiet HEAD -- 2>/dev/null; then
                commit="$commit-dirty"
            fi
            text="/// Written by the BuildInfo plugin before each build.
            enum BuildInfo {
                /// The git commit the tool was built from (\\`unknown\\` outside a git checkout).
                static let commit = \\"$commit\\"
            }"
            mkdir -p "$2"
            if [ "$(cat "$2/BuildInfo.swift" 2>/dev/null)" != "$text" ]; then
                printf '%s\\n' "$text" > "$2/BuildInfo.swift"
            fi
            """
        return [
            .prebuildCommand(
                displayName: "Recording the git commit of cf-access-tcp",
                executable: URL(filePath: "/bin/sh"),
                arguments: ["-c", script, "build-info", context.package.directoryURL.path(), output.path()],
                outputFilesDirectory: output),
        ]
    }
}
