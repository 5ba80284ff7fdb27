import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The hostname the tests use for the Access application; the test CA signs it and every dial
/// reaches the emulator through `--connect-to`, so TLS verification is real.
let testHost = "ssh.cfat.test"
let testTokenID = "cfat-test-client.access"
let testTokenSecret = "s3cr3t-cfat-service-token-0123456789abcdef"

/// Certificates are made once per test process; every test starts its own processes.
let sharedCerts: Result<CertSet, Error> = Result { try EdgeFixture.makeCerts(hosts: [testHost, "other.cfat.test"]) }

func certs() throws -> CertSet { try sharedCerts.get() }

/// The `cf-access-tcp` arguments that reach `edge` for `testHost`.
func clientArguments(edge: EdgeFixture, host: String = testHost, token: (String, String)? = (testTokenID, testTokenSecret),
                     extra: [String] = []) throws -> [String] {
    var args = ["--hostname", host, "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path]
    if let token { args += ["--service-token-id", token.0, "--service-token-secret", token.1] }
    return args + extra
}

/// The ProxyCommand line for ssh (`%h` is the host alias ssh was given).
func proxyCommand(edge: EdgeFixture, extra: String = "") throws -> String {
    let bin = try TestPaths.binary("cf-access-tcp").path
    return "\(bin) --hostname %h --connect-to 127.0.0.1:\(edge.port) --ca-file \(edge.certs.caFile.path) "
        + "--service-token-id \(testTokenID) --service-token-secret \(testTokenSecret) \(extra)"
}

/// A running `cf-access-tcp --url 127.0.0.1:0` and the port it bound.
final class ListenerProcess: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int

    init(arguments: [String], environment: [String: String] = [:]) throws {
        process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments + ["--url", "127.0.0.1:0"],
                                     environment: environment)
        let line = try process.waitForStderr(containing: "listening on 127.0.0.1:", timeout: 30)
        guard let range = line.range(of: "listening on 127.0.0.1:") else { throw FixtureError("no port in: \(line)") }
        let digits = line[range.upperBound...].prefix { $0.isNumber }
        guard let port = Int(digits) else { throw FixtureError("no port in: \(line)") }
        self.port = port
    }

    func stop() { process.terminate() }
}

/// A blocking TCP client socket to 127.0.0.1.
final class ClientSocket: @unchecked Sendable {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FixtureError("socket(): \(errno)") }
        var sa = sockaddr_in()
        sa.sin_family = sa_family_t(AF_INET)
        sa.sin_port = in_port_t(UInt16(port).bigEndian)
        sa.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &sa) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { close(fd); throw FixtureError("connect to 127.0.0.1:\(port) failed: errno \(errno)") }
        var tv = timeval(tv_sec: 60, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, min(1 << 20, bytes.count - offset), Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw FixtureError("send failed after \(offset) bytes: errno \(errno)") }
            offset += n
        }
    }

    /// Reads exactly `count` bytes (or fewer if the peer closes first), feeding each chunk to `sink`.
    func receive(count: Int, _ sink: (UnsafeRawBufferPointer) -> Void) throws -> Int {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var total = 0
        while total < count {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, min($0.count, count - total), 0) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw FixtureError("recv failed after \(total) bytes: errno \(errno)") }
            if n == 0 { break }
            buffer.withUnsafeBytes { sink(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            total += n
        }
        return total
    }

    /// Reads until the stream ends (bounded by `timeout` seconds): the bytes, and how it ended —
    /// 0 for a clean EOF (FIN), else the errno of the failed read (ECONNRESET for a reset,
    /// EAGAIN when the time ran out).
    func readToEnd(timeout: Int) -> (bytes: [UInt8], end: Int32) {
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                bytes += buffer[0..<n]
                continue
            }
            if n == 0 { return (bytes, 0) }
            if errno == EINTR { continue }
            return (bytes, errno)
        }
    }

    /// Waits (bounded) for the peer to close; true on EOF.
    func waitForEOF(timeout: Int) -> Bool {
        var tv = timeval(tv_sec: timeout, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return errno == ECONNRESET }
        }
    }
}

/// Sends `text` on a new connection to 127.0.0.1:`port` and returns as many bytes as came back
/// (an echo target behind the tunnel sends them all).
func echo(_ text: String, port: Int) throws -> String {
    let client = try ClientSocket(port: port)
    try client.send(Array(text.utf8))
    var back = [UInt8]()
    _ = try client.receive(count: text.utf8.count) { back += $0 }
    return String(decoding: back, as: UTF8.self)
}

/// `count` random bytes from the kernel.
func randomBytes(_ count: Int) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    let fd = open("/dev/urandom", O_RDONLY)
    guard fd >= 0 else { throw FixtureError("cannot open /dev/urandom") }
    defer { close(fd) }
    var offset = 0
    while offset < count {
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + offset, count - offset) }
        guard n > 0 else { throw FixtureError("read /dev/urandom failed") }
        offset += n
    }
    return bytes
}

/// Resident set size of a process in KiB, from /proc.
func residentKiB(pid: pid_t) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ").dropFirst().first ?? "")
    }
    return nil
}

/// A real HTTP CONNECT proxy (tinyproxy) on 127.0.0.1, logging each CONNECT.
final class ProxyFixture: @unchecked Sendable {
    let port: Int
    let logFile: URL
    private let directory: URL
    private let process: ManagedProcess

    /// - Parameter connectPort: allow CONNECT to this port only (tinyproxy answers others 403).
    init(connectPort: Int? = nil) throws {
        let tinyproxy = which("tinyproxy")
        try requireRealPart(tinyproxy != nil, "tinyproxy (package tinyproxy)")
        directory = try makeTempDir("cfat-proxy")
        port = try freeLoopbackPort()
        logFile = directory.appendingPathComponent("proxy.log")
        let config = directory.appendingPathComponent("tinyproxy.conf")
        try """
        Port \(port)
        Listen 127.0.0.1
        Timeout 60
        Allow 127.0.0.1
        LogLevel Connect
        LogFile "\(logFile.path)"
        MaxClients 50
        \(connectPort.map { "ConnectPort \($0)" } ?? "")
        """.write(to: config, atomically: true, encoding: .utf8)
        process = try ManagedProcess(URL(fileURLWithPath: tinyproxy!), ["-d", "-c", config.path])
        let deadline = Date(timeIntervalSinceNow: 10)
        while !loopbackPortAccepts(port) {
            guard Date() < deadline, process.isRunning else {
                throw FixtureError("tinyproxy did not start: \(process.outputReport())")
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }
}
