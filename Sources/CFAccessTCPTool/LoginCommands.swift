import AccessTransport
import ArgumentParser
import CFAccessTCP
import FoundationEssentials
import Glibc

/// `cf-access-tcp login <url>`: log in to an Access application and cache its token.
struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Log in to a Cloudflare Access application and cache its token (like `cloudflared access login`).",
        discussion: """
        Opens a browser (or, without one, prints a URL and QR code for another device), waits for the \
        login, checks the token with the edge and caches it in ~/.cloudflared. As cloudflared does, \
        the token goes to stdout: "Successfully fetched your token:" and the token; the bare token \
        with --no-verbose or -app=URL; nothing with -q. Messages go to stderr.
        """
    )

    @Argument(help: "The application URL, e.g. https://ssh.example.com")
    var url: String?

    @Option(name: [.customLong("app", withSingleDash: true), .customLong("app")],
            help: ArgumentHelp("The application URL, cloudflared's spelling (-app=URL); prints the bare token.",
                               visibility: .hidden))
    var app: String?

    @Flag(name: .customLong("print"), help: ArgumentHelp("Print the bare token to stdout (as --no-verbose).",
                                                         visibility: .hidden))
    var printToken = false

    @Flag(name: .customLong("no-verbose"), help: "Print only the token to stdout.")
    var noVerbose = false

    @Flag(name: [.customShort("q"), .customLong("quiet")], help: "Print nothing on success (cloudflared's -q).")
    var quiet = false

    @OptionGroup var auth: AuthFlags

    func run() async throws {
        let origin = try parseApplicationURL(try applicationURL(argument: url, app: app))
        let provider = try makeProvider(flags: auth)
        let token: String
        do {
            token = try await runAuthWork { () async throws(TunnelFailure) -> String in try await provider.login(for: origin) }
        } catch {
            writeStderr("cf-access-tcp: \(error.withFlags)")
            throw ExitStatus(error).code
        }
        switch LoginOutput(quiet: quiet, bare: noVerbose || printToken || app != nil) {
        case .nothing:
            return
        case .bareToken:
            // As cloudflared prints it for scripts: the token alone (a newline only for a person).
            writeStdout(token + (isatty(STDOUT_FILENO) == 1 ? "\n" : ""))
        case .verbose:
            writeStdout("Successfully fetched your token:\n\n\(token)\n\n")
        }
        // The note on stderr, unless only the token was asked for (--no-verbose, -app).
        if !noVerbose && app == nil {
            let directory = auth.login.tokenDir ?? FileTokenStore.defaultDirectory(environment: ProcessInfo.processInfo.environment)
            writeStderr("cf-access-tcp: logged in to \(origin.host); the token is cached in \(directory)")
        }
    }
}

/// What `login` prints on stdout, as cloudflared does.
enum LoginOutput: Equatable {
    /// `-q`: nothing.
    case nothing
    /// `--no-verbose` or `-app=URL`: the token alone.
    case bareToken
    /// Otherwise: `Successfully fetched your token:`, a blank line, the token, a blank line.
    case verbose

    init(quiet: Bool, bare: Bool) {
        self = quiet ? .nothing : bare ? .bareToken : .verbose
    }
}

/// Writes `text` to stdout as it is, unbuffered.
func writeStdout(_ text: String) {
    FileDescriptors.writeAll(STDOUT_FILENO, text)
}

/// `cf-access-tcp token <url>`: print the cached token of an application.
struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print the cached, valid Access token of an application (like `cloudflared access token`)."
    )

    @Argument(help: "The application URL, e.g. https://ssh.example.com")
    var url: String?

    @Option(name: [.customLong("app", withSingleDash: true), .customLong("app")],
            help: ArgumentHelp("The application URL, cloudflared's spelling (-app=URL).", visibility: .hidden))
    var app: String?

    @OptionGroup var auth: CacheFlags

    func run() async throws {
        let origin = try parseApplicationURL(try applicationURL(argument: url, app: app))
        let provider = try makeProvider(flags: auth)
        let token: String?
        do {
            token = try await runAuthWork { () async throws(TunnelFailure) -> String? in try await provider.cachedAppToken(for: origin) }
        } catch {
            writeStderr("cf-access-tcp: \(error.withFlags)")
            throw ExitStatus(error).code
        }
        guard let token else {
            writeStderr("cf-access-tcp: no valid cached token for \(origin.host): run `cf-access-tcp login \(origin.host)`")
            throw ExitStatus(TunnelFailure.loginRequired(host: origin.host)).code
        }
        FileDescriptors.writeAll(STDOUT_FILENO, token + "\n")
    }
}

/// `cf-access-tcp logout [<url>]`: remove cached tokens.
struct LogoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Remove the cached token of an application, or without a URL every cached Access token."
    )

    @Argument(help: "The application URL; without it every cached token (org tokens too) is removed.")
    var url: String?

    @Flag(name: .customLong("org"),
          help: "With a URL: remove the team's org token too, so the next connection needs a real login.")
    var org = false

    @OptionGroup var auth: CacheFlags

    func run() async throws {
        let origin = try url.map { raw in try parseApplicationURL(raw) }
        let provider = try makeProvider(flags: auth)
        let includeOrg = org
        let result = try await runAuthWork { () async throws(TunnelFailure) -> AccessTokenProvider.LogoutResult in
            await provider.logout(origin: origin, includingOrgToken: includeOrg)
        }
        if result.removed.isEmpty {
            writeStderr("cf-access-tcp: no cached token to remove")
        }
        for path in result.removed { writeStderr("cf-access-tcp: removed \(path)") }
        if let kept = result.keptOrgToken {
            writeStderr("cf-access-tcp: kept the org token \(kept): the next connection logs in again with it, "
                        + "without a browser; add --org to remove it too")
        }
    }
}

/// The application URL of `login`/`token`: the argument, or cloudflared's `-app=URL`.
func applicationURL(argument: String?, app: String?) throws -> String {
    switch (argument, app) {
    case let (url?, nil), let (nil, url?):
        return url
    case let (first?, second?):
        guard first == second else {
            throw usageFailure("two application URLs were given (\(first) and -app \(second)): give one")
        }
        return first
    case (nil, nil):
        throw usageFailure("the application URL is missing: give it, e.g. `https://ssh.example.com`")
    }
}
