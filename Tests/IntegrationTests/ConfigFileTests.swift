import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 26.3: cloudflared's config.yml — `--config FILE` or `~/.cloudflared/config.yml` — for the
/// keys an access client reads, and its `forwarders:` list (one listener per entry, one process).
@Suite("cloudflared's config.yml", .serialized, .ownThreads)
struct ConfigFileTests {
    @Test("forwarders: one listener per entry in one process, both served; SIGTERM stops them all with exit 0")
    func forwarders() throws {
        let directory = try makeTempDir("cfat-config")
        defer { try? FileManager.default.removeItem(at: directory) }
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let ports = [try freeLoopbackPort(), try freeLoopbackPort()]
        let file = directory.appendingPathComponent("config.yml")
        let entries = ports.map { port in
            """
              - url: \(testHost)
                listener: 127.0.0.1:\(port)
                serviceTokenID: \(testTokenID)
                serviceTokenSecret: "\(testTokenSecret)"
            """
        }
        try ("# cloudflared's forwarders\nloglevel: info\nforwarders:\n" + entries.joined(separator: "\n") + "\n")
            .write(to: file, atomically: true, encoding: .utf8)
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         ["--config", file.path, "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path])
        defer { process.terminate() }
        for port in ports {
            _ = try process.waitForStderr(containing: "cf-access-tcp: listening on 127.0.0.1:\(port) for \(testHost)", timeout: 30)
        }
        #expect(try echo("first forwarder\n", port: ports[0]) == "first forwarder\n")
        #expect(try echo("second forwarder\n", port: ports[1]) == "second forwarder\n")
        #expect(!process.stderrText.contains(testTokenSecret))
        process.send(signal: SIGTERM)
        #expect(try process.waitForExit(timeout: 30) == 0, "\(process.stderrText)")
    }

    @Test("~/.cloudflared/config.yml fills the flags not given; a tunnel daemon's config.yml there is left alone")
    func defaultFile() throws {
        let home = try makeTempDir("cfat-home")
        defer { try? FileManager.default.removeItem(at: home) }
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let directory = home.appendingPathComponent(".cloudflared")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("config.yml")
        try "hostname: \(testHost)\nservice-token-id: \(testTokenID)\nservice-token-secret: \(testTokenSecret)\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let arguments = ["--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path]
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments,
                                         environment: ["HOME": home.path], stdin: .pipe)
        defer { process.terminate() }
        try process.writeStdin(Data("from the config file\n".utf8))
        #expect(try process.waitForStdout(byteCount: 21, timeout: 30) == Data("from the config file\n".utf8))
        process.terminate()

        // A tunnel daemon's file (tunnel:, ingress:) is not read: the hostname is missing again.
        try "tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef\nurl: http://localhost:8000\ningress:\n  - service: http_status:404\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let daemon = try run(try TestPaths.binary("cf-access-tcp"), arguments, env: ["HOME": home.path], stdin: Data(), timeout: 30)
        #expect(daemon.status == 64, "\(daemon.stderr)")
        #expect(daemon.stderr.hasPrefix("cf-access-tcp: --hostname is required"), "\(daemon.stderr)")
    }

    @Test("a key not read, a broken line, an unreadable file: one line naming the file and line, exit 64")
    func refused() throws {
        let directory = try makeTempDir("cfat-config")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("config.yml")
        let cases: [(String, String)] = [
            ("hostname: \(testHost)\ncompression-quality: 3\n",
             "\(file.path) line 2: compression-quality is not a setting cf-access-tcp reads"),
            ("hostname: {a: b}\n", "\(file.path) line 1: \"{a: b}\" is YAML this reader does not take"),
            ("forwarders:\n  - url: \(testHost)\n", "\(file.path) line 2: a forwarder needs url (the Access hostname) and listener"),
        ]
        for (text, line) in cases {
            try text.write(to: file, atomically: true, encoding: .utf8)
            let result = try run(try TestPaths.binary("cf-access-tcp"), ["--config", file.path], stdin: Data(), timeout: 30)
            #expect(result.status == 64, "\(text): \(result.stderr)")
            #expect(result.stderr.hasPrefix("cf-access-tcp: \(line)"), "\(text): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1)
        }
        let missing = try run(try TestPaths.binary("cf-access-tcp"), ["--config", directory.appendingPathComponent("nope.yml").path],
                              stdin: Data(), timeout: 30)
        #expect(missing.status == 64)
        #expect(missing.stderr.contains("cannot read the configuration file"), "\(missing.stderr)")
    }
}
