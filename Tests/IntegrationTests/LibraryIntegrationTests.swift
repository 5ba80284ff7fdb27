import AccessCore
import AccessTestSupport
import AccessTransport
import CCFSSH2
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
private let serviceToken = try! ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)

/// A connect timeout of 60 s by default: what these tests check is not how long a dial may take,
/// and a loaded 2-core CI machine running suites side by side needed more than 15 s once.
private func options(edge: EdgeFixture, keepalive: Duration = .seconds(30), limits: ListenerLimits = .singleConnection,
                     timeout: Duration = .seconds(60), caFile: String? = "") throws -> AccessTunnel.Options {
    AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                         caFile: caFile == "" ? edge.certs.caFile.path : caFile,
                         connectTimeout: timeout, retry: .never, limits: limits, keepaliveInterval: keepalive)
}

/// The sockets this process is listening on (TCP, IPv4 and IPv6), from /proc.
private func listeningSocketsOfThisProcess() -> Int {
    var inodes = Set<String>()
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    for fd in fds {
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)"),
           target.hasPrefix("socket:[") {
            inodes.insert(String(target.dropFirst(8).dropLast()))
        }
    }
    var count = 0
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
        for line in text.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            if fields.count > 9, fields[3] == "0A", inodes.contains(String(fields[9])) { count += 1 }
        }
    }
    return count
}

/// Echoes `text` through a connected socket and returns what came back ("" on EOF).
private func echo(_ client: ClientSocket, _ text: String) throws -> String {
    try client.send(Array(text.utf8))
    var back: [UInt8] = []
    _ = try client.receive(count: text.utf8.count) { back += $0 }
    return String(decoding: back, as: UTF8.self)
}

@Suite("library against the emulator and a real sshd", .serialized, .ownThreads)
struct LibraryIntegrationTests {
    @Test("the example target connects with a service token and runs an SSH command through the port")
    func exampleTarget() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let sshArgs = sshd.sshArguments(user: sshd.keyUser, knownHosts: sshd.knownHosts(for: testHost),
                                        extra: ["-o", "HostKeyAlias=\(testHost)"]) + ["127.0.0.1", "echo example-ok"]
        let result = try run(try TestPaths.binary("cf-access-tcp-example"),
                             [testHost, "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path, "--"] + sshArgs,
                             env: ["TUNNEL_SERVICE_TOKEN_ID": testTokenID, "TUNNEL_SERVICE_TOKEN_SECRET": testTokenSecret],
                             timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == "example-ok\n")
        #expect(result.stderr.contains("tunnel: connected(localPort: "))
    }

