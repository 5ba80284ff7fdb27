/// The pending deadlines of a carrier's bridges, earliest first (a binary min-heap): one timer
/// serves them all, and a bridge that moves its deadline pushes a new entry with a newer
/// generation instead of searching for the old one, which is skipped when it comes up.
struct DeadlineHeap {
    /// One bridge's deadline.
    struct Entry: Equatable {
        /// Monotonic nanoseconds.
        var deadline: UInt64
        /// The bridge.
        var id: Int
        /// The bridge's timer generation when it asked (older ones are stale).
        var generation: Int
    }

    private var entries: [Entry] = []

    /// The earliest entry.
    var first: Entry? { entries.first }
    /// How many entries, stale ones included.
    var count: Int { entries.count }

    mutating func push(_ entry: Entry) {
        entries.append(entry)
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes the earliest entry.
    mutating func removeFirst() {
        guard !entries.isEmpty else { return }
        entries.swapAt(0, entries.count - 1)
        entries.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
