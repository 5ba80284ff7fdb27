// The package's one lock and one one-shot signal (issue 13.4): every module of ours uses these
// rather than a lock or continuation dance of its own.

/// A value guarded by a lock.
package final class LockedBox<Value>: @unchecked Sendable {
    private let lock = PThreadMutex()
    private var value: Value

    /// Wraps `value`.
    package init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access to the value.
    package func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// A value set once and awaited by any number of tasks: a tunnel's end, a dial's outcome, "the
/// output is finished". Later `fulfil` calls are ignored.
package final class OneShot<Value: Sendable>: @unchecked Sendable {
    private enum State {
        case waiting([CheckedContinuation<Value, Never>])
        case set(Value)
    }

    private let state = LockedBox(State.waiting([]))

    /// An unset signal.
    package init() {}

    /// Sets the value unless one was set; returns whether this call set it.
    @discardableResult
    package func fulfil(_ value: Value) -> Bool {
        let pending: [CheckedContinuation<Value, Never>]? = state.withLock { s in
            guard case .waiting(let waiters) = s else { return nil }
            s = .set(value)
            return waiters
        }
        guard let pending else { return false }
        pending.forEach { $0.resume(returning: value) }
        return true
    }

    /// The value, if set.
    package var current: Value? {
        state.withLock { s in
            if case .set(let value) = s { return value }
            return nil
        }
    }

    /// The value, once set.
    package var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let ready: Value? = state.withLock { s in
                    switch s {
                    case .set(let value):
                        return value
                    case .waiting(let waiters):
                        s = .waiting(waiters + [continuation])
                        return nil
                    }
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }
    }

    /// The value if it is set within `seconds`, else nil (the signal stays unset).
    package func value(within seconds: Double) async -> Value? {
        let first = OneShot<Value?>()
        let waiter = Task { first.fulfil(await self.value) }
        let timer = Task {
            try? await Task.sleep(nanoseconds: UInt64(max(0, seconds) * 1_000_000_000))
            first.fulfil(nil)
        }
        let result = await first.value
        waiter.cancel()
        timer.cancel()
        return result
    }
}

extension OneShot where Value == Void {
    /// Sets the signal.
    package func signal() { fulfil(()) }
    /// Waits until the signal is set.
    package func wait() async { await value }
}
