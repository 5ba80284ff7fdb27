import AccessTestSupport
import CFAccessTCP
import Foundation
import Logging
import SystemPackage
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// The byte-stream form of `openStream` (issue 19 §4): async reads of chunks, async writes,
/// half-close, cancellation, and the descriptor as the escape hatch — through the emulator to a
/// real TCP target, and through websockify (a WebSocket server we did not write).
@Suite("TunnelStream: async bytes over the tunnel", .serialized, .ownThreads)
struct TunnelStreamTests {
    private static func options(port: Int, linger: Duration = .seconds(1)) throws -> AccessTunnel.Options {
        AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(port)"), caFile: try certs().caFile.path,
                             connectTimeout: .seconds(60), retry: .never, halfCloseLinger: linger)
    }

    private static var serviceToken: AuthenticationMethod {
        get throws { .serviceToken(try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)) }
    }

    /// Reads every chunk until the stream finishes.
    private static func readAll(_ stream: TunnelStream) async throws(TunnelFailure) -> [UInt8] {
        var all: [UInt8] = []
        for try await chunk in stream.inbound { all += chunk }
        return all
    }

    @Test("write, half-close, read: the reply sent after finishWriting still arrives, then inbound finishes cleanly")
    func halfCloseThenReadToTheEnd() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        try await stream.write(Array("request\n".utf8))
        stream.finishWriting()
        let reply = try await Self.readAll(stream)
        #expect(String(decoding: reply, as: UTF8.self) == "request\n")
        let end = await stream.ended
        #expect(end.isClean, "\(end)")
        await tunnel.disconnect()
    }

    @Test("4 MiB each way at once: writes wait while the tunnel is full, every byte arrives in order")
    func largeTransferBothWays() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        let payload = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 12) }
        let writer = Task {
            for start in stride(from: 0, to: payload.count, by: 100_000) {
                try await stream.write(payload[start..<min(start + 100_000, payload.count)])
            }
        }
        var received: [UInt8] = []
        received.reserveCapacity(payload.count)
        while received.count < payload.count, let chunk = try await stream.read() {
            #expect(chunk.count <= TunnelStream.defaultChunkSize)
            received += chunk
        }
        try await writer.value
        #expect(received.count == payload.count)
        #expect(received == payload)
        stream.close()
        await tunnel.disconnect()
    }

    @Test("a tunnel the edge drops mid-stream: inbound throws connection-lost, not a clean end")
    func droppedTunnelThrows() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        try await stream.write(Array("ping\n".utf8))
        #expect(try await stream.read() == Array("ping\n".utf8))
        #expect(try await offPool { try edge.admin("drop-tunnels") } == "dropped 1 tunnels\n")
        do throws(TunnelFailure) {
            let rest = try await Self.readAll(stream)
            Issue.record("inbound finished cleanly with \(rest.count) bytes after the edge dropped the tunnel")
        } catch {
            #expect(error.kind == .connectionLost, "\(error)")
            #expect(error.message.contains("mid-stream"), "\(error.message)")
        }
        await tunnel.disconnect()
    }

    @Test("cancelling a read in progress throws cancelled at once; the stream still works afterwards")
    func cancelledRead() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        let reader = Task { () -> TunnelFailure? in
            do throws(TunnelFailure) {
                _ = try await stream.read()
                return nil
            } catch {
                return error
            }
        }
        // The read waits: nothing was sent, so nothing comes back.
        try await Task.sleep(for: .milliseconds(200))
        reader.cancel()
        let failure = await reader.value
        #expect(failure?.kind == .cancelled, "\(String(describing: failure))")
        try await stream.write(Array("still open\n".utf8))
        var back: [UInt8] = []
        while back.count < 11, let chunk = try await stream.read() { back += chunk }
        #expect(back == Array("still open\n".utf8))
        await tunnel.disconnect()
    }

    @Test("close() during a read ends it with invalid-state; later calls say the stream is closed")
    func closeDuringRead() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        let reader = Task { () -> TunnelFailure? in
            do throws(TunnelFailure) {
                _ = try await stream.read()
                return nil
            } catch {
                return error
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        stream.close()
        let failure = await reader.value
        #expect(failure?.kind == .invalidState, "\(String(describing: failure))")
        await #expect(throws: TunnelFailure.self) { try await stream.write([1]) }
        // The carrier sees the close as the local side's end: a clean Close.
        #expect(await stream.ended.isClean)
        await tunnel.disconnect()
    }

    @Test("the escape hatch: a released descriptor is a plain connected socket; the stream's own methods refuse")
    func releasedDescriptor() async throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let tunnel = AccessTunnel(options: try Self.options(port: edge.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: try Self.serviceToken)
        let descriptor: FileDescriptor = stream.releaseFileDescriptor()
        #expect(descriptor == stream.fileDescriptor)
        do throws(TunnelFailure) {
            _ = try await stream.read()
            Issue.record("read worked on a stream whose descriptor was handed over")
        } catch {
            #expect(error.kind == .invalidState)
        }
        let back = try await offPool { () -> [UInt8] in
            let message = Array("raw socket\n".utf8)
            _ = try message.withUnsafeBytes { try descriptor.writeAll($0) }
            var back = [UInt8](repeating: 0, count: message.count)
            var got = 0
            while got < message.count {
                let n = try back.withUnsafeMutableBytes { try descriptor.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[got...])) }
                if n == 0 { break }
                got += n
            }
            try descriptor.close()
            return Array(back[..<got])
        }
        #expect(back == Array("raw socket\n".utf8))
        #expect(await stream.ended.isClean)
        await tunnel.disconnect()
    }

    @Test("through websockify (no Access, no credential): async write and read reach the target")
    func throughWebsockify() async throws {
        let echo = try TargetFixture(.echo)
        let websockify = try WebsockifyFixture(target: echo.address)
        let tunnel = AccessTunnel(options: try Self.options(port: websockify.port), logger: quiet)
        let stream = try await tunnel.openStream(hostname: testHost, method: .none)
        try await stream.write(Array("via websockify\n".utf8))
        var back: [UInt8] = []
        while back.count < 15, let chunk = try await stream.read() { back += chunk }
        #expect(back == Array("via websockify\n".utf8))
        stream.close()
        await tunnel.disconnect()
    }
}