    @Test("openStream: libssh2 completes an SSH handshake, authenticates and runs a command, with no listening socket")
    func openStreamWithLibssh2() async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(edge: edge), logger: quiet)
        let listeningBefore = listeningSocketsOfThisProcess()
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(serviceToken))
        #expect(tunnel.currentState == .connected(localPort: 0))
        // Other suites run beside this one and open and close listeners of their own: a listener
        // of the stream would stay for as long as the stream is open, so one sample at or below
        // the count before is enough, and every sample above it fails.
        var listeningNow = listeningSocketsOfThisProcess()
        for _ in 0..<10 where listeningNow > listeningBefore {
            try await Task.sleep(for: .milliseconds(300))
            listeningNow = listeningSocketsOfThisProcess()
        }
        #expect(listeningNow <= listeningBefore, "openStream must not listen on any port")

        #expect(libssh2_init(0) == 0)
        let session = try #require(CCFSSH2_session_init())
        defer { libssh2_session_free(session) }
        libssh2_session_set_blocking(session, 1)
        #expect(libssh2_session_handshake(session, stream.fileDescriptor.rawValue) == 0)

        // The host key libssh2 saw is sshd's.
        let hash = try #require(libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256))
        let seen = Data(bytes: hash, count: 32)
        let blob = try #require(Data(base64Encoded: String(sshd.hostKeyPublicLine.split(separator: " ")[1])))
        let expected = blob.withUnsafeBytes { Digest.sha256Hex($0) }
        #expect(seen.map { String(format: "%02x", $0) }.joined() == expected)

        let user = sshd.keyUser
        let key = sshd.clientKeyPath.path
        let auth = libssh2_userauth_publickey_fromfile_ex(session, user, UInt32(user.utf8.count), key + ".pub", key, "")
        #expect(auth == 0, "libssh2 public key authentication failed: \(auth)")
        let channel = try #require(libssh2_channel_open_ex(session, "session", 7, 2 * 1024 * 1024, 32_768, nil, 0))
        let command = "echo stream-ok"
        #expect(libssh2_channel_process_startup(channel, "exec", 4, command, UInt32(command.utf8.count)) == 0)
        var output = [CChar](repeating: 0, count: 256)
        var text = ""
        while true {
            let n = libssh2_channel_read_ex(channel, 0, &output, output.count)
            if n <= 0 { break }
            text += String(decoding: output[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        #expect(text == "stream-ok\n")
        libssh2_channel_free(channel)
        _ = libssh2_session_disconnect_ex(session, SSH_DISCONNECT_BY_APPLICATION, "done", "")
        stream.close()
        await tunnel.disconnect()
        #expect(tunnel.currentState == .disconnected)
    }

    @Test("keepalive on: an idle tunnel outlives the edge's idle cut-off; off: it is cut")
    func keepalive() async throws {
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address,
                                   serviceTokens: [(testTokenID, testTokenSecret)], idleTimeout: 3)
        for keepalive in [Duration.seconds(1), .zero] {
            let tunnel = AccessTunnel(options: try options(edge: edge, keepalive: keepalive), logger: quiet)
            let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
            let client = try ClientSocket(port: Int(port))
            #expect(try echo(client, "before") == "before")
            try await Task.sleep(nanoseconds: 7_000_000_000)   // idle, more than twice the cut-off
            if keepalive > .zero {
                #expect(try echo(client, "after") == "after", "the idle tunnel was cut despite keepalive")
            } else {
                #expect(try await offPool { client.waitForEOF(timeout: 10) }, "without keepalive the edge should have cut the idle tunnel")
            }
            await tunnel.disconnect()
        }
        let stats = try edge.stats(host: testHost)
        #expect(stats.pingsReceived >= 3)
        #expect(stats.idleClosed >= 1)
    }

    @Test("keepalive: when the edge stops answering pings, the tunnel is closed after three intervals, with a log line")
    func unansweredPingsCloseTheTunnel() async throws {
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address,
                                   serviceTokens: [(testTokenID, testTokenSecret)], extraArguments: ["--ignore-pings"])
        let store = MemoryLog()
        let logger = store.logger
        let tunnel = AccessTunnel(options: try options(edge: edge, keepalive: .seconds(1)), logger: logger)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        let client = try ClientSocket(port: Int(port))
        #expect(try echo(client, "hello") == "hello")
        #expect(try await offPool { client.waitForEOF(timeout: 20) }, "the tunnel stayed open although no ping was answered")
        #expect(store.lines.contains { $0.contains("did not answer keepalive pings for 3 s; closing the tunnel") })
        #expect(try edge.stats(host: testHost).pingsReceived >= 3)
        await tunnel.disconnect()
    }

    @Test("library default limits: one connection, then the listener is closed")
    func defaultLimits() async throws {
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(edge: edge), logger: quiet)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        let first = try ClientSocket(port: Int(port))
        #expect(try echo(first, "one") == "one")
        #expect(throws: FixtureError.self) { _ = try ClientSocket(port: Int(port)) }   // refused: nobody listens
        await tunnel.disconnect()
    }

    @Test("maxConcurrentConnections: a connection over the limit is closed at once, not queued")
    func concurrencyLimit() async throws {
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let limits = ListenerLimits(maxConcurrentConnections: 1, stopAcceptingAfterFirstConnection: false)
        let tunnel = AccessTunnel(options: try options(edge: edge, limits: limits), logger: quiet)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        let first = try ClientSocket(port: Int(port))
        #expect(try echo(first, "one") == "one")
        let second = try ClientSocket(port: Int(port))
        #expect(try await offPool { second.waitForEOF(timeout: 10) }, "the connection over the limit was not closed")
        #expect(try echo(first, "still") == "still")
        await tunnel.disconnect()
    }

    @Test("disconnect while connected: bridged connections closed, port free again, state disconnected")
    func disconnectWhileConnected() async throws {
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try options(edge: edge, limits: .unlimited), logger: quiet)
        let port = try await tunnel.connect(hostname: testHost, method: .serviceToken(serviceToken))
        let client = try ClientSocket(port: Int(port))
        #expect(try echo(client, "hi") == "hi")
        await tunnel.disconnect()
        #expect(tunnel.currentState == .disconnected)
        #expect(try await offPool { client.waitForEOF(timeout: 5) })
        let again = try ListenAddress.parse("127.0.0.1:\(port)", allowNonLoopback: false)
        let rebound = try LoopbackListener(address: again)   // throws if the port were still taken
        rebound.close()
        try edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }
    }

    @Test("failure categories, produced for real, with their plain messages")
    func failureCategories() async throws {
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:9", serviceTokens: [(testTokenID, testTokenSecret)])
        func attempt(_ options: AccessTunnel.Options, _ method: AuthenticationMethod) async -> TunnelFailure? {
            let tunnel = AccessTunnel(options: options, logger: quiet)
            do {
                _ = try await tunnel.connect(hostname: testHost, method: method)
                await tunnel.disconnect()
                return nil
            } catch {
                return error
            }
        }
        // Access redirect.
        let wrong = try ServiceToken(clientID: testTokenID, clientSecret: "wrong")
        let rejected = await attempt(try options(edge: edge), .serviceToken(wrong))
        #expect(rejected?.category == .authentication)
        #expect(rejected?.message.hasPrefix("Cloudflare Access rejected the service token") == true)
        // Bad CA.
        let badCA = await attempt(try options(edge: edge, caFile: nil), .serviceToken(serviceToken))
        #expect(badCA?.category == .transport)
        #expect(badCA?.message.contains("unable to get local issuer certificate") == true)
        // Refused port.
        var refusedOptions = try options(edge: edge)
        refusedOptions.connectTo = try ConnectTarget.parse("127.0.0.1:\(try freeLoopbackPort())")
        let refused = await attempt(refusedOptions, .serviceToken(serviceToken))
        #expect(refused?.message.hasPrefix("Connection refused") == true)
        #expect(refused?.isRetryable == true)
        // A socket that accepts and never answers.
        let silent = try LoopbackListener(address: try ListenAddress.parse("127.0.0.1:0", allowNonLoopback: false))
        let held = LockedBox<[Int32]>([])
        silent.startAccepting { fd in held.withLock { $0.append(fd) } }
        var silentOptions = try options(edge: edge, timeout: .seconds(2))
        silentOptions.connectTo = try ConnectTarget.parse("127.0.0.1:\(silent.port)")
        let timedOut = await attempt(silentOptions, .serviceToken(serviceToken))
        #expect(timedOut?.message.hasPrefix("Connection timed out.") == true, "\(String(describing: timedOut))")
        silent.close()
        held.withLock { $0.forEach { close($0) } }
    }

    @Test("no route to the edge (a network namespace of our own with loopback down): Network unavailable")
    func networkUnavailable() throws {
        try requireRealPart(which("ip") != nil, "iproute2's ip (for a test network namespace)")
        let name = "cfat-\(getpid())"
        #expect(try run("ip", ["netns", "add", name]).status == 0)
        defer { _ = try? run("ip", ["netns", "del", name]) }
        let bin = try TestPaths.binary("cf-access-tcp").path
        let result = try run("ip", ["netns", "exec", name, bin, "--hostname", testHost, "--connect-to", "127.0.0.1:443"],
                             stdin: Data(), timeout: 20)
        #expect(result.status != 0)
        #expect(result.stderr.contains("Network unavailable"), "\(result.stderr)")
    }
}
