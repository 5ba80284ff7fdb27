import AccessTestSupport
import AccessTransport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 3 end to end: `cf-access-tcp` with no credential logs in through the emulator (app
/// discovery, JWKS, the transfer flow, the org-token exchange), caches tokens where cloudflared
/// keeps them, shares one login between processes and connections, and heals after a revocation.
@Suite("login end to end", .serialized, .ownThreads)
struct LoginEndToEndTests {
    @Test("ssh with no credential logs in once, the next ssh uses the cache, a revoked token heals")
    func sshLogsInOnceThenUsesTheCache() throws {
        let sshd = try SSHDFixture()
        let world = try LoginWorld(target: "127.0.0.1:\(sshd.port)")
        let bin = try TestPaths.binary("cf-access-tcp").path
        let proxy = ([bin, "--hostname", "%h"] + world.commonArguments).joined(separator: " ")
        let environment = try world.browserEnvironment()

        let first = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost,
                                    command: "echo first-ok", environment: environment)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("first-ok"))
        #expect(world.browserOpens.count == 1)
        #expect(world.browserOpens.first?.hasPrefix("https://\(testHost)/cdn-cgi/access/cli?") == true)
        #expect(try world.counter("loginsCompleted") == 1)
        // Both tokens where cloudflared reads them, 0600 in a 0700 directory.
        #expect(world.tokenFileNames == [world.orgTokenFile.lastPathComponent, world.appTokenFile.lastPathComponent].sorted())
        #expect(fileMode(world.appTokenFile) == 0o600)
        #expect(fileMode(world.orgTokenFile) == 0o600)
        #expect(fileMode(world.tokenDir) == 0o700)
        let firstToken = try String(contentsOf: world.appTokenFile, encoding: .utf8)

        let second = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost,
                                     command: "echo second-ok", environment: environment)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains("second-ok"))
        #expect(world.browserOpens.count == 1, "the cached token must be used without a login")
        #expect(try world.counter("transferPolls") > 0)
        #expect(try String(contentsOf: world.appTokenFile, encoding: .utf8) == firstToken)

        // Revoked: the edge redirects, the client deletes the app token and gets a new one once
        // (through the org token, so without a browser).
        #expect(try world.admin("revoke").hasPrefix("revoked"))
        let third = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost,
                                    command: "echo third-ok", environment: environment)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(third.stdout.contains("third-ok"))
        #expect(try world.counter("orgExchanges") == 1)
        #expect(world.browserOpens.count == 1)
        #expect(try String(contentsOf: world.appTokenFile, encoding: .utf8) != firstToken)
        #expect(!first.stderr.contains(firstToken) && !second.stderr.contains(firstToken))
    }

    @Test("device mode prints the URL and a QR code of it, and finishes when the login is completed elsewhere")
    func deviceModeWithQRCode() throws {
        let zbarimg = which("zbarimg")
        try requireRealPart(zbarimg != nil, "zbarimg (package zbar-tools)")
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address, edgeArguments: ["--login-mode", "manual"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         world.tunnelArguments + ["--no-browser"],
                                         environment: try world.browserEnvironment(), stdin: .pipe)
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Waiting for login", timeout: 30)
        let stderr = process.stderrText
        let lines = stderr.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let url = try #require(lines.map { $0.trimmingCharacters(in: .whitespaces) }
            .first { $0.hasPrefix("https://\(testHost)/cdn-cgi/access/cli?") })
        let qrLines = lines.filter { $0.contains("█") || $0.contains("▀") || $0.contains("▄") }
        #expect(qrLines.count > 10)
        #expect(try decodeHalfBlockQR(qrLines.map { String($0.dropFirst(2)) }, zbarimg: zbarimg!) == url)
        #expect(world.browserOpens.isEmpty, "--no-browser must not start a browser")

        // The phone finishes the login: the emulator's admin call with the key from the URL.
        let key = try #require(URLComponents(string: url)?.percentEncodedQueryItems?.first { $0.name == "token" }?.value)
        #expect(try world.admin("complete?token=\(key)").contains("completed"))
        try process.writeStdin(Data("after-device-login".utf8))
        let echoed = try process.waitForStdout(byteCount: 18, timeout: 30)
        #expect(echoed == Data("after-device-login".utf8))
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 20) == 0)
        #expect(FileManager.default.fileExists(atPath: world.appTokenFile.path))
    }

    @Test("two processes started together without a token: one login, both connect")
    func twoProcessesOneLogin() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        // A slow browser, so that the second process finds the first one's lock.
        let environment = try world.browserEnvironment(extra: ["CF_ACCESS_TEST_BROWSER_DELAY": "2"])
        let results = LockedBox<[Result<ManagedProcess, Error>]>([])
        let group = DispatchGroup()
        for name in ["first", "second"] {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                let result = Result { try echoThroughStdio(arguments: world.tunnelArguments, environment: environment,
                                                           payload: "hello-\(name)", timeout: 90) }
                results.withLock { $0.append(result) }
            }
        }
        group.wait()
        for result in results.withLock({ $0 }) {
            if case .failure(let error) = result { Issue.record("a process failed: \(error)") }
        }
        #expect(world.browserOpens.count == 1)
        #expect(try world.counter("loginsCompleted") == 1)
        #expect(world.loginLeftovers.isEmpty)
    }

    @Test("a cached token goes with the first dial: the next run makes no discovery request (issue 17.7)")
    func cachedTokenNeedsNoDiscovery() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(), payload: "first")
        // The first run dialled without a credential, met the login redirect, then looked up.
        #expect(try world.counter("metadataRequests") == 1)
        let rejected = try world.counter("upgradesRejected")
        #expect(rejected == 1)
        try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(), payload: "second")
        #expect(try world.counter("metadataRequests") == 1)
        #expect(try world.counter("upgradesRejected") == rejected)
        #expect(world.browserOpens.count == 1)
    }

    @Test("a stale lock left by a dead process is reclaimed")
    func staleLockIsReclaimed() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        let dead = try ManagedProcess(URL(fileURLWithPath: "/bin/true"), [])
        _ = try dead.waitForExit(timeout: 10)
        let lock = URL(fileURLWithPath: world.appTokenFile.path + ".lock")
        try world.writeTokenFile(lock, "{\"pid\":\(dead.pid),\"start_time\":\(Int64(Date().timeIntervalSince1970 * 1000))}")
        let process = try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(),
                                           payload: "after-stale-lock")
        #expect(world.browserOpens.count == 1)
        #expect(!FileManager.default.fileExists(atPath: lock.path))
        #expect(process.stderrText.contains("stale"), "\(process.stderrText)")
    }

    @Test("a token file written under cloudflared's name is used as is")
    func cloudflaredTokenFileIsUsed() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        // Named by PROTOCOL.md §3's rule: <app hostname>-<AUD>-token in the token directory.
        let token = try world.admin("issue?kind=app")
        try world.writeTokenFile(world.appTokenFile, token)
        try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(),
                             payload: "cached")
        #expect(world.browserOpens.isEmpty)
        // Found by its name alone and sent with the first dial: no discovery request (issue 17.7).
        #expect(try world.counter("metadataRequests") == 0)
        #expect(try String(contentsOf: world.appTokenFile, encoding: .utf8) == token)
    }

    @Test("a bad cache file is replaced by a fresh login, with an info line", arguments: CacheFault.allCases)
    func badCacheFile(fault: CacheFault) throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        let content: String
        switch fault {
        case .malformed: content = "not a JWT at all"
        case .expired: content = try world.admin("issue?kind=app&ttl=-60")
        case .foreign: content = try world.admin("issue?kind=app&aud=someone-elses-app")
        case .worldReadable: content = try world.admin("issue?kind=app")
        }
        try world.writeTokenFile(world.appTokenFile, content, mode: fault == .worldReadable ? 0o644 : 0o600)
        let process = try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(),
                                           payload: "healed")
        #expect(world.browserOpens.count == 1, "\(process.stderrText)")
        let fresh = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        #expect(fresh != content)
        #expect(fileMode(world.appTokenFile) == 0o600)
        #expect(process.stderrText.contains(fault.expectedLine), "\(process.stderrText)")
        #expect(!process.stderrText.contains(fresh))
    }

    enum CacheFault: String, CaseIterable, Sendable {
        case malformed, expired, foreign, worldReadable
        var expectedLine: String {
            switch self {
            case .malformed, .expired, .foreign: return "deleting"
            case .worldReadable: return "readable or writable by group or others"
            }
        }
    }

    @Test("listener mode: an expired token is replaced for the next connection, a revoked one redialled once")
    func listenerRefreshesTokens() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address, edgeArguments: ["--token-ttl", "3"])
        let listener = try ListenerProcess(arguments: world.tunnelArguments, environment: try world.browserEnvironment())
        defer { listener.stop() }
        #expect(world.browserOpens.count == 1)

        @Sendable func roundTrip(_ text: String) throws {
            let client = try ClientSocket(port: listener.port)
            try client.send(Array(text.utf8))
            var got: [UInt8] = []
            while got.count < text.utf8.count {
                let n = try client.receive(count: text.utf8.count - got.count) { got += $0 }
                if n == 0 { break }
            }
            #expect(got == Array(text.utf8), "\(listener.process.stderrText)")
        }
        try roundTrip("one")
        let firstToken = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        // Let the 3 s token expire: the next connections get a new one (one org-token exchange
        // for all of them, never one per connection).
        Thread.sleep(forTimeInterval: 4.5)
        let group = DispatchGroup()
        let failures = LockedBox<[Error]>([])
        for index in 0..<4 {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                do { try roundTrip("two-\(index)") } catch { failures.withLock { $0.append(error) } }
            }
        }
        group.wait()
        #expect(failures.withLock { $0.isEmpty }, "\(failures.withLock { $0 })")
        #expect(try world.counter("orgExchanges") == 1)
        let secondToken = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        #expect(secondToken != firstToken)

        // Revoked under a running listener: the connection is refused once, then redialled with a
        // fresh token on the same local socket: the client sees nothing of it.
        try world.admin("revoke")
        let rejectedBefore = try world.counter("upgradesRejected")
        try roundTrip("three")
        #expect(try world.counter("upgradesRejected") == rejectedBefore + 1)
        #expect(try world.counter("orgExchanges") == 2)
        #expect(world.browserOpens.count == 1)
    }

    @Test("Ctrl-C while waiting for the login exits at once and leaves no lock behind")
    func interruptDuringLogin() throws {
        let world = try LoginWorld(target: "127.0.0.1:9", edgeArguments: ["--login-mode", "manual"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), world.tunnelArguments,
                                         environment: try world.browserEnvironment(), stdin: .pipe)
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Waiting for login", timeout: 30)
        let lock = world.appTokenFile.path + ".lock"
        #expect(FileManager.default.fileExists(atPath: lock))
        process.send(signal: SIGINT)
        #expect(try process.waitForExit(timeout: 10) == 130)
        #expect(process.stderrText.contains("cf-access-tcp: login cancelled"))
        #expect(world.loginLeftovers.isEmpty, "\(world.loginLeftovers)")
        #expect(world.tokenFileNames.isEmpty)
    }

    @Test("login checks the token with the edge and prints it as cloudflared does, token prints it, logout removes it")
    func loginTokenLogout() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        let bin = try TestPaths.binary("cf-access-tcp")
        let environment = try world.browserEnvironment()
        let login = try run(bin, ["login", "https://\(testHost)"] + world.commonArguments, env: environment, timeout: 60)
        #expect(login.status == 0, "\(login.stderr)")
        #expect(try world.counter("tokenChecks") == 1)
        let saved = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        // As cloudflared: the token on stdout for scripts, never on stderr (issue 17.1).
        #expect(login.stdout == "Successfully fetched your token:\n\n\(saved)\n\n", "\(login.stdout)")
        #expect(!login.stderr.contains(saved))

        let token = try run(bin, ["token", "https://\(testHost)"] + world.cacheArguments, env: environment, timeout: 30)
        #expect(token.status == 0, "\(token.stderr)")
        #expect(token.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == saved)

        let logout = try run(bin, ["logout", "https://\(testHost)"] + world.cacheArguments, env: environment, timeout: 30)
        #expect(logout.status == 0, "\(logout.stderr)")
        #expect(!FileManager.default.fileExists(atPath: world.appTokenFile.path))
        // The org token stays, and logout says so (issue 11.12); --org removes it as well.
        #expect(FileManager.default.fileExists(atPath: world.orgTokenFile.path))
        #expect(logout.stderr.contains("kept the org token \(world.orgTokenFile.path)"), "\(logout.stderr)")
        let orgLogout = try run(bin, ["logout", "--org", "https://\(testHost)"] + world.cacheArguments,
                                env: environment, timeout: 30)
        #expect(orgLogout.status == 0, "\(orgLogout.stderr)")
        #expect(!FileManager.default.fileExists(atPath: world.orgTokenFile.path))
        #expect(orgLogout.stderr.contains("removed \(world.orgTokenFile.path)"), "\(orgLogout.stderr)")
        let after = try run(bin, ["token", "https://\(testHost)"] + world.cacheArguments, env: environment, timeout: 30)
        #expect(after.status != 0)
        #expect(after.stderr.hasPrefix("cf-access-tcp: "))
        #expect(world.browserOpens.count == 1)
    }
}

