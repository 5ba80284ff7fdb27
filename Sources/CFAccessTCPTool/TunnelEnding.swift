import CFAccessTCP
import Foundation
import Logging

/// Reports a failure as one plain line on stderr and, when a log file is in use, in it too.
struct FailureReport: Sendable {
    let logger: Logger
    let toLogFile: Bool

    func line(_ message: String) {
        writeStderr("cf-access-tcp: \(message)")
        if toLogFile { logger.error("\(message)") }
    }

    /// A failure's plain line (with the flags to look at), and at debug level its kind and
    /// technical detail (neither holds a secret).
    func failure(_ failure: TunnelFailure) {
        line(failure.withFlags)
        logger.debug("failure kind: \(failure.kind), category: \(failure.category), detail: \(failure.detail)")
    }
}

extension TunnelStream {
    /// Why the tunnel ended, waiting at most `seconds`; nil if it did not say in time.
    func ended(within seconds: Double) async -> TunnelEnd? {
        let first = FirstValue<TunnelEnd?>()
        Task { first.set(await self.ended) }
        Task {
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
            first.set(nil)
        }
        return await first.value
    }
}

/// The first value set, awaited by one task.
final class FirstValue<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Value?
    private var isSet = false
    private var waiter: CheckedContinuation<Value, Never>?

    func set(_ value: Value) {
        lock.lock()
        guard !isSet else { lock.unlock(); return }
        isSet = true
        result = value
        let w = waiter
        waiter = nil
        lock.unlock()
        w?.resume(returning: value)
    }

    var value: Value {
        get async {
            await withCheckedContinuation { c in
                lock.lock()
                if isSet, let result {
                    lock.unlock()
                    c.resume(returning: result)
                } else {
                    waiter = c
                    lock.unlock()
                }
            }
        }
    }
}
