import AccessCore
import Dispatch
import Logging

/// Up to `maxLoops` carrier loops of one configuration, each with its own thread, that share the
/// listener's connections: a listener serving many connections uses every core.
///
/// Loops are started as they are needed, not up front: a connection goes to the loop with the
/// fewest open bridges (of those, one whose spare connection is parked, so that the connection
/// does not wait for what is left of a spare's TLS handshake), and a new loop is started only
/// when every running loop carries at least one and the maximum is not reached. A single
/// connection (stdio mode, an SSH client's one session) so never costs more than one thread. The
/// loops share their bridge ids (one id names one connection of the pool) and their TLS client
/// context (one CA store in memory, and a session that one loop got resumes on every other).
package final class CarrierPool: Sendable {
    private let configuration: CarrierConfiguration
    private let logger: Logger
    private let tuning: CarrierLoop.Tuning
    private let onEvent: @Sendable (BridgeEvent) -> Void
    /// The most loops this pool runs (at least 1).
    private let maxLoops: Int
    private let ids = LockedBox(0)
    private let loops = LockedBox<[CarrierLoop]>([])

    /// A pool of at most `maxLoops` loops (at least one); `onEvent` is called on the loops' threads,
    /// so from several threads at once when there are several loops.
    package init(configuration: CarrierConfiguration, logger: Logger, tuning: CarrierLoop.Tuning = .init(),
                 maxLoops: Int, onEvent: @escaping @Sendable (BridgeEvent) -> Void) {
        self.configuration = configuration
        self.logger = logger
        self.tuning = tuning
        self.maxLoops = max(1, maxLoops)
        self.onEvent = onEvent
    }

    /// One loop per core the process may run on (`sched_getaffinity`), at most `cap`.
    package static func loopsPerCore(cap: Int = 64) -> Int {
        max(1, min(cap, HostProcess.availableCores()))
    }

    /// Starts the first loop (which creates the TLS context): a bad CA file fails here.
    package func start() throws(TunnelFailure) {
        let first = makeLoop()
        try first.start()
        loops.withLock { $0 = [first] }
    }

    /// Bridges `fd` on the least busy loop, starting another loop first when every running one is
    /// busy; the arguments are ``CarrierLoop/bridge(socket:request:credential:handBackOnRefusal:handBackWhenRetryable:attempt:)``'s.
    @discardableResult
    package func bridge(socket fd: Int32, request: UpgradeRequest? = nil, credential: CredentialKind? = nil,
                        handBackOnRefusal: Bool = false, handBackWhenRetryable: Bool = false, attempt: Int = 1) -> Int {
        let loop = pick()
        return loop.bridgeCounted(socket: fd, request: request, credential: credential, handBackOnRefusal: handBackOnRefusal,
                                  handBackWhenRetryable: handBackWhenRetryable, attempt: attempt)
    }

    /// Bridges the two descriptors of `pair` to a new WebSocket on the least busy loop, as
    /// `bridge(socket:)` bridges a socket; the loop owns them from here on and closes them,
    /// without a reset.
    @discardableResult
    package func bridge(pair: LocalPair) -> Int {
        let loop = pick()
        return loop.bridgeCounted(socket: pair.input, pairOutput: pair.output, names: pair.names, request: nil, credential: nil,
                                  handBackOnRefusal: false, handBackWhenRetryable: false, attempt: 1)
    }

    /// The loop for the next connection, its count already raised (under the pool's lock, so that
    /// two connections chosen at once see each other).
    private func pick() -> CarrierLoop {
        loops.withLock { running -> CarrierLoop in
            let chosen = choose(&running)
            chosen.countBridge()
            return chosen
        }
    }

    /// The loop with the fewest open bridges; of equals, the first whose spare is parked (its TLS
    /// open), so the connection waits only for its upgrade's round trip. A new loop when every
    /// running one carries a bridge and the maximum is not reached.
    private func choose(_ running: inout [CarrierLoop]) -> CarrierLoop {
        var best = running[0]
        var bestLoad = best.activeBridges
        var bestReady = best.hasParkedSpare
        for loop in running.dropFirst() where bestLoad > 0 || !bestReady {
            let load = loop.activeBridges
            guard load <= bestLoad else { continue }
            let ready = loop.hasParkedSpare
            if load < bestLoad || (ready && !bestReady) { (best, bestLoad, bestReady) = (loop, load, ready) }
        }
        guard bestLoad > 0, running.count < maxLoops else { return best }
        let added = makeLoop()
        do {
            try added.start(sharing: running[0].tls)
        } catch {
            // Out of descriptors or threads: the running loops carry on.
            logger.debug("could not start carrier loop \(running.count + 1): \(error.detail)")
            return best
        }
        logger.debug("carrier loop \(running.count + 1) of at most \(maxLoops) started")
        running.append(added)
        return added
    }

    private func makeLoop() -> CarrierLoop {
        CarrierLoop(configuration: configuration, logger: logger, tuning: tuning, ids: ids, onEvent: onEvent)
    }

    /// Closes every bridged connection of every loop (each WebSocket with a Close frame) and stops
    /// the loops, all at once. Returns once every loop's thread has ended.
    package func shutdown() {
        let all = loops.withLock { $0 }
        DispatchQueue.concurrentPerform(iterations: all.count) { all[$0].shutdown() }
    }
}