/// Every bad answer of the login protocol ends the client with one plain line, quickly, and
/// leaves no token file behind.
@Suite("login faults end to end", .serialized, .ownThreads)
struct LoginFaultTests {
    @Test("bad application metadata", arguments: [
        ("missing", "No Access application at https://\(testHost)/"),
        ("bad-signature", "its signature does not match"),
        ("unknown-kid", "signed with an unknown key"),
        ("wrong-type", "its type is \"nomatch\""),
        ("wrong-hostname", "it is for host \"wrong-\(testHost)\""),
        ("wrong-aud-empty", "names no application audience"),
        ("stale-iat", "issued more than 24 hours ago"),
        ("future-iat", "issued more than 5 minutes in the future"),
        ("foreign-auth-domain", "is not a *.cloudflareaccess.com domain"),
        ("bad-base64", "is not a JWT"),
    ])
    func badMetadata(mode: String, expected: String) throws {
        let world = try LoginWorld(target: "127.0.0.1:9", edgeArguments: ["--metadata-mode", mode])
        // "missing": no Access application, so the tunnel dials without a credential (issue
        // 11.1); the edge's login redirect then ends it with the same plain line.
        let result = try run(try TestPaths.binary("cf-access-tcp"), world.tunnelArguments,
                             env: try world.browserEnvironment(), timeout: 30)
        #expect(result.status != 0)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 1, "\(result.stderr)")
        #expect(lines.last?.hasPrefix("cf-access-tcp: ") == true)
        #expect(result.stderr.contains(expected), "\(result.stderr)")
        #expect(world.browserOpens.isEmpty)
        #expect(world.tokenFileNames.isEmpty)
    }

