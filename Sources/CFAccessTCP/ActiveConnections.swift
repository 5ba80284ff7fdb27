import AccessTransport

/// The connections a listener holds open, for `maxConcurrentConnections`: local sockets waiting
/// for their bridge, and bridges by id. An id may end before it is attached (a dial that fails at
/// once); it is then never counted.
final class ActiveConnections: Sendable {
    private struct Slots {
        var waiting = Set<Int32>()
        var bridges = Set<Int>()
        var endedEarly = Set<Int>()
    }

    private let slots = LockedBox(Slots())

    /// Reserves a slot for `fd` unless `limit` slots are taken; returns whether it did.
    @discardableResult
    func reserve(_ fd: Int32, limit: Int? = nil) -> Bool {
        slots.withLock { s in
            if let limit, s.waiting.count + s.bridges.count >= limit { return false }
            s.waiting.insert(fd)
            return true
        }
    }

    /// Frees `fd`'s slot (it was closed before any bridge).
    func release(_ fd: Int32) {
        slots.withLock { _ = $0.waiting.remove(fd) }
    }

    /// `fd`'s slot now belongs to bridge `id`.
    func attach(fd: Int32, id: Int) {
        slots.withLock { s in
            s.waiting.remove(fd)
            if s.endedEarly.remove(id) == nil { s.bridges.insert(id) }
        }
    }

    /// No connection holds a slot.
    var isIdle: Bool { slots.withLock { $0.waiting.isEmpty && $0.bridges.isEmpty } }

    /// Bridge `id` ended.
    func end(_ id: Int) {
        slots.withLock { s in
            if s.bridges.remove(id) == nil { s.endedEarly.insert(id) }
        }
    }
}
