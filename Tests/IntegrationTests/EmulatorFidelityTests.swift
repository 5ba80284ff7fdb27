import Foundation
import Testing

/// The emulator behaves as Cloudflare's service does where clients depend on it (issue 11.8,
/// 11.9), and our client copes with that behaviour.
@Suite("emulator fidelity", .serialized, .ownThreads)
struct EmulatorFidelityTests {
    @Test("a transfer poll for an unfinished login is held, and the login completed meanwhile is delivered on it")
    func heldTransferPoll() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address, edgeArguments: ["--login-mode", "manual", "--transfer-hold", "30"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), world.tunnelArguments + ["--no-browser"],
                                         environment: try world.browserEnvironment(), stdin: .pipe)
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Waiting for login", timeout: 30)
        let url = try #require(process.stderrText.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .first { $0.hasPrefix("https://\(testHost)/cdn-cgi/access/cli?") })
        // Let the first poll arrive and be held (the client polls every 0.2 s after a "not yet").
        let deadline = Date(timeIntervalSinceNow: 30)
        while try world.counter("transferPolls") < 1, Date() < deadline { usleep(100_000) }
        usleep(1_500_000)
        #expect(try world.counter("transferPolls") == 1, "the first poll was answered at once instead of held")
        let key = try #require(URLComponents(string: url)?.percentEncodedQueryItems?.first { $0.name == "token" }?.value)
        #expect(try world.admin("complete?token=\(key)").contains("completed"))
        try process.writeStdin(Data("held-poll".utf8))
        #expect(try process.waitForStdout(byteCount: 9, timeout: 30) == Data("held-poll".utf8))
        // The held poll carried the tokens: no second poll was needed.
        #expect(try world.counter("transferPolls") == 1)
        #expect(try world.counter("transfersDelivered") == 1)
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 20) == 0)
    }

    @Test("the org-token exchange works in Cloudflare's layout (CF_AppSession from the app, CF_Authorization with Expires) and the older one",
          arguments: ["app", "team"])
    func orgTokenExchangeLayouts(layout: String) throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address, edgeArguments: ["--app-session-layout", layout])
        let bin = try TestPaths.binary("cf-access-tcp")
        let environment = try world.browserEnvironment()
        let login = try run(bin, ["login", "https://\(testHost)"] + world.commonArguments, env: environment, timeout: 60)
        #expect(login.status == 0, "\(login.stderr)")
        #expect(world.browserOpens.count == 1)
        // Without the app token, the next tunnel gets one through the org token: no browser.
        try FileManager.default.removeItem(at: world.appTokenFile)
        let process = try ManagedProcess(bin, world.tunnelArguments, environment: environment, stdin: .pipe)
        defer { process.terminate() }
        try process.writeStdin(Data("org-exchange".utf8))
        #expect(try process.waitForStdout(byteCount: 12, timeout: 30) == Data("org-exchange".utf8), "\(process.stderrText)")
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 20) == 0, "\(process.stderrText)")
        #expect(try world.counter("orgExchanges") == 1)
        #expect(world.browserOpens.count == 1)
        #expect(FileManager.default.fileExists(atPath: world.appTokenFile.path))
    }

    @Test("with the app layout, /cdn-cgi/access/authorized refuses a session the app did not set")
    func authorizedNeedsTheAppsSession() throws {
        let world = try LoginWorld(target: "127.0.0.1:9")
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let arguments = ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                         "--cookie", "CF_AppSession=made-up"] + world.edge.curlArguments(host: testHost)
            + ["https://\(testHost):443/cdn-cgi/access/authorized?code=made-up"]
        let result = try run(URL(fileURLWithPath: curl!), arguments, timeout: 20)
        #expect(result.stdout == "403", "\(result.stdout) \(result.stderr)")
    }

    @Test("issue 17: each name has its own address and certificate; the wrong address, SNI or Host fails, and so does a client that resolves a name wrongly")
    func separateHosts() throws {
        let world = try LoginWorld(target: "127.0.0.1:9")
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let ca = world.edge.certs.caFile.path
        let appAddress = world.siteAddresses[testHost]!
        func fetch(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
            try run(URL(fileURLWithPath: curl!), ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                                                  "--noproxy", "*", "--cacert", ca] + arguments, timeout: 30)
        }
        // Right name, right address: the team domain's key set.
        let right = try fetch(["--resolve", "\(loginTeamDomain):443:\(world.siteAddresses[loginTeamDomain]!)",
                               "https://\(loginTeamDomain)/cdn-cgi/access/certs"])
        #expect(right.stdout == "200", "\(right.stderr)")
        // The team domain sent to the app host's address: that certificate names the app host only.
        let wrongAddress = try fetch(["--resolve", "\(loginTeamDomain):443:\(appAddress)",
                                      "https://\(loginTeamDomain)/cdn-cgi/access/certs"])
        #expect(wrongAddress.status == 60, "curl should refuse the certificate: \(wrongAddress.stderr)")
        // Right SNI and certificate, another Host: 421 Misdirected Request.
        let misdirected = try fetch(["--resolve", "\(testHost):443:\(appAddress)", "-H", "Host: \(loginTeamDomain)",
                                     "https://\(testHost)/cdn-cgi/access/certs"])
        #expect(misdirected.stdout == "421", "\(misdirected.stdout) \(misdirected.stderr)")
        // A client that sends the team domain to the app host's address cannot log in.
        let wrongResolve = ["--resolve", "\(testHost):443:\(appAddress)", "--resolve", "\(loginTeamDomain):443:\(appAddress)",
                            "--resolve", "\(loginTransferHost):443:\(world.siteAddresses[loginTransferHost]!)"]
        let login = try run(try TestPaths.binary("cf-access-tcp"),
                            ["login", "https://\(testHost)", "--ca-file", ca, "--token-dir", world.tokenDir.path] + wrongResolve,
                            env: try world.browserEnvironment(), timeout: 60)
        #expect(login.status != 0)
        #expect(login.stderr.contains(loginTeamDomain), "\(login.stderr)")
        #expect(world.browserOpens.isEmpty)
    }

    @Test("issue 17: a bastion honours Cf-Access-Jump-Destination from its allow-list; a dropped --destination, or another one, gets 502")
    func jumpDestination() throws {
        let echo = try TargetFixture(.echo)
        let other = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), serviceTokens: [(testTokenID, testTokenSecret)],
                                   extraArguments: ["--allow-destination", echo.address])
        try echoThroughStdio(arguments: try clientArguments(edge: edge, extra: ["--destination", echo.address]),
                             environment: [:], payload: "bastion")
        try echoThroughStdio(arguments: try clientArguments(edge: edge), environment: ["TUNNEL_SERVICE_DESTINATION": "tcp://\(echo.address)"],
                             payload: "bastion-env")
        let bin = try TestPaths.binary("cf-access-tcp")
        for extra in [[], ["--destination", other.address]] {
            let refused = try run(bin, try clientArguments(edge: edge, extra: extra), stdin: Data("x".utf8), timeout: 30)
            #expect(refused.status == 69, "\(extra): \(refused.stderr)")
            #expect(refused.stderr.contains("502"), "\(extra): \(refused.stderr)")
        }
    }

    @Test("cert_sign takes the public key as cloudflared sends it, newline and all, and signs it for the email's user name")
    func certSignAsCloudflaredSendsIt() throws {
        let world = try LoginWorld(target: "127.0.0.1:9", edgeArguments: ["--login-email", "cfat-key@example.test"])
        let token = try world.admin("issue?kind=app")
        let scratch = try makeTempDir("cfat-certsign")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let key = scratch.appendingPathComponent("key")
        #expect(try run("ssh-keygen", ["-q", "-t", "ecdsa", "-b", "256", "-N", "", "-f", key.path], timeout: 30).status == 0)
        let publicKey = try String(contentsOf: key.appendingPathExtension("pub"), encoding: .utf8)   // ends with "\n"
        let body = try JSONSerialization.data(withJSONObject: [
            "public_key": publicKey, "jwt": token, "issuer": "https://\(loginTeamDomain)",
        ])
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let result = try run(URL(fileURLWithPath: curl!), [
            "-sS", "--max-time", "30", "--noproxy", "*", "--cacert", world.edge.certs.caFile.path,
            "--resolve", "\(loginTeamDomain):443:\(world.siteAddresses[loginTeamDomain]!)",
            "-H", "Content-Type: application/json", "--data-binary", "@-",
            "https://\(loginTeamDomain)/cdn-cgi/access/cert_sign",
        ], stdin: body, timeout: 60)
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any],
                                  "\(result.stdout) \(result.stderr)")
        let certificate = try #require(answer["certificate"] as? String, "\(answer)")
        let certificateFile = scratch.appendingPathComponent("key-cert.pub")
        try certificate.write(to: certificateFile, atomically: true, encoding: .utf8)
        let listing = try run("ssh-keygen", ["-L", "-f", certificateFile.path], timeout: 30)
        #expect(listing.stdout.contains("user certificate") && listing.stdout.contains("cfat-key"), "\(listing.stdout)")
        #expect(answer["expires_at"] is String && answer["id"] is String)
    }
}
