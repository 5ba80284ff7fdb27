import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What scripts and habits of cloudflared users rely on (issue 17, "What scripts and habits rely on").
@Suite("cloudflared habits", .serialized, .ownThreads)
struct HabitsTests {
    @Test("17.6: a repeated -H name sends every value, in order, each on its own line")
    func repeatedHeaderSendsEveryValue() throws {
        let edge = try HostileEdge(mode: "pong-echo", extra: ["--log-header", "X-Env", "--log-header", "X-Other"])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try edge.clientArguments(extra: ["-H", "X-Env: first", "-H", "X-Other: o",
                                                                          "-H", "x-env: second", "-H", "X-ENV: third"]),
                                         stdin: .pipe)
        defer { process.terminate() }
        try edge.waitForEvent { $0.hasPrefix("header X-ENV") }
        #expect(edge.events.filter { $0.hasPrefix("header ") }
                    == ["header X-Env: first", "header X-Other: o", "header x-env: second", "header X-ENV: third"],
                "\(edge.events)")
    }

    @Test("17.5: a --log-directory that does not exist is made, 0700, and the log lands in it")
    func logDirectoryIsCreated() throws {
        let scratch = try makeTempDir("cfat-logdir")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let directory = scratch.appendingPathComponent("new/logs")
        let port = try freeLoopbackPort()
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             ["--hostname", testHost, "--connect-to", "127.0.0.1:\(port)", "--service-token-id", "i",
                              "--service-token-secret", "s", "--log-directory", directory.path], timeout: 30)
        #expect(result.status == 69, "\(result.stderr)")
        #expect(fileMode(directory) == 0o700)
        #expect(fileMode(scratch.appendingPathComponent("new")) == 0o700)
        let log = try String(contentsOf: directory.appendingPathComponent("cf-access-tcp.log"), encoding: .utf8)
        #expect(log.contains("Connection refused by 127.0.0.1:\(port)"), "\(log)")
    }

    @Test("17.4: the listen address may be the positional argument, and `access --fedramp tcp …` is accepted")
    func positionalListenerAndFedRAMP() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let port = try freeLoopbackPort()
        let bin = try TestPaths.binary("cf-access-tcp")
        let process = try ManagedProcess(bin, ["access", "--fedramp", "tcp"] + (try clientArguments(edge: edge)) + ["127.0.0.1:\(port)"])
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "listening on 127.0.0.1:\(port)", timeout: 30)
        let client = try ClientSocket(port: port)
        try client.send(Array("positional".utf8))
        var received: [UInt8] = []
        _ = try client.receive(count: 10) { received += $0 }
        #expect(received == Array("positional".utf8))

        let both = try run(bin, ["--hostname", testHost, "--url", "127.0.0.1:1", "127.0.0.1:2"], timeout: 30)
        #expect(both.status == 64)
        #expect(both.stderr.contains("two listen addresses were given"), "\(both.stderr)")
    }

    @Test("17.3: SSL_CERT_FILE and SSL_CERT_DIR are trusted for the WebSocket as OpenSSL trusts them; --ca-file wins")
    func certificateVariablesForTheWebSocket() throws {
        let echo = try TargetFixture(.echo)
        let certs = try certs()
        let edge = try EdgeFixture(certs: certs, target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let arguments = ["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)",
                         "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret]
        // Without them (and without --ca-file) the test CA is unknown: the proof that they did it.
        let unknown = try run(try TestPaths.binary("cf-access-tcp"), arguments, stdin: Data("x".utf8), timeout: 30)
        #expect(unknown.status == 69, "\(unknown.stderr)")
        #expect(unknown.stderr.contains("certificate"), "\(unknown.stderr)")

        try echoThroughStdio(arguments: arguments, environment: ["SSL_CERT_FILE": certs.caFile.path], payload: "cert-file")
        let hashed = try makeTempDir("cfat-certdir")
        defer { try? FileManager.default.removeItem(at: hashed) }
        let hash = try run("openssl", ["x509", "-hash", "-noout", "-in", certs.caFile.path], timeout: 30)
        try FileManager.default.copyItem(at: certs.caFile,
                                         to: hashed.appendingPathComponent(hash.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + ".0"))
        try echoThroughStdio(arguments: arguments, environment: ["SSL_CERT_DIR": "/nonexistent:" + hashed.path], payload: "cert-dir")

        // --ca-file names another CA: it wins over SSL_CERT_FILE, so the edge is not trusted.
        let other = try EdgeFixture.makeCerts(hosts: ["other.cfat.test"])
        let pinned = try run(try TestPaths.binary("cf-access-tcp"), arguments + ["--ca-file", other.caFile.path],
                             env: ["SSL_CERT_FILE": certs.caFile.path], stdin: Data("x".utf8), timeout: 30)
        #expect(pinned.status == 69, "--ca-file did not win: \(pinned.stderr)")
    }
}

/// Issue 17.1: `login` output for scripts, as cloudflared prints it.
@Suite("login output for scripts", .serialized, .ownThreads)
struct LoginOutputTests {
    @Test("--no-verbose and -app=URL print the bare token; -q prints nothing; --auto-close asks the page to close itself")
    func scriptOutput() throws {
        let world = try LoginWorld(target: "127.0.0.1:9")
        let bin = try TestPaths.binary("cf-access-tcp")
        let environment = try world.browserEnvironment()
        let app = "https://\(testHost)"

        let bare = try run(bin, ["access", "login", "--no-verbose", "--auto-close", app] + world.commonArguments,
                           env: environment, timeout: 60)
        #expect(bare.status == 0, "\(bare.stderr)")
        let saved = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        #expect(bare.stdout == saved, "the bare token, as cloudflared prints it: \(bare.stdout)")
        #expect(!bare.stderr.contains(saved))
        #expect(world.browserOpens.count == 1)
        #expect(world.browserOpens.first?.contains("close_interstitial=true") == true, "\(world.browserOpens)")

        let appSpelling = try run(bin, ["access", "login", "-app=\(app)"] + world.commonArguments, env: environment, timeout: 60)
        #expect(appSpelling.status == 0, "\(appSpelling.stderr)")
        #expect(appSpelling.stdout == saved, "\(appSpelling.stdout)")

        let quiet = try run(bin, ["access", "login", "-q", app] + world.commonArguments, env: environment, timeout: 60)
        #expect(quiet.status == 0, "\(quiet.stderr)")
        #expect(quiet.stdout.isEmpty, "\(quiet.stdout)")
        // The cached token was good: one browser login in all.
        #expect(world.browserOpens.count == 1)
    }
}

/// Issue 17.3 for the login requests, and 17.2 (`access curl`), against the login world.
@Suite("login requests and access curl", .serialized, .ownThreads)
struct LoginRequestHabitsTests {
    @Test("17.3: the login's HTTPS requests trust SSL_CERT_FILE when no --ca-file is given")
    func certificateFileForLogin() throws {
        let echo = try TargetFixture(.echo)
        let world = try LoginWorld(target: echo.address)
        let bin = try TestPaths.binary("cf-access-tcp")
        var arguments = world.commonArguments
        if let index = arguments.firstIndex(of: "--ca-file") { arguments.removeSubrange(index...(index + 1)) }
        let untrusted = try run(bin, ["login", "https://\(testHost)"] + arguments, env: try world.browserEnvironment(), timeout: 60)
        #expect(untrusted.status == 69, "\(untrusted.stderr)")
        let login = try run(bin, ["login", "--no-verbose", "https://\(testHost)"] + arguments,
                            env: try world.browserEnvironment(extra: ["SSL_CERT_FILE": world.edge.certs.caFile.path]), timeout: 60)
        #expect(login.status == 0, "\(login.stderr)")
        #expect(login.stdout == (try String(contentsOf: world.appTokenFile, encoding: .utf8)))
        // And the tunnel with that token, still without --ca-file.
        try echoThroughStdio(arguments: ["--hostname", testHost] + arguments,
                             environment: ["SSL_CERT_FILE": world.edge.certs.caFile.path], payload: "env-trust")
    }

    @Test("17.2: access curl runs curl with the app token (logging in first); -ar runs it without one instead of logging in")
    func accessCurl() throws {
        let world = try LoginWorld(target: "127.0.0.1:9")
        let bin = try TestPaths.binary("cf-access-tcp")
        let environment = try world.browserEnvironment()
        let app = "https://\(testHost)/"
        let curlFlags = ["-sS", "--max-time", "30", "--cacert", world.edge.certs.caFile.path,
                         "--resolve", "\(testHost):443:\(world.siteAddresses[testHost]!)", "--noproxy", "*"]
        let ours = ["access", "curl"] + world.commonArguments

        let allowed = try run(bin, ours + ["-ar", app, "-o", "/dev/null", "-w", "%{http_code}"] + curlFlags, env: environment, timeout: 60)
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stdout == "302", "without a token Access redirects to its login: \(allowed.stdout)")
        #expect(allowed.stderr.contains("no valid Access token for \(testHost)"), "\(allowed.stderr)")
        // curl's exit status is the command's (23: it cannot write its output).
        let failing = try run(bin, ours + ["--allow-request", app, "-o", "/nonexistent/dir/out"] + curlFlags,
                              env: environment, timeout: 60)
        #expect(failing.status == 23, "\(failing.stderr)")
        #expect(world.browserOpens.isEmpty, "-ar must not log in")

        let page = try run(bin, ours + [app] + curlFlags, env: environment, timeout: 60)
        #expect(page.status == 0, "\(page.stderr)")
        #expect(page.stdout.contains("You are signed in"), "\(page.stdout)")
        #expect(world.browserOpens.count == 1)
        let token = try String(contentsOf: world.appTokenFile, encoding: .utf8)
        #expect(!page.stdout.contains(token) && !page.stderr.contains(token))

        let cached = try run(bin, ours + ["-ar", app + "?page=2#top", "-o", "/dev/null", "-w", "%{http_code}"] + curlFlags,
                             env: environment, timeout: 60)
        #expect(cached.stdout == "200", "\(cached.stdout) \(cached.stderr)")
        #expect(world.browserOpens.count == 1)

        let noURL = try run(bin, ["access", "curl", "-sS"], timeout: 30)
        #expect(noURL.status == 64 && noURL.stderr.contains("give the application URL first"), "\(noURL.stderr)")
    }
}