    @Test("bad transfer answers", arguments: [
        ("error500", "The Cloudflare login service failed (HTTP 500)"),
        ("never", "was not completed within"),
        ("wrong-key", "does not open with our key"),
        ("truncated", "shorter than a nonce and an authenticator"),
        ("bad-base64", "base64"),
    ])
    func badTransfer(mode: String, expected: String) throws {
        // Polls are held 1 s each (as Cloudflare holds them, shorter), so "never" ends in ~3 s.
        let world = try LoginWorld(target: "127.0.0.1:9", edgeArguments: ["--transfer-mode", mode, "--transfer-hold", "1"])
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             world.tunnelArguments + ["--transfer-polls", "3"],
                             env: try world.browserEnvironment(), timeout: 60)
        #expect(result.status != 0)
        let last = result.stderr.split(separator: "\n").map(String.init).last ?? ""
        #expect(last.hasPrefix("cf-access-tcp: "), "\(result.stderr)")
        #expect(last.contains(expected), "\(result.stderr)")
        #expect(world.browserOpens.count == 1)
        #expect(world.tokenFileNames.isEmpty)
        #expect(world.loginLeftovers.isEmpty)
    }

    @Test("a signing key rotated since the key set was cached is fetched again")
    func rotatedKeyIsFetched() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(), payload: "before")
        _ = try world.admin("rotate-key")
        // Without the app token the next run looks the application up (its metadata now signed
        // with the new key) and gets a token through the org token, without a browser.
        try FileManager.default.removeItem(at: world.appTokenFile)
        try echoThroughStdio(arguments: world.tunnelArguments, environment: try world.browserEnvironment(), payload: "after")
        #expect(try world.counter("jwksRequests") == 2)
        #expect(world.browserOpens.count == 1)
    }
}

/// Decodes a QR code printed in half blocks with zbarimg.
func decodeHalfBlockQR(_ lines: [String], zbarimg: String) throws -> String {
    let pbm = pbmImage(fromHalfBlocks: lines)
    let directory = try makeTempDir("cfat-qr")
    defer { try? FileManager.default.removeItem(at: directory) }
    let file = directory.appendingPathComponent("code.pbm")
    try pbm.write(to: file, atomically: true, encoding: .ascii)
    let result = try run(URL(fileURLWithPath: zbarimg), ["--raw", "-q", file.path], timeout: 30)
    return result.stdout.trimmingCharacters(in: .newlines)
}
