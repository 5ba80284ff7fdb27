import AccessCore
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`: what a `Type=notify` service says.
final class NotifySocket: @unchecked Sendable {
    let path: String
    private let fd: Int32

    init(directory: URL) throws {
        path = directory.appendingPathComponent("notify").path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FixtureError("socket(AF_UNIX): errno \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw FixtureError("bind \(path): errno \(errno)") }
    }

    deinit { close(fd) }

    /// The next message, or nil when none came within `timeout` seconds.
    func next(timeout: Int) -> String? {
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }
}

/// Issue 26.2: the listener as a systemd service, tested without systemd as PID 1: socket
/// activation through systemd's own `systemd-socket-activate` (the first connection starts the
/// tool, which takes that connection from the socket's backlog), readiness and stopping through a
/// `NOTIFY_SOCKET`, the idle exit, SIGTERM as a clean stop, the secret from a file.
@Suite("the listener as a systemd service", .serialized, .ownThreads)
struct SystemdServiceTests {
    private func launcher() throws -> String {
        let path = which("systemd-socket-activate")
        try requireRealPart(path != nil, "systemd-socket-activate (package systemd)")
        return path!
    }

    private func edgeArguments(_ edge: EdgeFixture, secretFile: URL) -> [String] {
        ["--hostname", testHost, "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path,
         "--service-token-id", testTokenID, "--service-token-secret-file", secretFile.path]
    }

    private func secretFile(in directory: URL) throws -> URL {
        let file = directory.appendingPathComponent("secret")
        try "\(testTokenSecret)\n".write(to: file, atomically: true, encoding: .utf8)
        _ = chmod(file.path, 0o600)
        return file
    }

    @Test("socket activation: the first connection starts the tool and is served (its bytes sent before the tool ran), READY=1, then an idle exit with STOPPING=1 and status 0")
    func socketActivation() throws {
        let launcher = try launcher()
        let directory = try makeTempDir("cfat-systemd")
        defer { try? FileManager.default.removeItem(at: directory) }
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let notify = try NotifySocket(directory: directory)
        let port = try freeLoopbackPort()
        let tool = try TestPaths.binary("cf-access-tcp").path
        let process = try ManagedProcess(URL(fileURLWithPath: launcher),
                                         ["-l", "127.0.0.1:\(port)", "-E", "NOTIFY_SOCKET=\(notify.path)", tool]
                                            + edgeArguments(edge, secretFile: try secretFile(in: directory)) + ["--exit-when-idle", "2"])
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Listening on 127.0.0.1:\(port)", timeout: 30)
        #expect(!process.stderrText.contains("listening on the socket"), "the tool must not run before a connection")

        // Sent at once: the tool starts on this connection and takes it from the backlog.
        #expect(try echo("first, before the tool ran\n", port: port) == "first, before the tool ran\n")
        let ready = try #require(notify.next(timeout: 30), "no READY=1: \(process.stderrText)")
        #expect(ready == "READY=1\nSTATUS=listening on the socket from systemd (port \(port)) for \(testHost)")
        _ = try process.waitForStderr(containing: "cf-access-tcp: listening on the socket from systemd (port \(port)) for \(testHost)",
                                      timeout: 30)
        #expect(try echo("second\n", port: port) == "second\n")

        // Idle for 2 s: a clean exit, said to systemd first.
        #expect(try process.waitForExit(timeout: 30) == 0, "\(process.stderrText)")
        #expect(notify.next(timeout: 5) == "STOPPING=1")
        _ = try process.waitForStderr(containing: "no connection for 2 s: the listener stops", timeout: 30)
    }

    @Test("a listener under Type=notify: READY=1 once listening, STOPPING=1 and exit 0 on SIGTERM")
    func notifyAndSIGTERM() throws {
        let directory = try makeTempDir("cfat-systemd")
        defer { try? FileManager.default.removeItem(at: directory) }
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let notify = try NotifySocket(directory: directory)
        let listener = try ListenerProcess(arguments: edgeArguments(edge, secretFile: try secretFile(in: directory)),
                                           environment: ["NOTIFY_SOCKET": notify.path])
        #expect(notify.next(timeout: 30) == "READY=1\nSTATUS=listening on 127.0.0.1:\(listener.port) for \(testHost)")
        #expect(try echo("served\n", port: listener.port) == "served\n")
        listener.process.send(signal: SIGTERM)
        #expect(try listener.process.waitForExit(timeout: 30) == 0, "\(listener.process.stderrText)")
        #expect(notify.next(timeout: 5) == "STOPPING=1")
    }

    @Test("SIGHUP (systemd's reload) reads the secret file again: new connections carry the new secret, an open one keeps its tunnel; RELOADING=1 then READY=1")
    func reloadOnSIGHUP() throws {
        let directory = try makeTempDir("cfat-systemd")
        defer { try? FileManager.default.removeItem(at: directory) }
        let echoTarget = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echoTarget.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let notify = try NotifySocket(directory: directory)
        let secret = try secretFile(in: directory)
        let listener = try ListenerProcess(arguments: edgeArguments(edge, secretFile: secret),
                                           environment: ["NOTIFY_SOCKET": notify.path])
        defer { listener.stop() }
        #expect(notify.next(timeout: 30)?.hasPrefix("READY=1") == true)
        let open = try ClientSocket(port: listener.port)
        try open.send(Array("before\n".utf8))
        var back = [UInt8]()
        _ = try open.receive(count: 7) { back += $0 }
        #expect(back == Array("before\n".utf8))

        // The secret on disk is rotated to one Access refuses.
        try "not-the-secret-anymore\n".write(to: secret, atomically: true, encoding: .utf8)
        listener.process.send(signal: SIGHUP)
        #expect(notify.next(timeout: 30) == "RELOADING=1")
        #expect(notify.next(timeout: 30) == "READY=1")
        // The line is written before READY=1 is sent, but this process reads stderr on a thread of its own.
        _ = try listener.process.waitForStderr(containing: "SIGHUP: the service token secret was read again from \(secret.path)",
                                               timeout: 30)
        let refused = try ClientSocket(port: listener.port)
        let (bytes, _) = refused.readToEnd(timeout: 30)
        #expect(bytes.isEmpty)
        _ = try listener.process.waitForStderr(containing: "Cloudflare Access rejected the service token for \(testHost)", timeout: 30)
        // The connection opened before keeps its tunnel.
        try open.send(Array("after\n".utf8))
        back = []
        _ = try open.receive(count: 6) { back += $0 }
        #expect(back == Array("after\n".utf8))

        // Back to the right secret; an unreadable file keeps the current one.
        try "\(testTokenSecret)\n".write(to: secret, atomically: true, encoding: .utf8)
        listener.process.send(signal: SIGHUP)
        #expect(notify.next(timeout: 30) == "RELOADING=1")
        #expect(notify.next(timeout: 30) == "READY=1")
        #expect(try echo("rotated back\n", port: listener.port) == "rotated back\n")
        try FileManager.default.removeItem(at: secret)
        listener.process.send(signal: SIGHUP)
        #expect(notify.next(timeout: 30) == "RELOADING=1")
        #expect(notify.next(timeout: 30) == "READY=1")
        _ = try listener.process.waitForStderr(containing: "SIGHUP: cannot read the service token secret", timeout: 30)
        #expect(try echo("still served\n", port: listener.port) == "still served\n")
        #expect(listener.process.isRunning)
    }

    @Test("a socket handed over on a non-loopback address is refused without --allow-non-loopback (exit 64)")
    func nonLoopbackSocketRefused() throws {
        let launcher = try launcher()
        let port = try freeLoopbackPort()
        let tool = try TestPaths.binary("cf-access-tcp").path
        // Bound on every address by the launcher; the test connects only through loopback.
        let process = try ManagedProcess(URL(fileURLWithPath: launcher),
                                         ["-l", "0.0.0.0:\(port)", tool, "--hostname", testHost,
                                          "--service-token-id", testTokenID, "--service-token-secret", testTokenSecret])
        defer { process.terminate() }
        _ = try process.waitForStderr(containing: "Listening on 0.0.0.0:\(port)", timeout: 30)
        let client = try ClientSocket(port: port)
        _ = client
        #expect(try process.waitForExit(timeout: 30) == 64, "\(process.stderrText)")
        #expect(process.stderrText.contains("cf-access-tcp: the socket handed over (LISTEN_FDS) is bound to 0.0.0.0:\(port), not a loopback address: "
            + "bind it to 127.0.0.1 (ListenStream=127.0.0.1:PORT in the socket unit), or allow a non-loopback address explicitly\n"),
                "\(process.stderrText)")
    }

    @Test("--service-token-secret-file: a missing or empty file, or a secret given twice, is one line and exit 64")
    func secretFileErrors() throws {
        let directory = try makeTempDir("cfat-systemd")
        defer { try? FileManager.default.removeItem(at: directory) }
        let empty = directory.appendingPathComponent("empty")
        try "\n".write(to: empty, atomically: true, encoding: .utf8)
        let base = ["--hostname", testHost, "--service-token-id", testTokenID]
        let cases: [([String], String)] = [
            (["--service-token-secret-file", directory.appendingPathComponent("missing").path],
             "cannot read the service token secret from --service-token-secret-file \(directory.path)/missing: No such file or directory"),
            (["--service-token-secret-file", empty.path], "--service-token-secret-file \(empty.path) is empty"),
            (["--service-token-secret-file", empty.path, "--service-token-secret", "s"],
             "--service-token-secret and --service-token-secret-file were both given"),
        ]
        for (extra, line) in cases {
            let result = try run(try TestPaths.binary("cf-access-tcp"), base + extra, stdin: Data(), timeout: 30)
            #expect(result.status == 64, "\(extra): \(result.stderr)")
            #expect(result.stderr.hasPrefix("cf-access-tcp: \(line)"), "\(extra): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1)
        }
    }
}
