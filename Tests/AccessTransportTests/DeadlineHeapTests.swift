@testable import AccessTransport
import Testing

/// The carrier's one timer serves every bridge's deadline from this heap (issue 19.2).
@Suite("DeadlineHeap")
struct DeadlineHeapTests {
    @Test("entries come out earliest first, whatever the order they went in")
    func order() {
        var heap = DeadlineHeap()
        var generator = SystemRandomNumberGenerator()
        let deadlines = (0..<500).map { _ in UInt64.random(in: 0...1_000_000, using: &generator) }
        for (i, deadline) in deadlines.enumerated() { heap.push(.init(deadline: deadline, id: i, generation: 0)) }
        #expect(heap.count == 500)
        var out: [UInt64] = []
        while let first = heap.first {
            out.append(first.deadline)
            heap.removeFirst()
        }
        #expect(out == deadlines.sorted())
        heap.removeFirst()   // empty: nothing happens
        #expect(heap.first == nil)
    }
}
