// Test doubles of the session's seams (transport, clock, OAuth flow) and a state recorder,
// shared by the library's tests (issue 13.5).

import AccessCore
import AccessTransport
import CFAccessTCP
import Foundation

/// A clock whose sleeps finish only when the test advances time.
package final class ManualClock: WallClock, @unchecked Sendable {
    package init() {}
    private struct Sleeper { let until: Double; let continuation: CheckedContinuation<Bool, Never> }
    private let lock = NSLock()
    private var elapsed = 0.0
    private var sleepers: [UUID: Sleeper] = [:]
    package private(set) var requested: [Double] = []

    package func now() -> Date {
        lock.lock()
        defer { lock.unlock() }
        return Date(timeIntervalSince1970: 1_700_000_000 + elapsed)
    }

    package func sleep(for duration: Duration) async -> Bool {
        await sleep(seconds: duration.secondsValue)
    }

    package func sleep(seconds: Double) async -> Bool {
        let id = UUID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                lock.lock()
                requested.append(seconds)
                sleepers[id] = Sleeper(until: elapsed + seconds, continuation: c)
                lock.unlock()
            }
        } onCancel: {
            lock.lock()
            let sleeper = sleepers.removeValue(forKey: id)
            lock.unlock()
            sleeper?.continuation.resume(returning: false)
        }
    }

    /// Sleeps currently waiting.
    package var pending: [Double] {
        lock.lock()
        defer { lock.unlock() }
        return sleepers.values.map { $0.until - elapsed }.sorted()
    }

    package func advance(by seconds: Double) {
        lock.lock()
        elapsed += seconds
        let due = sleepers.filter { $0.value.until <= elapsed }
        due.keys.forEach { sleepers.removeValue(forKey: $0) }
        lock.unlock()
        due.values.forEach { $0.continuation.resume(returning: true) }
    }
}

/// A transport that answers from a script: one outcome per probe, in order.
package final class ScriptedTransport: TunnelTransport, @unchecked Sendable {
    package enum ProbeOutcome { case succeed, fail(TunnelFailure), hang }
    private let lock = NSLock()
    private var script: [ProbeOutcome]
    package private(set) var probes: [CarrierConfiguration] = []
    package private(set) var servedLimits: [ListenerLimits] = []
    package private(set) var servedAuthorizers: [(any ConnectionAuthorizer)?] = []
    package let closedServings = LockedBox(0)

    package init(_ script: [ProbeOutcome]) { self.script = script }

    package func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure? {
        let outcome: ProbeOutcome = lock.withLock {
            probes.append(configuration)
            return script.isEmpty ? .fail(.internalError("script exhausted")) : script.removeFirst()
        }
        switch outcome {
        case .succeed: return nil
        case .fail(let failure): return failure
        case .hang:
            while !Task.isCancelled { try? await Task.sleep(nanoseconds: 5_000_000) }
            return .internalError("cancelled")
        }
    }

    package func serve(_ configuration: CarrierConfiguration, on place: ListenPlace,
               limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel {
        lock.withLock {
            servedLimits.append(limits)
            servedAuthorizers.append(authorizer)
        }
        return FakeServing(port: 40_000, closed: closedServings)
    }

    package func openStream(_ configuration: CarrierConfiguration, joining pair: LocalPair?) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel) {
        throw .internalError("not scripted")
    }
}

package struct FakeServing: ServingTunnel {
    package let port: UInt16
    package let closed: LockedBox<Int>
    package init(port: UInt16, closed: LockedBox<Int>) {
        self.port = port
        self.closed = closed
    }
    package func close() async { closed.withLock { $0 += 1 } }
}

/// An OAuth flow that hands out numbered tokens and records refreshes.
package final class CountingFlow: OAuthFlow, @unchecked Sendable {
    package let refreshes = LockedBox<[Bool]>([])
    package let failure: TunnelFailure?
    package init(failure: TunnelFailure? = nil) { self.failure = failure }
    package func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        let n = refreshes.withLock { $0.append(refresh); return $0.count }
        if let failure { throw failure }
        return "app.token.\(n)"
    }
}

/// Collects the states a subscriber sees.
package final class StateRecorder: @unchecked Sendable {
    package let states = LockedBox<[ConnectionState]>([])
    private var task: Task<Void, Never>?

    package init(_ tunnel: AccessTunnel) {
        let stream = tunnel.state
        task = Task { [states] in
            for await state in stream { states.withLock { $0.append(state) } }
        }
    }

    /// Waits (bounded, real time) until `predicate` holds for the recorded states.
    package func wait(_ predicate: ([ConnectionState]) -> Bool) async -> [ConnectionState] {
        for _ in 0..<2000 {
            let now = states.withLock { $0 }
            if predicate(now) { return now }
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        return states.withLock { $0 }
    }
}
