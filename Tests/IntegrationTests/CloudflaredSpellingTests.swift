import Foundation
import Testing

/// Spellings users paste from cloudflared's documentation are understood (issue 11.13).
@Suite("cloudflared spellings", .ownThreads)
struct CloudflaredSpellingTests {
    private func tool(_ arguments: [String], env: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
        try run(try TestPaths.binary("cf-access-tcp"), arguments, env: env, timeout: 30)
    }

    @Test("--tunnel-host and --log-level are the tunnel's --hostname and --loglevel")
    func tunnelFlags() throws {
        // A refused port ends the dial at once; the message names the host given as --tunnel-host.
        let port = try freeLoopbackPort()
        let result = try tool(["--tunnel-host", testHost, "--log-level", "debug", "--connect-to", "127.0.0.1:\(port)",
                               "--service-token-id", "i", "--service-token-secret", "s"])
        #expect(result.status != 0 && result.status != 64, "\(result.stderr)")
        #expect(result.stderr.contains("Connection refused by 127.0.0.1:\(port)"), "\(result.stderr)")
        #expect(result.stderr.contains(" DBG "), "--log-level debug was not applied: \(result.stderr)")
    }

    @Test("--url with the schemes of Cloudflare's RDP, SMB and SSH guides listens and carries bytes (issue 26.3)",
          arguments: ["rdp", "smb", "ssh", "tcp"])
    func listenerSchemes(_ scheme: String) throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try clientArguments(edge: edge, extra: ["--url", "\(scheme)://localhost:0/"]))
        defer { process.terminate() }
        let line = try process.waitForStderr(containing: "listening on 127.0.0.1:", timeout: 30)
        let port = try #require(line.components(separatedBy: "listening on 127.0.0.1:").last
            .flatMap { Int($0.prefix { $0.isNumber }) })
        let client = try ClientSocket(port: port)
        try client.send(Array("\(scheme)\n".utf8))
        var back = [UInt8]()
        _ = try client.receive(count: scheme.utf8.count + 1) { back += $0 }
        #expect(String(decoding: back, as: UTF8.self) == "\(scheme)\n")
    }

    @Test("access help tcp shows the tcp command's help, as cloudflared's does")
    func accessHelp() throws {
        let result = try tool(["access", "help", "tcp"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("USAGE: cf-access-tcp access tcp"), "\(result.stdout)")
        #expect(result.stdout.contains("--hostname"))
    }

    @Test("forward tcp and forward ssh run the tunnel")
    func forward() throws {
        let port = try freeLoopbackPort()
        for verb in ["tcp", "ssh"] {
            let result = try tool(["forward", verb, "--hostname", testHost, "--connect-to", "127.0.0.1:\(port)",
                                   "--service-token-id", "i", "--service-token-secret", "s"])
            #expect(result.stderr.contains("Connection refused by 127.0.0.1:\(port)"), "forward \(verb): \(result.stderr)")
        }
    }

    @Test("access token -app=URL and access login -q are accepted")
    func tokenAndLoginSpellings() throws {
        let dir = try makeTempDir("cfat-spelling")
        defer { try? FileManager.default.removeItem(at: dir) }
        // Nothing listens there: the refusal names the host given with -app, so the URL was understood.
        let port = try freeLoopbackPort()
        let token = try tool(["access", "token", "-app=https://\(testHost):\(port)", "--token-dir", dir.path,
                              "--resolve", "\(testHost):\(port):127.0.0.1"])
        #expect(token.status == 69, "\(token.stderr)")
        #expect(token.stderr.contains("Connection refused by \(testHost)"), "\(token.stderr)")
        let both = try tool(["access", "token", "https://a.example", "-app=https://b.example", "--token-dir", dir.path])
        #expect(both.status == 64)
        #expect(both.stderr.contains("two application URLs"))
        let help = try tool(["access", "login", "--help"])
        #expect(help.stdout.contains("-q, --quiet"), "\(help.stdout)")
        let missing = try tool(["access", "login", "-q"])
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("the application URL is missing"), "\(missing.stderr)")
    }

    @Test("--version names the product; a completion script is generated")
    func versionAndCompletions() throws {
        let version = try tool(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("cf-access-tcp "), "\(version.stdout)")
        let completion = try tool(["--generate-completion-script", "bash"])
        #expect(completion.status == 0)
        #expect(completion.stdout.contains("--hostname") && completion.stdout.contains("complete"))
    }

    @Test("--ca-file naming a missing file says so at once; help shows each default once; token and logout list only their flags")
    func caFileAndHelp() throws {
        for arguments in [["--hostname", testHost, "--ca-file", "/nonexistent/ca.pem"],
                          ["login", "https://\(testHost)", "--ca-file", "/nonexistent/ca.pem"],
                          ["token", "https://\(testHost)", "--ca-file", "/nonexistent/ca.pem"]] {
            let result = try tool(arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("--ca-file /nonexistent/ca.pem: No such file or directory"), "\(result.stderr)")
        }
        let help = try tool(["tcp", "--help"])
        #expect(help.stdout.components(separatedBy: "default: 30").count == 2, "\(help.stdout)")
        #expect(!help.stdout.contains("(default 30)"))
        for verb in ["token", "logout"] {
            let text = try tool([verb, "--help"]).stdout
            #expect(!text.contains("--no-browser") && !text.contains("--fedramp"), "\(verb): \(text)")
            #expect(text.contains("--token-dir"))
        }
    }
}
