import AccessCore
import AccessTestSupport
import AccessTransport
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// No secret reaches a log line, at any level.
@Suite("secrets never reach logs", .serialized, .ownThreads)
struct SecretLoggingTests {
    @Test("library: the carrier at trace level through a real tunnel and a refusal")
    func libraryLogsHaveNoSecrets() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let store = MemoryLog()
        let logger = store.logger

        for secret in [testTokenSecret, "wrong-\(testTokenSecret)"] {
            let origin = try OriginURL.parse(testHost)
            let request = try RequestBuilder.upgradeRequest(
                origin: origin, userAgent: Version.userAgent,
                serviceToken: try ServiceToken(clientID: testTokenID, clientSecret: secret),
                accessToken: "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl", destination: nil,
                extraHeaders: [HeaderField(name: "Authorization", value: "Bearer hunter2-bearer")])
            let config = CarrierConfiguration(request: request, connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                              caFile: edge.certs.caFile.path, credential: .serviceToken)
            let ended = DispatchSemaphore(value: 0)
            let loop = CarrierLoop(configuration: config, logger: logger) { event in
                switch event {
                case .established: break
                case .failed, .refused, .retryable, .closed: ended.signal()
                }
            }
            try loop.start()
            var pair: [Int32] = [-1, -1]
            #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
            loop.bridge(socket: pair[0])
            _ = "ping".withCString { send(pair[1], $0, 4, Int32(MSG_NOSIGNAL)) }
            if secret == testTokenSecret {
                var buffer = [UInt8](repeating: 0, count: 4)
                var tv = timeval(tv_sec: 20, tv_usec: 0)
                _ = setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                #expect(recv(pair[1], &buffer, 4, Int32(MSG_WAITALL)) == 4)
                #expect(buffer == Array("ping".utf8))
            }
            close(pair[1])
            #expect(ended.wait(timeout: .now() + 20) == .success)
            loop.shutdown()
        }
        let lines = store.lines
        #expect(lines.contains { $0.contains("dialing") }, "expected debug lines, got \(lines)")
        #expect(lines.contains { $0.contains("[redacted]") })
        for needle in [testTokenSecret, "hunter2-bearer", "c2lnbmF0dXJl", "eyJhbGciOiJSUzI1NiJ9"] {
            #expect(!lines.contains { $0.contains(needle) }, "\(needle) leaked into the logs")
        }
    }

    @Test("binary at --loglevel debug: neither the log file nor stderr holds a secret; the file is 0600")
    func binaryDebugLogsHaveNoSecrets() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let dir = try makeTempDir("cfat-logs")
        defer { try? FileManager.default.removeItem(at: dir) }
        let logFile = dir.appendingPathComponent("client.log")

        // A successful tunnel, logging to a file.
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try clientArguments(edge: edge, extra: ["--loglevel", "debug", "--logfile", logFile.path,
                                                                                 "-H", "X-Custom-Token: tok.en.sig", "-H", "Cookie: CF_Authorization=cookie-secret"]),
                                         stdin: .pipe)
        try process.writeStdin(Data("hello".utf8))
        #expect(try process.waitForStdout(byteCount: 5, timeout: 20) == Data("hello".utf8))
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 10) == 0)

        // A refused one, logging to stderr.
        let refused = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try clientArguments(edge: edge, token: (testTokenID, "wrong-" + testTokenSecret),
                                                             extra: ["--loglevel", "debug"]),
                                         stdin: .pipe)
        #expect(try refused.waitForExit(timeout: 10) != 0)

        let fileText = try String(contentsOf: logFile, encoding: .utf8)
        let attributes = try FileManager.default.attributesOfItem(atPath: logFile.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(fileText.contains("DBG"), "the debug log is empty: \(fileText)")
        #expect(refused.stderrText.contains("DBG"))
        // The failure's kind is logged for people who grep logs (issue 13.6).
        #expect(refused.stderrText.contains("failure kind: access-rejected"), "\(refused.stderrText)")
        for text in [fileText, process.stderrText, refused.stderrText] {
            for needle in [testTokenSecret, "tok.en.sig", "cookie-secret"] {
                #expect(!text.contains(needle), "\(needle) leaked: \(text)")
            }
        }
    }

    @Test("issue 16.5: at --loglevel debug, -H values that are credentials never reach the log, whatever the header's name")
    func customHeaderCredentialsAreRedacted() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let secrets: [(name: String, value: String)] = [
            ("X-Credential", "cred-hunter2"), ("X-Passphrase", "correct horse battery staple"), ("X-Otp", "492817"),
            ("X-Forwarded-Jwt", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJmd2QifQ.Zm9yd2FyZGVk"),
            ("X-Upstream", "Bearer upstream-bearer-value"), ("X-Basic", "Basic dXNlcjpzM2NyM3RwYXNz"),
            ("X-Opaque", "q8Zr2LmX7vN4tB1yK6wE3sD9fG5hJ0pA"),
        ]
        let headers = secrets.flatMap { ["-H", "\($0.name): \($0.value)"] } + ["-H", "X-Plain: visible-value"]
        let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"),
                                         try clientArguments(edge: edge, extra: ["--loglevel", "debug"] + headers),
                                         stdin: .pipe)
        try process.writeStdin(Data("hello".utf8))
        #expect(try process.waitForStdout(byteCount: 5, timeout: 30) == Data("hello".utf8))
        process.closeStdin()
        #expect(try process.waitForExit(timeout: 20) == 0, "\(process.stderrText)")
        let log = process.stderrText
        // The headers were logged (names shown), and a plain value stays readable.
        #expect(log.contains("X-Plain: visible-value"), "\(log)")
        for (name, value) in secrets {
            #expect(log.contains("\(name): [redacted]"), "\(name) not logged as redacted: \(log)")
            for part in value.split(separator: " ") where part.count > 5 && part != "Bearer" {
                #expect(!log.contains(part), "\(name)'s value leaked: \(log)")
            }
        }
    }
}
