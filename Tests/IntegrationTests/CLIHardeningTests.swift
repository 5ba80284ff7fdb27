import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The command line against hostile files and secret-looking headers (issue 12.4, 12.9).
@Suite("command line hardening", .serialized, .ownThreads)
struct CLIHardeningTests {
    @Test("--logfile naming a symbolic link is refused; the link's target is neither written nor chmodded")
    func logFileSymlinkRefused() throws {
        let dir = try makeTempDir("cfat-logfile")
        defer { try? FileManager.default.removeItem(at: dir) }
        let target = dir.appendingPathComponent("victim")
        try Data("keep\n".utf8).write(to: target)
        #expect(chmod(target.path, 0o644) == 0)
        let link = dir.appendingPathComponent("log")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        for flags in [["--logfile", link.path], ["--log-directory", dir.path]] {
            if flags[0] == "--log-directory" {
                try FileManager.default.createSymbolicLink(at: dir.appendingPathComponent("cf-access-tcp.log"),
                                                           withDestinationURL: target)
            }
            let result = try run(try TestPaths.binary("cf-access-tcp"),
                                 ["--hostname", testHost, "--connect-to", "127.0.0.1:9"] + flags, timeout: 20)
            #expect(result.status == 64, "\(flags): \(result.stderr)")
            #expect(result.stderr.contains("is a symbolic link"), "\(result.stderr)")
            #expect(try String(contentsOf: target, encoding: .utf8) == "keep\n")
            var info = stat()
            #expect(stat(target.path, &info) == 0 && info.st_mode & 0o777 == 0o644)
        }
    }

