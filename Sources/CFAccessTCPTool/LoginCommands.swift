import AccessTransport
import ArgumentParser
import CFAccessTCP
import Foundation

/// `cf-access-tcp login <url>`: log in to an Access application and cache its token.
struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Log in to a Cloudflare Access application and cache its token (like `cloudflared access login`).",
        discussion: """
        Opens a browser (or, without one, prints a URL and QR code for another device), waits for the \
        login, checks the token with the edge and caches it in ~/.cloudflared. The token is printed \
        only with --print or --no-verbose.
        """
    )

    @Argument(help: "The application URL, e.g. https://ssh.example.com")
    var url: String?

    @Option(name: [.customLong("app", withSingleDash: true), .customLong("app")],
            help: ArgumentHelp("The application URL, cloudflared's spelling (-app=URL).", visibility: .hidden))
    var app: String?

    @Flag(name: .customLong("print"), help: "Print the token to stdout.")
    var printToken = false

    @Flag(name: .customLong("no-verbose"), help: "Print only the token to stdout, nothing else.")
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
        if printToken || noVerbose {
            FileHandle.standardOutput.write(Data((token + "\n").utf8))
        }
        if !noVerbose && !quiet {
            writeStderr("cf-access-tcp: logged in to \(origin.host); the token is cached in \(auth.login.tokenDir ?? FileTokenStore.defaultDirectory(environment: ProcessInfo.processInfo.environment))")
        }
    }
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
        FileHandle.standardOutput.write(Data((token + "\n").utf8))
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

/// `cf-access-tcp ssh-config --hostname H`: print an ssh_config block that uses this binary.
struct SSHConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ssh-config",
        abstract: "Print the ~/.ssh/config block for an Access-protected SSH host."
    )

    @Option(name: [.customLong("hostname"), .customShort("T")], help: "The Access-protected SSH hostname.")
    var hostname: String

    @Flag(name: .customLong("short-lived-cert"), help: "Short-lived SSH certificates: not supported yet (refused).")
    var shortLivedCert = false

    func run() throws {
        let origin: OriginURL
        do {
            origin = try OriginURL.parse(hostname)
        } catch {
            throw usageFailure(error.withFlags)
        }
        if shortLivedCert {
            // `access ssh-gen` does not exist yet: a Match exec that fails would make ssh connect
            // without the tunnel, silently.
            throw usageFailure("--short-lived-cert is not supported yet (short-lived SSH certificates are not "
                               + "implemented): leave it out and authenticate with your SSH key or password")
        }
        let binary = Self.quotedForSSHConfig(Self.executablePath())
        writeStderr("Add to your ~/.ssh/config:")
        print(["Host \(origin.host)", "  ProxyCommand \(binary) access ssh --hostname %h"].joined(separator: "\n"))
    }

    /// A path as ssh_config needs it in ProxyCommand (run by /bin/sh): in double quotes when it
    /// holds a space or a shell character, with `"`, `\`, `$` and `` ` `` escaped.
    static func quotedForSSHConfig(_ path: String) -> String {
        let plain = path.unicodeScalars.allSatisfy { scalar in
            scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "/._-+,:@%".unicodeScalars.contains(scalar)
        }
        if plain { return path }
        var quoted = "\""
        for character in path {
            if "\"\\$`".contains(character) { quoted.append("\\") }
            quoted.append(character)
        }
        return quoted + "\""
    }

    /// The absolute path of this executable (symbolic links resolved), else argv[0].
    static func executablePath() -> String {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
        return CommandLine.arguments.first ?? "cf-access-tcp"
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
