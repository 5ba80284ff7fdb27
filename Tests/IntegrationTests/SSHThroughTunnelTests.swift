import Foundation
import Testing

/// A real OpenSSH client and server talking through cf-access-tcp and the edge emulator.
@Suite("ssh through the tunnel", .serialized, .ownThreads)
struct SSHThroughTunnelTests {
    @Test("ProxyCommand: key user runs a command")
    func proxyCommandKeyUser() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try sshd.runSSH(user: sshd.keyUser, proxyCommand: try proxyCommand(edge: edge),
                                     hostAlias: testHost, command: "echo ok")
        #expect(result.status == 0, "ssh failed: \(result.stderr)")
        #expect(result.stdout == "ok\n")
        // The session ended (sshd closed first, so the edge started the WebSocket close): nothing lingers.
        let stats = try edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }
        #expect(stats.upgradesAccepted == 1)
        #expect(stats.textFrames == 0)
        #expect(stats.lastUserAgent == "cf-access-tcp/0.1.0")
        #expect(stats.lastHeaderNames.contains("cf-access-client-id"))
        #expect(stats.lastHeaderNames.contains("cf-access-client-secret"))
    }

    @Test("ProxyCommand: password user runs a command")
    func proxyCommandPasswordUser() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try sshd.runSSH(user: sshd.passwordUser, proxyCommand: try proxyCommand(edge: edge),
                                     hostAlias: testHost, command: "echo ok; whoami")
        #expect(result.status == 0, "ssh failed: \(result.stderr)")
        #expect(result.stdout == "ok\ncfat-pw\n")
    }

    @Test("cloudflared spelling `access ssh` and the environment variables work as a ProxyCommand")
    func cloudflaredSpellingAndEnvironment() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let bin = try TestPaths.binary("cf-access-tcp").path
        let proxy = "\(bin) access ssh --hostname %h --connect-to 127.0.0.1:\(edge.port) --ca-file \(edge.certs.caFile.path)"
        let result = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost, command: "echo env-ok",
                                     environment: ["TUNNEL_SERVICE_TOKEN_ID": testTokenID,
                                                   "TUNNEL_SERVICE_TOKEN_SECRET": testTokenSecret])
        #expect(result.status == 0, "ssh failed: \(result.stderr)")
        #expect(result.stdout == "env-ok\n")
    }

    @Test("listener mode (--url 127.0.0.1:0): both users with ssh -p")
    func listenerMode() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        for user in [sshd.keyUser, sshd.passwordUser] {
            let result = try sshd.runSSH(user: user, hostAlias: testHost, port: listener.port, command: "echo ok")
            #expect(result.status == 0, "ssh as \(user) failed: \(result.stderr)")
            #expect(result.stdout == "ok\n")
        }
        // One WebSocket per ssh connection, plus the one that proved the credential at start-up.
        try edge.waitForStats(host: testHost) { $0.upgradesAccepted == 3 && $0.activeTunnels == 0 }
    }

    @Test("a wrong service token: ssh fails fast with the plain reason on stderr")
    func wrongServiceTokenThroughSSH() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let bin = try TestPaths.binary("cf-access-tcp").path
        let proxy = "\(bin) --hostname %h --connect-to 127.0.0.1:\(edge.port) --ca-file \(edge.certs.caFile.path) "
            + "--id \(testTokenID) --secret wrong-secret"
        let result = try sshd.runSSH(user: sshd.keyUser, proxyCommand: proxy, hostAlias: testHost,
                                     command: "echo never", timeout: 20)
        #expect(result.status != 0)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains(
            "Cloudflare Access rejected the service token for \(testHost) (redirected to login)"), "\(result.stderr)")
        #expect(!result.stderr.contains("wrong-secret"))
    }
}
