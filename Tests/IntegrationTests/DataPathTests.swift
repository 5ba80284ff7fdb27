import AccessCore
import AccessTransport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Bytes through the listener: integrity, concurrency, flow control and prompt closing.
@Suite("data path", .serialized, .ownThreads)
struct DataPathTests {
    /// Sends `payload` and reads as many bytes back at the same time; returns the SHA-256 of what came back.
    private func echoRoundTrip(port: Int, payload: [UInt8]) throws -> (received: Int, sha256: String) {
        let client = try ClientSocket(port: port)
        let sendError = LockedBox<Error?>(nil)
        let sent = DispatchSemaphore(value: 0)
        let sender = Thread {
            do { try client.send(payload) } catch { sendError.withLock { $0 = error } }
            sent.signal()
        }
        sender.start()
        let digest = Digest.SHA256Stream()
        let received = try client.receive(count: payload.count) { digest.update($0) }
        sent.wait()
        if let error = sendError.withLock({ $0 }) { throw error }
        return (received, digest.finalizeHex())
    }

    @Test("64 MiB of random bytes round-trip both ways at once, unchanged")
    func bulkEcho() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let payload = try randomBytes(64 << 20)
        let result = try echoRoundTrip(port: listener.port, payload: payload)
        #expect(result.received == payload.count)
        #expect(result.sha256 == Digest.sha256Hex(payload))
        let stats = try edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }
        #expect(stats.bytesIn == payload.count)
        #expect(stats.bytesOut == payload.count)
    }

    @Test("50 concurrent connections each round-trip 1 MiB unchanged")
    func concurrentEcho() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let count = 50
        let outcomes = LockedBox<[Int: String]>([:])
        let group = DispatchGroup()
        for index in 0..<count {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                do {
                    let payload = try randomBytes(1 << 20)
                    let result = try echoRoundTrip(port: listener.port, payload: payload)
                    let ok = result.received == payload.count && result.sha256 == Digest.sha256Hex(payload)
                    outcomes.withLock { $0[index] = ok ? "ok" : "mismatch: \(result.received) bytes" }
                } catch {
                    outcomes.withLock { $0[index] = "error: \(error)" }
                }
            }
            thread.start()
        }
        #expect(group.wait(timeout: .now() + 300) == .success, "connections did not finish in 300 s")
        let results = outcomes.withLock { $0 }
        #expect(results.count == count)
        #expect(results.values.allSatisfy { $0 == "ok" }, "\(results.filter { $0.value != "ok" })")
        // One WebSocket per connection, plus the start-up probe.
        try edge.waitForStats(host: testHost) { $0.upgradesAccepted == count + 1 && $0.activeTunnels == 0 }
    }

    @Test("a client that does not read pauses the origin: memory stays bounded, then everything arrives")
    func flowControlBoundsMemory() throws {
        let source = try TargetFixture(.source, bytes: 256 << 20)
        let edge = try EdgeFixture(certs: try certs(), target: source.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        let before = residentKiB(pid: listener.process.pid) ?? 0
        Thread.sleep(forTimeInterval: 3)   // not reading: the source pushes as hard as it can meanwhile
        let during = try #require(residentKiB(pid: listener.process.pid))
        #expect(during - before < 32 << 10, "cf-access-tcp grew by \(during - before) KiB while the client did not read")
        let received = try client.receive(count: 256 << 20) { _ in }
        #expect(received == 256 << 20)
        #expect(client.waitForEOF(timeout: 10), "the source finished but the local connection stayed open")
    }

    @Test("an edge that sends a burst in frames of 1 byte to 64 KiB and then falls silent: after the local side paused it, every byte arrives", arguments: [0, 40, 60])
    func burstThenSilence(round: Int) throws {
        // Python's TLS (an independent peer): frames of 1 byte to 64 KiB, then no Close and no
        // byte more, so nothing on the socket announces bytes the bridge received and left
        // unread when it paused (parked in its RecordSource queue, read when it resumes).
        let total = (1 << 20) + round * (96 << 10) + 4321
        let edge = try HostileEdge(mode: "burst-hold", extra: ["--burst-bytes", String(total)])
        let listener = try ListenerProcess(arguments: try edge.clientArguments())
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        _ = setsockopt(client.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // A small receive buffer, and no read until the edge has sent everything: the local
        // socket fills, the bridge pauses its reads of the edge, and the last bytes wait in the
        // edge socket and in OpenSSL's read-ahead buffer, with nothing more to come.
        var small: Int32 = 64 << 10
        _ = setsockopt(client.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        _ = try edge.waitForEvent { $0 == "burst-sent \(total)" }
        Thread.sleep(forTimeInterval: 0.3)
        var offset = 0
        var corrupt: Int?
        let received = try client.receive(count: total) { chunk in
            for (index, byte) in chunk.enumerated() where corrupt == nil && Int(byte) != (offset + index) % 251 {
                corrupt = offset + index
            }
            offset += chunk.count
        }
        #expect(received == total, "\(received) of \(total) bytes arrived")
        #expect(corrupt == nil, "byte \(corrupt ?? 0) differs from the pattern")
    }

    @Test("two downloads on one carrier thread: one paused with received bytes left in the loop's buffer while the other reads; both get every byte in order")
    func pausedBytesSurviveAnotherBridge() throws {
        let size = 24 << 20
        let source = try TargetFixture(.source, bytes: size)
        let edge = try EdgeFixture(certs: try certs(), target: source.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--threads", "1"]))
        defer { listener.stop() }
        // The first connection does not read: its bridge pauses, often with bytes it received and
        // had not decrypted yet still in the loop's shared receive buffer.
        let paused = try ClientSocket(port: listener.port)
        var small: Int32 = 64 << 10
        _ = setsockopt(paused.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        Thread.sleep(forTimeInterval: 1.5)
        // The second reads everything at once, through the same loop and buffer.
        func checked(_ client: ClientSocket) throws -> (count: Int, corrupt: Int?) {
            var offset = 0
            var corrupt: Int?
            let count = try client.receive(count: size) { chunk in
                for (index, byte) in chunk.enumerated() where corrupt == nil && Int(byte) != (offset + index) % 251 {
                    corrupt = offset + index
                }
                offset += chunk.count
            }
            return (count, corrupt)
        }
        let other = try checked(try ClientSocket(port: listener.port))
        #expect(other.count == size && other.corrupt == nil, "\(other)")
        let first = try checked(paused)
        #expect(first.count == size && first.corrupt == nil, "\(first)")
    }

    @Test("an origin that does not read pauses the client: memory stays bounded, the sender is held back")
    func flowControlTowardsOrigin() throws {
        // A target that accepts and never reads.
        let stalled = try LoopbackListener(address: try ListenAddress.parse("127.0.0.1:0", allowNonLoopback: false))
        let held = LockedBox<[Int32]>([])
        stalled.startAccepting { fd in held.withLock { $0.append(fd) } }
        defer {
            stalled.close()
            held.withLock { $0.forEach { close($0) } }
        }
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(stalled.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        let before = residentKiB(pid: listener.process.pid) ?? 0
        var timeout = timeval(tv_sec: 3, tv_usec: 0)   // a blocked send gives up after 3 s
        _ = setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
        var sent = 0
        while sent < 512 << 20 {
            let n = chunk.withUnsafeBytes { send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            sent += n
        }
        let during = try #require(residentKiB(pid: listener.process.pid))
        #expect(sent < 256 << 20, "\(sent >> 20) MiB went out although the origin reads nothing")
        #expect(during - before < 32 << 10, "cf-access-tcp grew by \(during - before) KiB while the origin did not read")
    }

    @Test("when the origin side ends, the local connection is closed after the last byte")
    func originEndClosesLocal() throws {
        let source = try TargetFixture(.source, bytes: 1 << 20)
        let edge = try EdgeFixture(certs: try certs(), target: source.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let client = try ClientSocket(port: listener.port)
        let received = try client.receive(count: 1 << 20) { _ in }
        #expect(received == 1 << 20)
        #expect(client.waitForEOF(timeout: 10))
    }

    @Test("when the local side ends, the WebSocket gets a Close frame and the edge side closes")
    func localEndClosesWebSocket() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge))
        defer { listener.stop() }
        let baseline = try edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }   // after the start-up probe
        do {
            let client = try ClientSocket(port: listener.port)
            try client.send(Array("ping".utf8))
            var back: [UInt8] = []
            _ = try client.receive(count: 4) { back += $0 }
            #expect(back == Array("ping".utf8))
            try edge.waitForStats(host: testHost) { $0.activeTunnels == 1 }
        }
        let stats = try edge.waitForStats(host: testHost) { $0.activeTunnels == 0 }
        #expect(stats.closeFramesReceived == baseline.closeFramesReceived + 1)
    }
}
