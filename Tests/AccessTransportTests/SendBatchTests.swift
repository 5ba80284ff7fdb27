@testable import AccessTransport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The frame payloads gathered for one `sendmsg()` towards the local socket (issue 27 point 1):
/// a real non-blocking socket pair with a small buffer, so sending stops inside a range.
@Suite("SendBatch")
struct SendBatchTests {
    /// A connected pair of non-blocking Unix stream sockets, the sending side's buffer small.
    private func socketPair() throws -> (send: Int32, receive: Int32) {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        var small: Int32 = 4096
        _ = setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        _ = setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return (fds[0], fds[1])
    }

    /// Everything readable from `fd` now.
    private func drainSocket(_ fd: Int32) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return out }
            out += buffer[..<n]
        }
    }

    /// Expects `got` to be `want`, with a short message (counts and the first difference) instead
    /// of both arrays.
    private func expectSameBytes(_ got: [UInt8], _ want: [UInt8], _ what: String,
                                 sourceLocation: SourceLocation = #_sourceLocation) {
        let same = got == want
        let firstDifference = zip(got, want).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            ?? min(got.count, want.count)
        #expect(same, "\(what): \(got.count) of \(want.count) bytes, first difference at \(firstDifference)",
                sourceLocation: sourceLocation)
    }

    /// Ranges of varied sizes (1 byte to 40 KiB) over one buffer, as frame payloads are.
    private let sizes = [1, 700, 40_000, 3, 12_345, 9, 30_000]

    private func pattern() -> [UInt8] {
        (0..<sizes.reduce(0, +)).map { UInt8(truncatingIfNeeded: $0 % 251) }
    }

    private func fill(_ batch: SendBatch, from all: UnsafeRawBufferPointer) {
        var offset = 0
        for size in sizes {
            batch.append(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + size)]))
            offset += size
        }
    }

    @Test("sent again and again into a small socket buffer, the ranges arrive whole and in order (sends stop inside ranges)")
    func partialSendsKeepOrder() throws {
        let (sender, receiver) = try socketPair()
        defer { close(sender); close(receiver) }
        let source = pattern()
        let batch = SendBatch()
        var received: [UInt8] = []
        var fullTimes = 0
        source.withUnsafeBytes { all in
            fill(batch, from: all)
            #expect(batch.count == sizes.count)
            for _ in 0..<10_000 {
                switch batch.send(to: sender) {
                case .all: return
                case .full: fullTimes += 1
                case .failed(let error): Issue.record("send failed: \(error)"); return
                }
                received += drainSocket(receiver)
            }
        }
        received += drainSocket(receiver)
        #expect(fullTimes > 1, "the socket never filled twice: the test did not reach partial sends")
        #expect(batch.isEmpty)
        expectSameBytes(received, source, "what arrived")
    }

    @Test("when the socket is full, drain hands on the rest from the first unsent byte, in order")
    func drainAfterFull() throws {
        let (sender, receiver) = try socketPair()
        defer { close(sender); close(receiver) }
        let source = pattern()
        let batch = SendBatch()
        var rest: [UInt8] = []
        source.withUnsafeBytes { all in
            fill(batch, from: all)
            guard case .full = batch.send(to: sender) else { Issue.record("the socket took everything"); return }
            batch.drain { rest += $0 }
        }
        #expect(batch.isEmpty)
        let sent = drainSocket(receiver)
        #expect(!sent.isEmpty && !rest.isEmpty)
        expectSameBytes(sent + rest, source, "sent (\(sent.count)) and drained (\(rest.count))")
    }

    @Test("a batch sent whole is empty and reusable; empty ranges are not added")
    func reuse() throws {
        let (sender, receiver) = try socketPair()
        defer { close(sender); close(receiver) }
        let batch = SendBatch()
        let bytes: [UInt8] = [1, 2, 3, 4]
        bytes.withUnsafeBytes { all in
            batch.append(UnsafeRawBufferPointer(rebasing: all[0..<0]))
            #expect(batch.isEmpty)
            batch.append(UnsafeRawBufferPointer(rebasing: all[0..<2]))
            batch.append(UnsafeRawBufferPointer(rebasing: all[2..<4]))
            guard case .all = batch.send(to: sender) else { Issue.record("not sent whole"); return }
            #expect(batch.isEmpty && batch.count == 0)
            for _ in 0..<SendBatch.capacity { batch.append(UnsafeRawBufferPointer(rebasing: all[0..<1])) }
            #expect(batch.isFull)
            guard case .all = batch.send(to: sender) else { Issue.record("not sent whole"); return }
        }
        #expect(drainSocket(receiver) == [1, 2, 3, 4] + [UInt8](repeating: 1, count: SendBatch.capacity))
    }

    @Test("a socket whose peer is gone fails the send with its error, and the ranges stay")
    func failure() throws {
        let (sender, receiver) = try socketPair()
        close(receiver)
        defer { close(sender) }
        let batch = SendBatch()
        let bytes: [UInt8] = [9, 9, 9]
        bytes.withUnsafeBytes { all in
            batch.append(all)
            guard case .failed(let error) = batch.send(to: sender) else { Issue.record("expected a failure"); return }
            #expect(error.code == EPIPE)
            #expect(!batch.isEmpty)
        }
    }
}
