@testable import AccessTransport
import Testing

/// The FIFO of each bridge direction (issue 13.5): order, partial takes, limits and memory.
@Suite("ByteQueue")
struct ByteQueueTests {
    private func append(_ queue: inout ByteQueue, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { queue.append($0) }
    }

    /// Takes up to `limit` bytes, at most `take` of those offered.
    private func take(_ queue: inout ByteQueue, limit: Int = .max, take: Int = .max) -> [UInt8] {
        var got: [UInt8] = []
        _ = queue.consume(upTo: limit) { offered in
            let n = min(take, offered.count)
            got = Array(offered.prefix(n))
            return n
        }
        return got
    }

    @Test("bytes come out in the order they went in, across appends and partial takes")
    func order() {
        var queue = ByteQueue()
        append(&queue, [1, 2, 3])
        append(&queue, [4, 5])
        #expect(queue.count == 5)
        #expect(take(&queue, take: 2) == [1, 2])
        append(&queue, [6])
        #expect(take(&queue, limit: 3) == [3, 4, 5])
        #expect(take(&queue) == [6])
        #expect(queue.isEmpty)
    }

    @Test("an empty queue offers nothing and does not call the consumer; empty appends change nothing")
    func empty() {
        var queue = ByteQueue()
        append(&queue, [])
        var called = false
        let taken = queue.consume(upTo: 100) { _ in called = true; return 0 }
        #expect(taken == 0 && !called)
        #expect(queue.isEmpty && queue.count == 0)
        append(&queue, [9])
        #expect(queue.consume(upTo: 0) { _ in called = true; return 0 } == 0)
        #expect(!called)
    }

    @Test("a consumer that takes nothing leaves everything queued")
    func takesNothing() {
        var queue = ByteQueue()
        append(&queue, [7, 8, 9])
        #expect(take(&queue, take: 0) == [])
        #expect(queue.count == 3)
        #expect(take(&queue) == [7, 8, 9])
    }

    @Test("a drained queue gives its memory back; reset drops everything")
    func memoryReleased() {
        var queue = ByteQueue()
        append(&queue, Array(repeating: 1, count: 100_000))
        #expect(queue.retainedBytes == 100_000)
        _ = take(&queue, take: 99_999)
        #expect(queue.count == 1)
        _ = take(&queue)
        #expect(queue.isEmpty && queue.retainedBytes == 0)
        append(&queue, [1, 2])
        queue.reset()
        #expect(queue.isEmpty && queue.retainedBytes == 0)
    }

    @Test("a consumed prefix larger than 64 KiB and than what remains is reclaimed; a small one is not")
    func prefixReclaimed() {
        var queue = ByteQueue()
        let data = (0..<200_000).map { UInt8(truncatingIfNeeded: $0) }
        append(&queue, data)
        _ = take(&queue, take: 1_000)
        #expect(queue.retainedBytes == 200_000, "a 1 KB prefix stays until it is worth moving")
        _ = take(&queue, take: 120_000)
        #expect(queue.retainedBytes == queue.count, "the 121 KB prefix was reclaimed")
        #expect(take(&queue) == Array(data[121_000...]))
    }

    @Test("large amounts keep their order through many small takes")
    func large() {
        var queue = ByteQueue()
        var expected: [UInt8] = []
        var received: [UInt8] = []
        for round in 0..<50 {
            let chunk = (0..<(round * 997 % 5000 + 1)).map { UInt8(truncatingIfNeeded: $0 &+ round) }
            expected += chunk
            append(&queue, chunk)
            received += take(&queue, limit: 1_500, take: 1_200)
        }
        while !queue.isEmpty { received += take(&queue, limit: 4096) }
        #expect(received == expected)
    }
}
