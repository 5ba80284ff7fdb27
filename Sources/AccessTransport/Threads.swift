internal import CCFShim
import Glibc

// The package's threads, mutex and condition variable over pthreads: the shipped modules import
// FoundationEssentials, which has no Thread, NSLock or NSCondition (issue 18.3). These do what
// those did on Linux, where they are the same pthread calls.

/// A pthread mutex. It lives on the heap because a mutex must not move.
package final class PThreadMutex: @unchecked Sendable {
    fileprivate let raw: UnsafeMutablePointer<pthread_mutex_t>

    /// A new unlocked mutex (default attributes: not recursive).
    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(raw, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(raw)
        raw.deallocate()
    }

    /// Locks; blocks while another thread holds the mutex.
    package func lock() {
        let rc = pthread_mutex_lock(raw)
        precondition(rc == 0, "pthread_mutex_lock failed: \(rc)")
    }

    /// Unlocks; only the thread that locked it may.
    package func unlock() {
        let rc = pthread_mutex_unlock(raw)
        precondition(rc == 0, "pthread_mutex_unlock failed: \(rc)")
    }

    /// Runs `body` with the mutex held.
    package func withLock<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A condition variable with its own mutex (as NSCondition): `lock()`, then `wait()` in a loop
/// on the predicate, `signal()` or `broadcast()` with the lock held, `unlock()`.
package final class PThreadCondition: @unchecked Sendable {
    private let mutex = PThreadMutex()
    private let raw: UnsafeMutablePointer<pthread_cond_t>

    /// A new condition.
    package init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: pthread_cond_t())
        let rc = pthread_cond_init(raw, nil)
        precondition(rc == 0, "pthread_cond_init failed: \(rc)")
    }

    deinit {
        pthread_cond_destroy(raw)
        raw.deallocate()
    }

    /// Locks the condition's mutex.
    package func lock() { mutex.lock() }

    /// Unlocks the condition's mutex.
    package func unlock() { mutex.unlock() }

    /// Releases the mutex, blocks until signalled (or woken spuriously), then takes it again.
    /// Call with the mutex held, in a loop that checks the predicate.
    package func wait() {
        let rc = pthread_cond_wait(raw, mutex.raw)
        precondition(rc == 0, "pthread_cond_wait failed: \(rc)")
    }

    /// Wakes one waiting thread.
    package func signal() { pthread_cond_signal(raw) }

    /// Wakes every waiting thread.
    package func broadcast() { pthread_cond_broadcast(raw) }
}

/// Detached threads of our own (the carrier's service thread, the listener's accept loop, the
/// stdio pumps, blocking libcurl transfers, an SSH session's thread).
package enum PThread {
    /// Starts a detached thread that runs `body`, named `name` (Linux keeps its first 15
    /// bytes: `top -H`, /proc/PID/task/TID/comm), with `stackSize` bytes of stack when given (else
    /// the process default). Returns false when the thread could not be created (the system is
    /// out of threads or memory): then `body` never runs.
    @discardableResult
    package static func start(name: String, stackSize: Int? = nil,
                              _ body: @escaping @Sendable () -> Void) -> Bool {
        create(name: name, stackSize: stackSize, detached: true, body) != nil
    }

    /// Creates the thread; its handle, or nil when it could not be created.
    static func create(name: String, stackSize: Int?, detached: Bool, _ body: @escaping @Sendable () -> Void) -> pthread_t? {
        var attributes = pthread_attr_t()
        guard pthread_attr_init(&attributes) == 0 else { return nil }
        defer { pthread_attr_destroy(&attributes) }
        _ = pthread_attr_setdetachstate(&attributes, Int32(detached ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE))
        if let stackSize {
            _ = pthread_attr_setstacksize(&attributes, max(stackSize, Int(PTHREAD_STACK_MIN)))
        }
        let context = Unmanaged.passRetained(ThreadStart(name: name, body: body))
        var thread = pthread_t()
        let rc = pthread_create(&thread, &attributes, { raw in
            let start = Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue()
            _ = CCFShim_set_thread_name(start.name)
            start.body()
            return nil
        }, context.toOpaque())
        guard rc == 0 else {
            context.release()
            return nil
        }
        return thread
    }
}

/// A thread that can be waited for until it has ended, thread-local destructors included.
/// OpenSSL frees a thread's state from such a destructor; a process that exits while one of
/// our threads is still on its way out runs OpenSSL's exit-time cleanup at the same time, and
/// the two free the same memory (seen as "double free or corruption" at exit). Stopping with
/// ``join()`` leaves no thread behind.
package final class JoinableThread: @unchecked Sendable {
    private let handle: pthread_t
    private let lock = PThreadMutex()
    private var settled = false

    private init(handle: pthread_t) { self.handle = handle }

    /// Starts `body` on a new thread (see ``PThread/start(name:stackSize:_:)``); nil when the
    /// thread could not be created.
    package static func start(name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> JoinableThread? {
        guard let handle = PThread.create(name: name, stackSize: stackSize, detached: false, body) else { return nil }
        return JoinableThread(handle: handle)
    }

    /// Waits until the thread has ended. Called on the thread itself (its last reference let go
    /// there), it detaches the thread instead. Idempotent.
    package func join() {
        lock.lock()
        defer { lock.unlock() }
        guard !settled else { return }
        settled = true
        if pthread_equal(handle, pthread_self()) != 0 {
            _ = pthread_detach(handle)
        } else {
            _ = pthread_join(handle, nil)
        }
    }

    deinit {
        // Never joined: its resources go back once it ends.
        if !settled { _ = pthread_detach(handle) }
    }
}

/// What a new thread runs, passed through pthread_create's context pointer.
private final class ThreadStart: @unchecked Sendable {
    let name: String
    let body: @Sendable () -> Void

    init(name: String, body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }
}
