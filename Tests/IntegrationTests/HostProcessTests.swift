import AccessCore
import CCFLibSSH
import CCFOpenSSL
import CFAccessSSH
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A no-op SIGPIPE handler: behaves like SIG_IGN for the other suites of this process (a write to
/// a closed socket still fails with EPIPE), but tells whether someone replaced it.
private func sigpipeMarker(_: Int32) {}

/// One HTTPS GET with plain OpenSSL (blocking socket, `SSL_connect`, `SSL_write`, `SSL_read`),
/// as any other part of an app would make it: the emulator's stats page for `testHost`, verified
/// with the test CA. Returns the whole answer.
private func httpsGetWithOpenSSL(port: Int, caFile: String, path: String) throws -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw FixtureError("socket(): \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else { throw FixtureError("connect(): \(errno)") }
    guard let context = SSL_CTX_new(TLS_client_method()) else { throw FixtureError("SSL_CTX_new") }
    defer { SSL_CTX_free(context) }
    guard SSL_CTX_load_verify_locations(context, caFile, nil) == 1 else { throw FixtureError("CA file") }
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
    guard let ssl = SSL_new(context) else { throw FixtureError("SSL_new") }
    defer { SSL_free(ssl) }
    _ = SSL_set_fd(ssl, fd)
    _ = SSL_set1_host(ssl, testHost)
    _ = testHost.withCString { SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, Int(TLSEXT_NAMETYPE_host_name), UnsafeMutableRawPointer(mutating: $0)) }
    guard SSL_connect(ssl) == 1 else { throw FixtureError("SSL_connect failed: verify result \(SSL_get_verify_result(ssl))") }
    let request = Array("GET \(path) HTTP/1.1\r\nHost: \(testHost)\r\nConnection: close\r\n\r\n".utf8)
    guard SSL_write(ssl, request, Int32(request.count)) == Int32(request.count) else { throw FixtureError("SSL_write") }
    var answer: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        // This process's own SSL_read: OpenSSL's, untouched by the library.
        let n = buffer.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
        if n <= 0 { break }
        answer += buffer[..<Int(n)]
    }
    return String(decoding: answer, as: UTF8.self)
}

/// Issue 19.2: the library leaves the host process alone. It defines no symbol of another library
/// (before: `SSL_read` for the whole process) and changes no process-wide state.
@Suite("the library in a host process", .serialized, .ownThreads)
struct HostProcessTests {
    /// A quiet tunnel through `edge` with the test service token, and one stream on it.
    private func openStream(through edge: EdgeFixture) async throws -> (AccessTunnel, TunnelStream) {
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: edge.certs.caFile.path, connectTimeout: .seconds(60), retry: .never)
        let tunnel = AccessTunnel(options: options, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        return (tunnel, try await tunnel.openStream(hostname: testHost, method: .serviceToken(token)))
    }

    @Test("the process's SSL_read is OpenSSL's, and its own HTTPS request works while a tunnel carries bytes")
    func ownOpenSSLBesideATunnel() async throws {
        // What the dynamic linker gives this process for SSL_read is libssl's own definition.
        let libssl = dlopen("libssl.so.3", RTLD_NOW | RTLD_NOLOAD)
        #expect(libssl != nil)
        let process = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "SSL_read")   // RTLD_DEFAULT
        #expect(process != nil && process == dlsym(libssl, "SSL_read"),
                "SSL_read of this process is not OpenSSL's: something interposes it")

        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let (tunnel, stream) = try await openStream(through: edge)
        let fd = stream.fileDescriptor.rawValue
        let caFile = edge.certs.caFile.path
        let port = edge.port
        let (first, page, second) = try await offPool { () throws -> (String, String, String) in
            // A peer that closes early must fail this test, not kill the test process: this thread
            // (made by offPool for this work) blocks SIGPIPE, as an app doing its own I/O might.
            var pipeSignal = sigset_t()
            sigemptyset(&pipeSignal)
            sigaddset(&pipeSignal, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &pipeSignal, nil)
            func roundTrip(_ text: String) -> String {
                let bytes = Array(text.utf8)
                guard send(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { return "" }
                var back = [UInt8](repeating: 0, count: bytes.count)
                var got = 0
                while got < bytes.count {
                    let n = back.withUnsafeMutableBytes { read(fd, $0.baseAddress! + got, bytes.count - got) }
                    guard n > 0 else { break }
                    got += n
                }
                return String(decoding: back[..<got], as: UTF8.self)
            }
            let first = roundTrip("before the app's own HTTPS request\n")
            let page = try httpsGetWithOpenSSL(port: port, caFile: caFile, path: "/cdn-cgi/edge/stats")
            let second = roundTrip("after it\n")
            return (first, page, second)
        }
        #expect(first == "before the app's own HTTPS request\n")
        #expect(page.hasPrefix("HTTP/1.1 200"), "\(page.prefix(200))")
        #expect(page.contains("\"upgrades\"") || page.contains("{"), "\(page.prefix(400))")
        #expect(second == "after it\n")
        stream.close()
        await tunnel.disconnect()
    }

    @Test("SIGPIPE's disposition is the host's after a tunnel started (the carrier only blocks it in its own thread)")
    func signalDispositionKept() async throws {
        var marker = sigaction()
        marker.__sigaction_handler.sa_handler = sigpipeMarker
        sigemptyset(&marker.sa_mask)
        var original = sigaction()
        #expect(sigaction(SIGPIPE, &marker, &original) == 0)
        defer { _ = sigaction(SIGPIPE, &original, nil) }

        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let (tunnel, stream) = try await openStream(through: edge)
        var now = sigaction()
        #expect(sigaction(SIGPIPE, nil, &now) == 0)
        let handler = unsafeBitCast(now.__sigaction_handler.sa_handler, to: Int.self)
        #expect(handler == unsafeBitCast(sigpipeMarker as @convention(c) (Int32) -> Void, to: Int.self),
                "the tunnel replaced the process's SIGPIPE handler")
        stream.close()
        await tunnel.disconnect()
    }

    @Test("libssh's log level on the host's thread is the host's after an SSHSession was made there (libssh 0.10 makes a session's verbosity the level of the thread that sets it)")
    func libsshLogLevelKept() async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let (tunnel, stream) = try await openStream(through: edge)
        // No await from here to the check: libssh's log level is per thread.
        let before = ssh_get_log_level()
        _ = ssh_set_log_level(SSH_LOG_WARN)
        let ssh = try SSHSession(stream: stream, configuration: .init(hostKeyDelegate: AcceptAnyHostKey()))
        let after = ssh_get_log_level()
        _ = ssh_set_log_level(before)
        #expect(after == SSH_LOG_WARN, "making an SSHSession changed libssh's log level of the host's thread")
        try await ssh.handshake()
        try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
        let result = try await ssh.exec("echo host-process")
        #expect(result.exitStatus == 0)
        await ssh.disconnect()
        await tunnel.disconnect()
    }
}
