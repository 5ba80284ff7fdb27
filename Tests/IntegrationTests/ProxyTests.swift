import Foundation
import Testing

/// HTTPS_PROXY / NO_PROXY for the WebSocket dial, through a real CONNECT proxy.
@Suite("HTTPS_PROXY", .serialized, .ownThreads)
struct ProxyTests {
    private func roundTrip(edge: EdgeFixture, environment: [String: String]) throws -> (Data, Int32, String) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge),
                                         environment: environment, stdin: .pipe)
        try process.writeStdin(Data("via-proxy".utf8))
        let echoed = try process.waitForStdout(byteCount: 9, timeout: 20)
        process.closeStdin()
        let status = try process.waitForExit(timeout: 10)
        return (echoed, status, process.stderrText)
    }

    @Test("the tunnel goes through HTTPS_PROXY with CONNECT, and NO_PROXY bypasses it")
    func throughProxy() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let proxy = try ProxyFixture()

        let (echoed, status, stderr) = try roundTrip(edge: edge, environment: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"])
        #expect(echoed == Data("via-proxy".utf8))
        #expect(status == 0, "\(stderr)")
        #expect(proxy.log.contains("CONNECT 127.0.0.1:\(edge.port)"), "proxy log: \(proxy.log)")

        let before = proxy.log.components(separatedBy: "CONNECT 127.0.0.1").count
        let (bypassed, bypassStatus, _) = try roundTrip(edge: edge, environment: [
            "https_proxy": "http://127.0.0.1:\(proxy.port)", "NO_PROXY": "localhost,.cfat.test"])
        #expect(bypassed == Data("via-proxy".utf8))
        #expect(bypassStatus == 0)
        #expect(proxy.log.components(separatedBy: "CONNECT 127.0.0.1").count == before, "NO_PROXY was ignored")
        // NO_PROXY names the Access hostname, not the --connect-to address (as curl does).
        let (proxied, proxiedStatus, _) = try roundTrip(edge: edge, environment: [
            "HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)", "NO_PROXY": "127.0.0.1"])
        #expect(proxied == Data("via-proxy".utf8))
        #expect(proxiedStatus == 0)
        #expect(proxy.log.components(separatedBy: "CONNECT 127.0.0.1").count == before + 1,
                "NO_PROXY matched the --connect-to address instead of the hostname")
    }

    @Test("a proxy with credentials is refused with a plain line that hides them")
    func proxyCredentialsRefused() throws {
        let result = try run(try TestPaths.binary("cf-access-tcp"), ["--hostname", testHost],
                             env: ["HTTPS_PROXY": "http://me:hunter2@127.0.0.1:3128"], timeout: 10)
        #expect(result.status != 0)
        #expect(result.stderr.contains("credentials"))
        #expect(!result.stderr.contains("hunter2"))
    }

    @Test("a proxy that refuses the CONNECT, or the connection, is named as the proxy's doing (12.6)")
    func refusingProxy() throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        let proxy = try ProxyFixture(connectPort: 1)
        let refused = try run(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge),
                              env: ["HTTPS_PROXY": "http://127.0.0.1:\(proxy.port)"], timeout: 30)
        #expect(refused.status == 69, "\(refused.stderr)")
        #expect(refused.stderr.contains("The proxy 127.0.0.1:\(proxy.port) refused to connect to 127.0.0.1:\(edge.port)"),
                "\(refused.stderr)")
        #expect(!refused.stderr.contains("Network unavailable"))
        let closed = try freeLoopbackPort()
        let noProxy = try run(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge),
                              env: ["HTTPS_PROXY": "http://127.0.0.1:\(closed)"], timeout: 30)
        #expect(noProxy.status == 69, "\(noProxy.stderr)")
        #expect(noProxy.stderr.contains("Connection refused by the proxy 127.0.0.1:\(closed)"), "\(noProxy.stderr)")
    }
}
