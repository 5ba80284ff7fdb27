// Keeping the integration tests' blocking work off Swift's cooperative pool.

import Foundation
import Testing

/// Runs each test of a suite on threads of its own instead of Swift's cooperative pool.
///
/// swift-testing calls a synchronous test function (and an async test's synchronous fixture
/// code: starting the emulator or sshd, `run(...)`, `waitForStats`, tmux polling) from a job of
/// the cooperative pool, which has one thread per core: two on CI. With both threads blocked in
/// such code, every async task of the process waits — the library's logins and dials included.
/// Eight integration suites side by side had a login of CancellationTests wait up to 8.8 s for
/// a pool thread after libcurl's answer had arrived (stack samples: both pool threads in
/// `ManagedProcess.waitForExit` of other suites' synchronous tests); in full runs such waits
/// added up past that suite's 90 s bound.
///
/// With this trait the test's task prefers a `TestThreads` executor: the test's code, its child
/// tasks and the default actors it calls run on threads made for it, one per ready job, so
/// blocking there holds no pool thread. Unstructured `Task {}`s — the library's own tasks —
/// still run on the pool, which now stays free for them.
///
/// The pool's two threads also used to bound how many blocking tests ran at once; without that
/// bound every suite's test starts together (emulators, sshd, tools), and on two cores fixtures
/// missed their own start-up bounds. So at most `TestSlots.shared` tests of these suites run at
/// once; the others wait for a slot without holding a thread.
struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?,
                      performing function: @Sendable () async throws -> Void) async throws {
        // The suite's own scope has no test body to move.
        guard testCase != nil else { return try await function() }
        await TestSlots.shared.acquire()
        defer { TestSlots.shared.release() }
        let executor = TestThreads(name: "test " + test.name.prefix(10))
        defer { executor.finish() }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// Every test of the suite runs on threads of its own, never on Swift's cooperative pool
    /// (see `OwnThreadsTrait`): for suites whose tests or fixtures block.
    static var ownThreads: Self { OwnThreadsTrait() }
}

/// A task executor that runs every job at once on a thread of its own: an idle one of its
/// threads, or a new one. A job never waits behind another, so code that blocks (a test's
/// `waitForExit`) delays nothing else. Its threads end after `finish()`; a job enqueued after
/// that (a continuation resumed late) still runs, on a thread started for it.
final class TestThreads: TaskExecutor, @unchecked Sendable {
    private let name: String
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var idle = 0
    private var finished = false

    init(name: String) {
        self.name = name
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        let startThread = idle < jobs.count
        if startThread { idle += 1 }   // the new thread counts as idle until it takes a job
        condition.signal()
        condition.unlock()
        if startThread { start() }
    }

    /// Lets the threads end once no job is left.
    func finish() {
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private func start() {
        Thread { [self] in
            // Named for `top -H` and stack samples (Linux keeps 15 bytes).
            Thread.current.name = name
            work()
        }.start()
    }

    /// Takes and runs jobs until `finish()` and nothing is left.
    private func work() {
        condition.lock()
        while true {
            while jobs.isEmpty && !finished { condition.wait() }
            guard !jobs.isEmpty else {
                idle -= 1
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            idle -= 1
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
            condition.lock()
            idle += 1
        }
    }
}

/// A counting semaphore for tests: `acquire()` waits (suspended, holding no thread) for a free
/// slot, first come first served; `release()` hands the slot on.
final class TestSlots: @unchecked Sendable {
    /// The slots of `.ownThreads` tests: one more than the cores.
    static let shared = TestSlots(count: ProcessInfo.processInfo.activeProcessorCount + 1)

    private let lock = NSLock()
    private var free: Int
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init(count: Int) {
        free = max(1, count)
    }

    func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if free > 0 {
                free -= 1
                lock.unlock()
                continuation.resume()
            } else {
                waiters.append(continuation)
                lock.unlock()
            }
        }
    }

    func release() {
        lock.lock()
        guard !waiters.isEmpty else {
            free += 1
            lock.unlock()
            return
        }
        let next = waiters.removeFirst()
        lock.unlock()
        next.resume()
    }
}
