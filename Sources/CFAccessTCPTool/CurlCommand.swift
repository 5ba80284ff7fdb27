import AccessTransport
import ArgumentParser
import CFAccessTCP
import FoundationEssentials
import Glibc

/// `cf-access-tcp access curl URL [curl args…]`: curl with the application's token
/// (cloudflared's `access curl`).
struct CurlCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "curl",
        abstract: "Run curl with the application's Access token (like `cloudflared access curl`).",
        discussion: """
        cf-access-tcp access curl [login flags] [--allow-request|-ar] URL [curl arguments…]

        Gets the app token of URL (cached and checked with the edge, else a login, as `login` does) and \\
        runs curl with URL and the arguments after it, plus the token in a cf-access-token header. The \\
        token reaches curl through a pipe (`-H @/dev/fd/N`), never its command line. With \\
        --allow-request (-ar), no login is started: without a valid cached token, curl runs without \\
        one. Our flags come before URL; everything after it is curl's. The exit status is curl's.
        """
    )

    @Flag(name: [.customLong("allow-request"), .customLong("ar", withSingleDash: true)],
          help: "Without a valid cached token, run curl without one instead of logging in.")
    var allowRequest = false

    @OptionGroup var auth: AuthFlags

    @Argument(parsing: .captureForPassthrough, help: "The application URL, then curl's arguments.")
    var words: [String] = []

    func run() async throws {
        guard let url = words.first, !url.hasPrefix("-") else {
            throw usageFailure("give the application URL first, then curl's arguments, e.g. "
                               + "`cf-access-tcp access curl https://app.example.com/api -sS`")
        }
        guard url.lowercased().hasPrefix("https://") || url.lowercased().hasPrefix("http://") else {
            throw usageFailure("\(url) is not an http(s) URL: give the application URL first, e.g. https://app.example.com/")
        }
        // The application is the URL without its query and fragment (curl gets it whole).
        let origin = try parseApplicationURL(String(url.prefix { $0 != "?" && $0 != "#" }))
        let provider = try makeProvider(flags: auth)
        let allow = allowRequest
        let token: String?
        do {
            token = try await runAuthWork { () async throws(TunnelFailure) -> String? in
                allow ? try await provider.cachedAppToken(for: origin) : try await provider.login(for: origin)
            }
        } catch {
            writeStderr("cf-access-tcp: \(error.withFlags)")
            throw ExitStatus(error).code
        }
        if token == nil {
            writeStderr("cf-access-tcp: no valid Access token for \(origin.host): running curl without one "
                        + "(run `cf-access-tcp login \(origin.host)` to get one)")
        }
        let status = Self.execCurl(arguments: words, token: token)
        throw ExitCode(status)
    }

    /// Replaces this process with curl; returns only if that failed (with the exit status to use).
    /// The token goes through a pipe curl reads as a header file, so `ps` never shows it.
    static func execCurl(arguments: [String], token: String?) -> Int32 {
        var argv = ["curl"] + arguments
        if let token {
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else {
                writeStderr("cf-access-tcp: cannot hand the token to curl: \(SystemError.current().text)")
                return ExitStatus.localIO.rawValue
            }
            let line = Array("cf-access-token: \(token)\n".utf8)
            let written = line.withUnsafeBytes { write(fds[1], $0.baseAddress, $0.count) }
            close(fds[1])
            guard written == line.count else {
                writeStderr("cf-access-tcp: cannot hand the token to curl: \(SystemError.current().text)")
                return ExitStatus.localIO.rawValue
            }
            argv += ["-H", "@/dev/fd/\(fds[0])"]
        }
        var cArguments = argv.map { strdup($0) }
        cArguments.append(nil)
        execvp("curl", &cArguments)
        let reason = SystemError.current().text
        writeStderr("cf-access-tcp: cannot run curl: \(reason)" + (errno == ENOENT ? " (install the curl package)" : ""))
        return ExitStatus.unavailable.rawValue
    }
}
