import AccessCore
import AccessTransport

/// A token lookup or login in flight that any number of callers await (one browser for every
/// connection that needs it). A caller whose task is cancelled stops waiting at once, unless it
/// was the last one sharing the work: then the work is cancelled and that caller returns when
/// it has unwound (its polls stopped, its login lock released), with the work's own failure.
final class SharedLogin: Sendable {
    /// What it is for (the origin, and whether it may log in).
    let key: String
    /// Its number, to tell it from a later one for the same key.
    let id: Int
    /// The token cache generation it started in (see `AccessTokenProvider.cacheGeneration`).
    let generation: Int

    private struct State {
        var result: Result<String, TunnelFailure>?
        var waiters: [Int: CheckedContinuation<Result<String, TunnelFailure>, Never>] = [:]
        /// Waiters cancelled before their continuation was registered.
        var cancelledEarly: Set<Int> = []
        var nextWaiter = 0
        /// Waiters that keep the work alive (sharers, not bystanders waiting for it to end).
        var sharers = 0
        var abandoned = false
        var task: Task<Void, Never>?
    }

    private let state = LockedBox(State())

    init(key: String, id: Int, generation: Int) {
        self.key = key
        self.id = id
        self.generation = generation
    }

    /// Starts `work`; its result goes to every waiter.
    func start(_ work: @escaping @Sendable () async -> Result<String, TunnelFailure>) {
        let task = Task {
            let result = await work()
            self.finish(result)
        }
        let abandoned = state.withLock { s -> Bool in
            s.task = task
            return s.abandoned
        }
        if abandoned { task.cancel() }
    }

    /// Whether every sharer gave up, so the work was cancelled: a new caller starts its own.
    var isAbandoned: Bool { state.withLock { $0.abandoned } }

    /// Waits for the result. A `sharing` waiter keeps the work alive; a bystander only waits for
    /// it to end. When the calling task is cancelled, returns `cancelled` at once — or, for the
    /// last sharer, cancels the work and returns its result once it has unwound.
    func wait(sharing: Bool, cancelled: TunnelFailure) async -> Result<String, TunnelFailure> {
        let id: Int = state.withLock { s in
            s.nextWaiter += 1
            if sharing { s.sharers += 1 }
            return s.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<String, TunnelFailure>, Never>) in
                let now: Result<String, TunnelFailure>? = state.withLock { s in
                    if let result = s.result { return result }
                    if s.cancelledEarly.remove(id) != nil { return .failure(cancelled) }
                    s.waiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let (waiter, abandonedTask) = state.withLock { s -> (CheckedContinuation<Result<String, TunnelFailure>, Never>?, Task<Void, Never>?) in
                guard s.result == nil else { return (nil, nil) }
                if sharing {
                    s.sharers -= 1
                    if s.sharers == 0 {
                        // The last sharer: the work stops, and this waiter gets its result.
                        s.abandoned = true
                        return (nil, s.task)
                    }
                }
                let waiter = s.waiters.removeValue(forKey: id)
                if waiter == nil { s.cancelledEarly.insert(id) }
                return (waiter, nil)
            }
            waiter?.resume(returning: .failure(cancelled))
            abandonedTask?.cancel()
        }
    }

    private func finish(_ result: Result<String, TunnelFailure>) {
        let waiters = state.withLock { s -> [CheckedContinuation<Result<String, TunnelFailure>, Never>] in
            s.result = result
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        waiters.forEach { $0.resume(returning: result) }
    }
}
