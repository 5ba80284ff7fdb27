import AccessCore
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Two tunnels in one process: a carrier created while another one's TLS handshake is half done
/// must not break that handshake.
///
/// When the carrier ran on libwebsockets 4.1.6, each new context took a new process-wide `SSL`
/// ex-data index, and a handshake that started before it failed ("can't get wsi from ssl
/// privdata"). The carrier's loop is our own now; the case stays: a second carrier's start must
/// leave a handshake under way alone. The hostile edge holds the first handshake while the second
/// carrier starts.
@Suite("carriers side by side", .serialized, .ownThreads)
struct ConcurrentCarrierTests {
    @Test("a second tunnel's carrier, started during the first one's TLS handshake, does not fail it")
    func secondCarrierDuringHandshake() async throws {
        let gate = try makeTempDir("cfat-gate").appendingPathComponent("open")
        defer { try? FileManager.default.removeItem(at: gate.deletingLastPathComponent()) }
        // Blocking work (starting python, socket I/O) runs off Swift's cooperative pool, which
        // the tunnels under test need (two threads on a 2-core machine).
        let edge = try await offPool { try HostileEdge(mode: "pong-echo", extra: ["--hold-handshake", gate.path]) }
        // The first dial waits, held, until the second tunnel has started: on a loaded machine
        // (every suite side by side on two cores) that took over 60 s once, so 120 s.
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: try certs().caFile.path, connectTimeout: .seconds(120), retry: .never)
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let first = AccessTunnel(options: options, logger: quiet)
        let second = AccessTunnel(options: options, logger: quiet)

        let firstStream = Task { try await first.openStream(hostname: testHost, method: .serviceToken(token)) }
        // The first client's ClientHello is at the edge: its SSL object exists, its handshake waits.
        try await edge.event { $0 == "client-hello 0" }
        // The second tunnel creates its own carrier (its own loop and TLS context) now.
        let secondStream = Task { try await second.openStream(hostname: testHost, method: .serviceToken(token)) }
        try await edge.event { $0 == "client-hello 1" }
        #expect(FileManager.default.createFile(atPath: gate.path, contents: Data()))

        for (name, task) in [("first", firstStream), ("second", secondStream)] {
            let stream: TunnelStream
            do {
                stream = try await task.value
            } catch {
                Issue.record("the \(name) tunnel failed: \(error)")
                continue
            }
            // Bytes go both ways through the tunnel.
            let message = Array("through the \(name) tunnel\n".utf8)
            let fd = stream.fileDescriptor.rawValue
            let back = try await offPool { () -> [UInt8] in
                // MSG_NOSIGNAL: the library no longer ignores SIGPIPE for the whole process.
                guard send(fd, message, message.count, Int32(MSG_NOSIGNAL)) == message.count else { return [] }
                var back = [UInt8](repeating: 0, count: message.count)
                var got = 0
                while got < message.count {
                    let n = back.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, message.count - got) }
                    guard n > 0 else { break }
                    got += n
                }
                return Array(back[..<got])
            }
            #expect(back == message, "the \(name) tunnel echoed \(back.count) bytes")
            stream.close()
        }
        await first.disconnect()
        await second.disconnect()
    }
}

/// The certificate-verify callback is ours (see `ConcurrentCarrierTests`): what it accepts and
/// refuses, through the binary.
@Suite("TLS verification policy of the carrier", .ownThreads)
struct CarrierVerificationTests {
    private func run(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, stdin: .pipe)
        defer { process.terminate() }
        try process.writeStdin(Data("ping\n".utf8))
        process.closeStdin()
        let status = try process.waitForExit(timeout: 30)
        return (status, process.stdoutText, process.stderrText)
    }

    @Test("an edge certificate from an unknown CA is refused, with OpenSSL's reason")
    func unknownCARefused() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let (status, stdout, stderr) = try run(["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)",
                                                "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret])
        #expect(status == ExitStatus.unavailable.rawValue, "\(stderr)")
        #expect(stdout.isEmpty)
        #expect(stderr.contains("TLS with \(testHost) failed: unable to get local issuer certificate"), "\(stderr)")
    }

    @Test("a certificate for another name is refused even from the trusted CA")
    func otherNameRefused() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let other = "not-" + testHost
        let (status, _, stderr) = try run(["--hostname", other, "--connect-to", "127.0.0.1:\(edge.port)",
                                           "--ca-file", try certs().caFile.path,
                                           "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret])
        #expect(status == ExitStatus.unavailable.rawValue, "\(stderr)")
        #expect(stderr.contains("TLS with \(other) failed: hostname mismatch"), "\(stderr)")
    }

    @Test("--connect-to SNI:PORT:HOST skips verification, as in cloudflared: an untrusted certificate is accepted")
    func threePartFormSkipsVerification() throws {
        let edge = try HostileEdge(mode: "pong-echo")
        let (status, stdout, stderr) = try run(["--hostname", testHost, "--connect-to", "\(testHost):\(edge.port):127.0.0.1",
                                                "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret])
        #expect(stdout == "ping\n", "\(stderr)")
        #expect(status == 0, "\(stderr)")
    }
}