    @Test("a -H header named like a credential never reaches the log, even at debug level")
    func secretLookingHeaderRedacted() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let secret = "zq-private-api-key-9f8e7d"
        let process = try ManagedProcess(
            try TestPaths.binary("cf-access-tcp"),
            try clientArguments(edge: edge, extra: ["-H", "X-Api-Key: \(secret)", "-H", "X-Trace-Id: visible-trace",
                                                    "--loglevel", "debug"]),
            stdin: .pipe)
        try process.writeStdin(Data("ping".utf8))
        _ = try process.waitForStdout(byteCount: 4, timeout: 30)
        process.closeStdin()
        _ = try process.waitForExit(timeout: 20)
        #expect(!process.stderrText.contains(secret))
        #expect(process.stderrText.contains("X-Api-Key: [redacted]"), "\(process.stderrText)")
        #expect(process.stderrText.contains("X-Trace-Id: visible-trace"))
    }

    @Test("contradicting flags and negative numbers are refused at once with a plain line", arguments: [
        (["--keepalive", "-5"], "--keepalive must be ≥ 0"),
        (["--connect-timeout", "-1"], "--connect-timeout must be ≥ 0"),
        (["--retries", "-2"], "--retries must be ≥ 0"),
        (["--single-connection"], "--single-connection needs --url"),
        (["--max-connections", "3"], "--max-connections needs --url"),
        (["--access-token", "a.b.c", "--service-token-id", "i", "--service-token-secret", "s"], "give one credential"),
        // Ranges checked by the library (AccessTunnel.Options.validate), worded with our flags (13.9).
        (["--connect-timeout", "0"], "--connect-timeout must be between 1 and 600 seconds"),
        (["--connect-timeout", "601"], "--connect-timeout must be between 1 and 600 seconds"),
        (["--keepalive", "86401"], "--keepalive must be between 0 (off) and 86400 seconds"),
        (["--retries", "11"], "--retries must be between 0 and 10"),
        (["--url", "127.0.0.1:0", "--max-connections", "0"], "--max-connections must be at least 1"),
        (["--threads", "2"], "--threads needs --url"),
        (["--url", "127.0.0.1:0", "--threads", "0"], "--threads must be between 1 and 256"),
        (["--url", "127.0.0.1:0", "--threads", "257"], "--threads must be between 1 and 256"),
        (["--spare-lifetime", "5"], "--spare-lifetime needs --url"),
        (["--url", "127.0.0.1:0", "--spare-lifetime", "301"], "--spare-lifetime must be between 0 (no spare) and 300 seconds"),
        (["--url", "127.0.0.1:0", "--spare-lifetime", "-1"], "--spare-lifetime must be between 0 (no spare) and 300 seconds"),
    ])
    func refusedCombinations(_ extra: [String], _ expected: String) throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             ["--hostname", testHost, "--connect-to", "127.0.0.1:9"] + extra, timeout: 20)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    @Test("ssh-config: only the block on stdout, the hint on stderr; a path with a space or a % quoted in ProxyCommand, Match exec and IdentityFile")
    func sshConfig() throws {
        let dir = try makeTempDir("cfat ssh config")
        defer { try? FileManager.default.removeItem(at: dir) }
        let linked = dir.appendingPathComponent("cf-access-tcp")
        #expect(link(try TestPaths.binary("cf-access-tcp").path, linked.path) == 0)
        let result = try run(linked, ["ssh-config", "--hostname", "ssh.example.com"], timeout: 20)
        #expect(result.status == 0)
        #expect(result.stdout == "Host ssh.example.com\n  ProxyCommand '\(linked.path)' access ssh --hostname %h\n",
                "\(result.stdout)")
        #expect(result.stderr.contains("~/.ssh/config"))
        // Issue 17: the short-lived certificate block, with a token directory ssh must not expand.
        let tokens = dir.appendingPathComponent("keys 100%").path
        let short = try run(linked, ["ssh-config", "--hostname", "ssh.example.com", "--short-lived-cert", "--token-dir", tokens,
                                     "--", "--no-browser"], timeout: 20)
        #expect(short.status == 0, "\(short.stderr)")
        let escaped = tokens.replacingOccurrences(of: "%", with: "%%")
        #expect(short.stdout == """
            Match host ssh.example.com exec "'\(linked.path)' access ssh-gen --hostname %h --token-dir '\(escaped)' --no-browser"
              IdentityFile "\(escaped)/%h-cf_key"
              CertificateFile "\(escaped)/%h-cf_key-cert.pub"
            Host ssh.example.com
              ProxyCommand '\(linked.path)' access ssh --hostname %h --token-dir '\(escaped)' --no-browser

            """, "\(short.stdout)")
        // Flags after -- must be ones both commands take.
        let refused = try run(linked, ["ssh-config", "--hostname", "ssh.example.com", "--", "--url", "127.0.0.1:2"], timeout: 20)
        #expect(refused.status == 64)
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("the flags after -- go to both"), "\(refused.stderr)")
    }

    /// The "Max core file size" line of /proc/PID/limits.
    private func coreLimit(of pid: pid_t) -> String {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").first { $0.hasPrefix("Max core file size") }.map(String.init) ?? "?"
    }

    @Test("a tunnel holding a service token secret writes no core dump, unless --allow-core-dumps")
    func noCoreDumps() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let bin = try TestPaths.binary("cf-access-tcp").path
        for allow in [false, true] {
            let arguments = try clientArguments(edge: edge) + (allow ? ["--allow-core-dumps"] : [])
            // The shell raises the soft core limit, then becomes the tool (same pid).
            let line = "ulimit -S -c 4096 && exec " + ([bin] + arguments).map { "'\($0)'" }.joined(separator: " ")
            let process = try ManagedProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", line], stdin: .pipe)
            try process.writeStdin(Data("ping".utf8))
            _ = try process.waitForStdout(byteCount: 4, timeout: 30)
            let limit = coreLimit(of: process.pid)
            let fields = limit.split(separator: " ", omittingEmptySubsequences: true)
            #expect(fields.count >= 6, "\(limit)")
            if allow {
                #expect(fields.count >= 5 && fields[4] != "0", "\(limit)")
            } else {
                #expect(fields.count >= 6 && fields[4] == "0" && fields[5] == "0", "\(limit)")
            }
            process.closeStdin()
            _ = try process.waitForExit(timeout: 20)
        }
    }

    /// A listening socket that never accepts: TCP connects (the kernel's backlog), TLS never starts.
    private func silentListener() throws -> (fd: Int32, port: Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        #expect(bound == 0 && listen(fd, 8) == 0)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test("a dial that takes longer than a second says 'Connecting to H…' on stderr; a quick one does not", arguments: [false, true])
    func slowDialNotice(listenerMode: Bool) throws {
        let (fd, port) = try silentListener()
        defer { close(fd) }
        var arguments = ["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)", "--ca-file", try certs().caFile.path,
                         "--service-token-id", "i", "--service-token-secret", "s", "--connect-timeout", "4"]
        // --fail-fast: a listener would otherwise listen all the same once the dial timed out (issue 26.1).
        if listenerMode { arguments += ["--url", "127.0.0.1:0", "--fail-fast"] }
        let slow = try run(try TestPaths.binary("cf-access-tcp"), arguments, timeout: 30)
        #expect(slow.status == 69, "\(slow.stderr)")
        #expect(slow.stderr.contains("Connecting to \(testHost)…"), "\(slow.stderr)")
        #expect(slow.stderr.contains("Connection timed out."), "\(slow.stderr)")
        // --loglevel warn silences it (it is an info line).
        let quiet = try run(try TestPaths.binary("cf-access-tcp"), arguments + ["--loglevel", "warn"], timeout: 30)
        #expect(!quiet.stderr.contains("Connecting to"), "\(quiet.stderr)")
        // A refused port fails at once: no notice.
        let refusedPort = try freeLoopbackPort()
        let quick = try run(try TestPaths.binary("cf-access-tcp"),
                            ["--hostname", testHost, "--connect-to", "127.0.0.1:\(refusedPort)", "--service-token-id", "i",
                             "--service-token-secret", "s"], timeout: 30)
        #expect(!quick.stderr.contains("Connecting to"), "\(quick.stderr)")
    }

    @Test("the command line adds the flags to the library's plain words (11.14)")
    func flagHints() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let wrong = try run(try TestPaths.binary("cf-access-tcp"),
                            try clientArguments(edge: edge, token: (testTokenID, "not-the-secret")), timeout: 30)
        #expect(wrong.status == 77)
        #expect(wrong.stderr.contains("check the service token's client ID and secret (--service-token-id, --service-token-secret)"),
                "\(wrong.stderr)")
        let untrusted = try run(try TestPaths.binary("cf-access-tcp"),
                                ["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)", "--id", testTokenID,
                                 "--secret", testTokenSecret], timeout: 30)
        #expect(untrusted.stderr.contains("Check the system clock and the CA certificates (--ca-file)"), "\(untrusted.stderr)")
    }

    @Test("a usage error touches no log file: flags are checked before logging is set up (12.4)")
    func usageErrorLeavesNoLogFile() throws {
        let dir = try makeTempDir("cfat-usage-log")
        defer { try? FileManager.default.removeItem(at: dir) }
        let log = dir.appendingPathComponent("client.log")
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             ["--hostname", testHost, "--keepalive", "-5", "--logfile", log.path], timeout: 20)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: log.path), "the log file was created on a usage error")
    }
}

