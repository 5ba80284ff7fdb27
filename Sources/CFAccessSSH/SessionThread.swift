import AccessTransport
import Dispatch
import FoundationEssentials

/// The one thread an SSH session lives on. Neither engine is thread-safe per session, so every
/// call on a session runs here, one after another, in the order submitted.
final class SessionThread: @unchecked Sendable {
    private let condition = PThreadCondition()
    private var jobs: [() -> Void] = []
    private var stopping = false
    private var thread: JoinableThread?

    init(name: String) {
        thread = JoinableThread.start(name: name) { [self] in loop() }
    }

    /// Runs `job` on the thread after the jobs already submitted. After `stop()` the job is
    /// refused: returns false and `job` never runs.
    @discardableResult
    func submit(_ job: @escaping () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopping else { return false }
        jobs.append(job)
        condition.signal()
        return true
    }

    /// Runs `body` on the thread after the jobs already submitted and returns its result; once
    /// the thread is stopped, the session is closed (`.connectionLost`).
    func run<T: Sendable>(_ body: @escaping @Sendable () throws(SSHFailure) -> T) async throws(SSHFailure) -> T {
        let result: Result<T, SSHFailure> = await withCheckedContinuation { continuation in
            let accepted = submit {
                do throws(SSHFailure) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
            if !accepted {
                continuation.resume(returning: .failure(SSHFailure(.connectionLost, "the SSH session is closed")))
            }
        }
        return try result.get()
    }

    /// Ends the thread once the jobs already submitted have run, and waits until it is gone
    /// (see ``JoinableThread``); on the thread itself, it only asks.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
        thread?.join()
    }

    private func loop() {
        while true {
            condition.lock()
            while jobs.isEmpty && !stopping { condition.wait() }
            if jobs.isEmpty {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}

/// Runs the async `body` and waits for its result on the calling thread, which must be one of
/// ours (a session thread inside a libssh callback), never a thread of Swift's pool.
func waitOffPool<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let result = LockedBox<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        let value = await body()
        result.withLock { $0 = value }
        done.signal()
    }
    done.wait()
    return result.withLock { $0 }!
}

/// Runs the blocking `body` on `queue` and waits for it at most `timeout`: its result, or nil
/// when it did not finish in time (it goes on running on `queue`, which stays busy). For C
/// calls that can hang with no timeout of their own (D-Bus, an ssh-agent), so no caller waits
/// longer than it was told to; never blocks Swift's pool.
func bounded<T: Sendable>(on queue: DispatchQueue, timeout: Duration,
                          _ body: @escaping @Sendable () -> T) async -> T? {
    let timer = LockedBox<Task<Void, Never>?>(nil)
    let value: T? = await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
        let pending = LockedBox<CheckedContinuation<T?, Never>?>(continuation)
        let finish: @Sendable (T?) -> Void = { value in
            pending.withLock { waiting in
                waiting?.resume(returning: value)
                waiting = nil
            }
        }
        timer.withLock {
            $0 = Task {
                try? await Task.sleep(for: timeout)
                finish(nil)
            }
        }
        queue.async { finish(body()) }
    }
    timer.withLock { $0?.cancel() }
    return value
}
