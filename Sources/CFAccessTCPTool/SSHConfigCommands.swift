import AccessTransport
import ArgumentParser
import CFAccessTCP
import FoundationEssentials
import Glibc

/// `cf-access-tcp ssh-gen --hostname H`: make or renew the short-lived SSH certificate of an
/// Access host (cloudflared's `access ssh-gen`), for ssh's `Match exec`.
struct SSHGenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ssh-gen",
        abstract: "Make or renew the short-lived SSH certificate of an Access host (like `cloudflared access ssh-gen`).",
        discussion: """
        Keeps an ECDSA P-256 key pair in the token directory (<host>-cf_key, 0600, and .pub beside it; an \\
        existing key is reused) and asks Cloudflare Access to sign it: the certificate goes to \\
        <host>-cf_key-cert.pub. A certificate with more than a minute left is kept as it is. Without a \\
        valid app token, logs in first, as a connection would. Prints nothing on success; \\
        `ssh-config --short-lived-cert` prints the ssh_config block that runs it.
        """
    )

    @Option(name: [.customLong("hostname"), .customShort("T")], help: "The Access-protected SSH hostname.")
    var hostname: String?

    @OptionGroup var auth: AuthFlags

    func run() async throws {
        guard let hostname else {
            throw usageFailure("--hostname is required: the Access application's hostname, e.g. --hostname ssh.example.com")
        }
        let origin: OriginURL
        do {
            origin = try OriginURL.parse(hostname)
        } catch {
            throw usageFailure(error.withFlags)
        }
        let provider = try makeProvider(flags: auth)
        do {
            _ = try await runAuthWork { () async throws(TunnelFailure) -> ShortLivedCertificate in
                try await provider.shortLivedCertificate(for: origin)
            }
        } catch {
            writeStderr("cf-access-tcp: \(error.withFlags)")
            throw ExitStatus(error).code
        }
    }
}

/// `cf-access-tcp ssh-config [--hostname H] [--short-lived-cert]`: print an ssh_config block
/// that uses this binary.
struct SSHConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ssh-config",
        abstract: "Print the ~/.ssh/config block for an Access-protected SSH host.",
        discussion: """
        Without --hostname, prints the template for `[your hostname]`, as cloudflared does. With \\
        --short-lived-cert, a `Match host … exec` block runs `ssh-gen` before each connection and gives ssh \\
        the key and certificate; the ProxyCommand stays in a `Host` block of its own, so a failed ssh-gen \\
        still goes through the tunnel (with the other keys). Flags after `--` are added to both commands \\
        (e.g. `-- --ca-file /etc/corp-ca.pem`).
        """
    )

    @Option(name: [.customLong("hostname"), .customShort("T")], help: "The Access-protected SSH hostname.")
    var hostname: String?

    @Flag(name: .customLong("short-lived-cert"), help: "Use Access short-lived SSH certificates (ssh-gen before each connection).")
    var shortLivedCert = false

    @Option(name: .customLong("token-dir"),
            help: "Token and key directory the commands use (default ~/.cloudflared; env CF_ACCESS_TCP_TOKEN_DIR).")
    var tokenDir: String?

    @Flag(name: .customLong("fedramp"), help: "Put --fedramp in the commands (cloudflared's `access --fedramp`).")
    var fedRAMP = false

    @Argument(parsing: .postTerminator, help: "Flags added to both commands, after --.")
    var extra: [String] = []

    func run() throws {
        var host = "[your hostname]"
        if let hostname {
            do {
                host = try OriginURL.parse(hostname).host
            } catch {
                throw usageFailure(error.withFlags)
            }
        }
        // The flags after -- must be ones both `access ssh` and `access ssh-gen` take.
        do {
            _ = try AuthFlags.parse(extra)
        } catch {
            throw usageFailure("the flags after -- go to both `access ssh` and `access ssh-gen`, so they must be login "
                               + "flags both take (--ca-file, --resolve, --no-browser, …): "
                               + AuthFlags.message(for: error))
        }
        let environment = ProcessInfo.processInfo.environment
        var common: [String] = []
        let directory = try tokenDirectory(environment: environment)
        if let explicit = directory.explicit { common += ["--token-dir", explicit] }
        if fedRAMP { common.append("--fedramp") }
        common += extra
        let binary = Self.executablePath()
        let proxy = SSHConfigText.command([binary, "access", "ssh", "--hostname", "%h"] + common)
        var lines: [String] = []
        if shortLivedCert {
            let gen = SSHConfigText.command([binary, "access", "ssh-gen", "--hostname", "%h"] + common)
            guard !gen.contains("\"") else {
                throw usageFailure("a path or flag holds a double quote, which ssh's Match exec cannot carry: "
                                   + "move the binary or the directory")
            }
            lines += [
                "Match host \(host) exec \"\(gen)\"",
                "  IdentityFile \(SSHConfigText.path(directory.shown + "/%h-cf_key"))",
                "  CertificateFile \(SSHConfigText.path(directory.shown + "/%h-cf_key-cert.pub"))",
            ]
        }
        lines += ["Host \(host)", "  ProxyCommand \(proxy)"]
        writeStderr("Add to your ~/.ssh/config:")
        print(lines.joined(separator: "\n"))
    }

    /// The token directory as ssh_config shows it (`~/.cloudflared` for the default, as
    /// cloudflared prints it) and, when it is not the default, the absolute path for `--token-dir`.
    private func tokenDirectory(environment: [String: String]) throws -> (shown: String, explicit: String?) {
        let chosen = tokenDir ?? environment[FileTokenStore.directoryVariable].flatMap { $0.isEmpty ? nil : $0 }
        guard let chosen else {
            // ssh's `~` is the home of the user database; ours is $HOME when set.
            let ours = FileTokenStore.defaultDirectory(environment: environment)
            if let entry = getpwuid(geteuid()), ours == String(cString: entry.pointee.pw_dir) + "/.cloudflared" {
                return ("~/.cloudflared", nil)
            }
            return (ours, ours)
        }
        let absolute = chosen.hasPrefix("/") ? chosen : FileManager.default.currentDirectoryPath + "/" + chosen
        return (absolute, absolute)
    }

    /// The absolute path of this executable (symbolic links resolved), else argv[0].
    static func executablePath() -> String {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
        return CommandLine.arguments.first ?? "cf-access-tcp"
    }
}

/// Text for ssh_config: commands (run by the shell, after ssh expands `%` tokens) and paths.
enum SSHConfigText {
    /// The words as one shell command for ProxyCommand or Match exec: a word with a shell
    /// character is single-quoted, and a `%` that is not our `%h` becomes `%%` for ssh.
    static func command(_ words: [String]) -> String {
        words.map { word in word == "%h" ? word : shellQuoted(word).replacing("%", with: "%%") }
            .joined(separator: " ")
    }

    /// A path for IdentityFile or CertificateFile: `%` tokens other than `%h` escaped, in
    /// double quotes when it holds white space.
    static func path(_ path: String) -> String {
        let escaped = path.replacing("%", with: "%%").replacing("%%h", with: "%h")
        return escaped.contains(where: { $0 == " " || $0 == "\t" }) ? "\"" + escaped + "\"" : escaped
    }

    /// `word` as the shell reads it back: as it is when it holds only safe characters, else in
    /// single quotes (a `'` inside as `'\''`).
    static func shellQuoted(_ word: String) -> String {
        let safe = !word.isEmpty && word.unicodeScalars.allSatisfy { scalar in
            scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "/._-+,:@%=".unicodeScalars.contains(scalar)
        }
        if safe { return word }
        return "'" + word.replacing("'", with: "'\\''") + "'"
    }
}
