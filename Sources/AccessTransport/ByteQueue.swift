/// A FIFO of bytes with O(1) amortised append and consume, used for the two directions of a bridge.
///
/// Storage grows to the bridge's high watermark at most (flow control pauses the producer), so a
/// queue never holds more than a bounded amount. Consumed bytes are reclaimed lazily: when the
/// queue drains completely (its storage is then released), or when the dead prefix becomes larger
/// than the live part. On the data path a queue is only used for what a socket did not take at once.
struct ByteQueue {
    private var storage: [UInt8] = []
    private var head = 0

    /// Bytes waiting to be consumed.
    var count: Int { storage.count - head }
    var isEmpty: Bool { head == storage.count }
    /// Bytes of storage held, consumed ones not yet reclaimed included (what the queue costs).
    var retainedBytes: Int { storage.count }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        storage.append(contentsOf: bytes)
    }

    /// Calls `body` with up to `limit` of the oldest bytes; `body` returns how many it took.
    mutating func consume(upTo limit: Int, _ body: (UnsafeRawBufferPointer) -> Int) -> Int {
        let n = Swift.min(limit, count)
        guard n > 0 else { return 0 }
        let taken = storage.withUnsafeBytes { raw in
            body(UnsafeRawBufferPointer(rebasing: raw[head..<(head + n)]))
        }
        precondition(taken >= 0 && taken <= n, "consumer took more than it was offered")
        head += taken
        if head == storage.count {
            // Drained: give the memory back, so an idle connection after a burst holds nothing.
            storage = []
            head = 0
        } else if head > 64 << 10 && head > count {
            storage.removeSubrange(0..<head)
            head = 0
        }
        return taken
    }

    /// Drops everything and releases the memory.
    mutating func reset() {
        storage = []
        head = 0
    }
}
