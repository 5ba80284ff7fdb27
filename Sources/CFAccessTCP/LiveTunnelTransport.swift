import AccessCore
import AccessTransport
import Dispatch
import FoundationEssentials
import Logging

/// The live transport: the carrier's loops (AccessTransport).
package struct LiveTunnelTransport: TunnelTransport {
    let logger: Logger
    let report: @Sendable (String) -> Void

    /// - Parameters:
    ///   - logger: where the carrier logs.
    ///   - report: receives the plain message of each failed bridged connection.
    package init(logger: Logger, report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.logger = logger
        self.report = report
    }

    package func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure? {
        do {
            let (stream, serving) = try await openStream(configuration, joining: nil)
            stream.close()
            await serving.close()
            return nil
        } catch {
            return error
        }
    }

    package func serve(_ configuration: CarrierConfiguration, on place: ListenPlace,
                      limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel {
        let active = ActiveConnections()
        // A listener that stops after its first connection ends with that connection.
        let ended = OneShot<TunnelEnd>()
        let single = limits.stopAcceptingAfterFirstConnection
        let endIfIdle: @Sendable (TunnelEnd) -> Void = { reason in
            if single, active.isIdle { ended.fulfil(reason) }
        }
        let loopBox = LockedBox<CarrierPool?>(nil)
        // The request each first dial carried, by local socket, for the redial after a refusal.
        let firstRequests = LockedBox<[Int32: UpgradeRequest]>([:])
        // Connections waiting to be dialled again (the retry policy), by local socket: cancelled,
        // and their sockets closed, when the listener closes.
        let retry = configuration.connectionRetry
        let retries = retry.maxAttempts > 1
        let waiting = LockedBox<[Int32: Task<Void, Never>]>([:])
        // A connection handed back and not dialled again: closed, its slot freed, the line said.
        let giveUp: @Sendable (Int32, TunnelFailure) -> Void = { [report] fd, failure in
            FileDescriptors.closeUnserved(fd)
            active.release(fd)
            report(failure.message)
            endIfIdle(.failedToOpen(failure))
        }
        let threads = limits.maxCarrierThreads ?? CarrierPool.loopsPerCore()
        var tuning = CarrierLoop.Tuning()
        // A spare is for the next connection: there is none after the first when the listener stops.
        tuning.spareLifetime = limits.stopAcceptingAfterFirstConnection ? nil : limits.spareConnectionLifetime
        let loop = CarrierPool(configuration: configuration, logger: logger, tuning: tuning, maxLoops: threads) { [report, logger] event in
            switch event {
            case .retryable(let id, let fd, let attempt, let failure):
                // The slot stays taken while the connection waits for its next dial.
                active.reserve(fd)
                active.end(id)
                guard let delay = retry.delay(beforeAttempt: attempt + 1), let loop = loopBox.withLock({ $0 }) else {
                    giveUp(fd, failure)
                    return
                }
                logger.info("connection \(id): \(failure.message); dialling again in \(delay) (attempt \(attempt + 1) of \(retry.maxAttempts))")
                // Registered before it can run (a zero delay), so that it finds itself waiting.
                waiting.withLock { all in
                    all[fd] = Task {
                        let slept: Void? = try? await Task.sleep(for: delay)
                        let mine = waiting.withLock { $0.removeValue(forKey: fd) } != nil
                        guard slept != nil, mine else {
                            // Cancelled by the listener's close, which closed the socket.
                            if mine { FileDescriptors.closeUnserved(fd) }
                            active.release(fd)
                            return
                        }
                        if let authorizer {
                            await Self.authorizeAndBridge(fd: fd, loop: loop, authorizer: authorizer, rejected: nil, active: active,
                                                          report: report, onFailure: endIfIdle, remember: nil, attempt: attempt + 1)
                        } else {
                            active.attach(fd: fd, id: loop.bridge(socket: fd, handBackWhenRetryable: true, attempt: attempt + 1))
                        }
                    }
                }
            case .established(let id):
                logger.debug("connection \(id) established")
            case .failed(let id, let failure):
                active.end(id)
                report(failure.message)
                endIfIdle(.failedToOpen(failure))
            case .refused(let id, let fd, let failure):
                // Keep the slot while the connection is dialled again with a fresh token.
                active.reserve(fd)
                active.end(id)
                let rejected = firstRequests.withLock { $0.removeValue(forKey: fd) }
                guard let authorizer, let loop = loopBox.withLock({ $0 }) else {
                    giveUp(fd, failure)
                    return
                }
                logger.info("Access refused the token of connection \(id); dialling it once more with a fresh one")
                Task {
                    await Self.authorizeAndBridge(fd: fd, loop: loop, authorizer: authorizer, rejected: rejected,
                                                  active: active, report: report, onFailure: endIfIdle, remember: nil)
                }
            case .closed(let id, let up, let down, let reason):
                active.end(id)
                logger.debug("connection \(id) closed: \(reason)", metadata: ["sent": "\(up)", "received": "\(down)"])
                if !reason.isClean { report(reason.message(host: configuration.request.origin.host)) }
                endIfIdle(reason)
            }
        }
        try loop.start()
        loopBox.withLock { $0 = loop }
        let listener: LoopbackListener
        do {
            switch place {
            case .address(let address): listener = try LoopbackListener(address: address)
            case .socket(let socket):
                listener = try LoopbackListener(adopting: socket.descriptor, allowNonLoopback: socket.allowsNonLoopback)
            }
        } catch {
            await Self.shutdown(loop)
            throw error
        }
        let accepted = LockedBox(0)
        listener.startAccepting { [logger, report] fd in
            let first = accepted.withLock { n -> Bool in n += 1; return n == 1 }
            if limits.stopAcceptingAfterFirstConnection, first { listener.close() }
            // Reserve the slot before the bridge exists, so a burst cannot overshoot the limit.
            guard active.reserve(fd, limit: limits.maxConcurrentConnections) else {
                logger.info("refusing a local connection: \(limits.maxConcurrentConnections ?? 0) already open (maxConcurrentConnections)")
                FileDescriptors.closeUnserved(fd)
                return
            }
            guard let authorizer else {
                active.attach(fd: fd, id: loop.bridge(socket: fd, handBackWhenRetryable: retries))
                return
            }
            let rememberFirst: @Sendable (UpgradeRequest) -> Void = { request in firstRequests.withLock { $0[fd] = request } }
            let remember: (@Sendable (UpgradeRequest) -> Void)? = authorizer.redialsOnRefusal ? rememberFirst : nil
            if let immediate = authorizer.immediateRequest() {
                // A service token: the connection is dialled from here, with no task between.
                Self.bridge(fd: fd, loop: loop, authorized: immediate, active: active, report: report, onFailure: endIfIdle,
                            remember: remember, attempt: retries ? 1 : nil)
                return
            }
            Task {
                await Self.authorizeAndBridge(fd: fd, loop: loop, authorizer: authorizer, rejected: nil,
                                              active: active, report: report, onFailure: endIfIdle, remember: remember,
                                              attempt: retries ? 1 : nil)
            }
        }
        if let idle = limits.idleExit {
            Self.exitWhenIdle(after: idle, listener: listener, active: active, ended: ended, logger: logger)
        }
        return LiveServing(port: UInt16(listener.port), listener: listener, loop: loop,
                           end: single || limits.idleExit != nil ? ended : nil, waiting: waiting)
    }

    /// Stops `listener` once `active` has held no connection for `idle`, then ends the serving
    /// cleanly (`ended`) when the connections accepted before that have ended too. Checked four
    /// times a second; a connection accepted meanwhile starts the count again.
    private static func exitWhenIdle(after idle: Duration, listener: LoopbackListener, active: ActiveConnections,
                                     ended: OneShot<TunnelEnd>, logger: Logger) {
        Task {
            let clock = ContinuousClock()
            var idleSince: ContinuousClock.Instant?
            while ended.current == nil {
                try? await Task.sleep(for: .milliseconds(250))
                guard active.isIdle else {
                    idleSince = nil
                    continue
                }
                let since = idleSince ?? clock.now
                idleSince = since
                guard clock.now - since >= idle else { continue }
                logger.info("no connection for \(idle.components.seconds) s: the listener stops (the next connection starts it again under socket activation)")
                // No more accepting: what waits in the backlog stays there. A connection accepted
                // just before is served to its end first.
                listener.close()
                while !active.isIdle { try? await Task.sleep(for: .milliseconds(100)) }
                ended.fulfil(.listenerIdle(after: idle))
                return
            }
        }
    }

    /// Gets a request from `authorizer` and bridges `fd` with it. The first dial of a connection
    /// (`remember` given) hands the socket back if Access refuses the token; the redial does not.
    /// With `attempt` (the dial's number), a dial that fails in a way worth retrying hands it back
    /// too, for the listener's retry policy.
    private static func authorizeAndBridge(fd: Int32, loop: CarrierPool, authorizer: any ConnectionAuthorizer,
                                           rejected: UpgradeRequest?, active: ActiveConnections,
                                           report: @escaping @Sendable (String) -> Void,
                                           onFailure: @escaping @Sendable (TunnelEnd) -> Void,
                                           remember: (@Sendable (UpgradeRequest) -> Void)?, attempt: Int? = nil) async {
        let authorized: Result<(UpgradeRequest, CredentialKind), TunnelFailure>
        do throws(TunnelFailure) {
            authorized = .success(try await authorizer.request(rejected: rejected))
        } catch {
            authorized = .failure(error)
        }
        bridge(fd: fd, loop: loop, authorized: authorized, active: active, report: report, onFailure: onFailure,
               remember: remember, attempt: attempt)
    }

    /// Bridges `fd` with the request an authorizer gave, or closes it with the authorizer's failure.
    private static func bridge(fd: Int32, loop: CarrierPool, authorized: Result<(UpgradeRequest, CredentialKind), TunnelFailure>,
                               active: ActiveConnections, report: @escaping @Sendable (String) -> Void,
                               onFailure: @escaping @Sendable (TunnelEnd) -> Void,
                               remember: (@Sendable (UpgradeRequest) -> Void)?, attempt: Int?) {
        let request: UpgradeRequest
        let credential: CredentialKind
        switch authorized {
        case .success(let given):
            (request, credential) = given
        case .failure(let error):
            FileDescriptors.closeUnserved(fd)
            active.release(fd)
            report(error.message)
            onFailure(.failedToOpen(error))
            return
        }
        remember?(request)
        let id = loop.bridge(socket: fd, request: request, credential: credential, handBackOnRefusal: remember != nil,
                             handBackWhenRetryable: attempt != nil, attempt: attempt ?? 1)
        active.attach(fd: fd, id: id)
    }

    package func openStream(_ configuration: CarrierConfiguration, joining joined: LocalPair?) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel) {
        // With a pair, the loop serves this dial's own duplicates of it (closed at the end);
        // otherwise one end of a socket pair, the caller the other.
        let local = try joined?.duplicated()
        let pair: (carrier: Int32, caller: Int32)? = try local == nil ? FileDescriptors.socketPair() : nil
        let outcome = OneShot<TunnelFailure?>()
        let end = OneShot<TunnelEnd>()
        let loop = CarrierPool(configuration: configuration, logger: logger, maxLoops: 1) { [report, logger] event in
            switch event {
            case .established: outcome.fulfil(nil)
            case .failed(_, let failure):
                if !outcome.fulfil(failure) { report(failure.message) }
            case .refused(_, let fd, let failure), .retryable(_, let fd, _, let failure):
                FileDescriptors.close(fd)
                if !outcome.fulfil(failure) { report(failure.message) }
            case .closed(let id, _, _, let reason):
                logger.debug("connection \(id) closed: \(reason)")
                outcome.fulfil(TunnelFailure.protocolViolation("the WebSocket closed before it opened"))
                end.fulfil(reason)
            }
        }
        do {
            try loop.start()
        } catch {
            for fd in [local?.input, local?.output, pair?.carrier, pair?.caller].compactMap({ $0 }) {
                FileDescriptors.close(fd)
            }
            throw error
        }
        if let pair { loop.bridge(socket: pair.carrier) } else if let local { loop.bridge(pair: local) }
        let failure = await withTaskCancellationHandler {
            await outcome.value
        } onCancel: {
            outcome.fulfil(TunnelFailure.cancelled("opening the WebSocket to \(configuration.request.origin.host)"))
        }
        let serving = LiveServing(port: 0, listener: nil, loop: loop, end: end)
        if let failure {
            if let pair { FileDescriptors.close(pair.caller) }
            await serving.close()
            throw failure
        }
        let host = configuration.request.origin.host
        guard let pair else { return (TunnelStream(joinedTo: host, end: end), serving) }
        return (TunnelStream(descriptor: pair.caller, host: host, end: end), serving)
    }

    static func shutdown(_ loop: CarrierPool) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                loop.shutdown()
                done.resume()
            }
        }
    }
}

/// A listener (or none) and its carrier loops.
struct LiveServing: ServingTunnel {
    let port: UInt16
    let listener: LoopbackListener?
    let loop: CarrierPool
    /// Fulfilled when the stream's tunnel or a single-connection listener's connection ended;
    /// nil for a listener that keeps accepting.
    let end: OneShot<TunnelEnd>?
    /// Connections waiting to be dialled again: given up (their sockets closed) on close.
    var waiting: LockedBox<[Int32: Task<Void, Never>]>?

    func close() async {
        listener?.close()
        if let waiting {
            let pending = waiting.withLock { all -> [(Int32, Task<Void, Never>)] in
                defer { all.removeAll() }
                return Array(all)
            }
            for (fd, task) in pending {
                task.cancel()
                FileDescriptors.closeUnserved(fd)
            }
        }
        await LiveTunnelTransport.shutdown(loop)
        end?.fulfil(.shutdown)
    }

    func ended() async -> TunnelEnd? {
        guard let end else { return nil }
        return await end.value
    }
}
