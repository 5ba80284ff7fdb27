import AccessCore
import AccessTransport
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Limits of a session's local listener.
public struct ListenerLimits: Sendable, Equatable {
    /// Connections bridged at the same time; one more is closed at once (nil = unlimited).
    public var maxConcurrentConnections: Int?
    /// Close the listener once the first connection is accepted.
    public var stopAcceptingAfterFirstConnection: Bool

    /// The library's defaults: one connection, then stop listening (an SSH client's one session).
    public static let singleConnection = ListenerLimits(maxConcurrentConnections: 1, stopAcceptingAfterFirstConnection: true)
    /// The command line's defaults: as many as come.
    public static let unlimited = ListenerLimits(maxConcurrentConnections: nil, stopAcceptingAfterFirstConnection: false)

    /// Creates limits.
    public init(maxConcurrentConnections: Int?, stopAcceptingAfterFirstConnection: Bool) {
        self.maxConcurrentConnections = maxConcurrentConnections
        self.stopAcceptingAfterFirstConnection = stopAcceptingAfterFirstConnection
    }
}

/// A connected socket whose other end is bridged to the WebSocket: a tunnel with no TCP port.
public final class TunnelStream: @unchecked Sendable {
    /// The descriptor to read and write (a Unix stream socket). Owned by this object until
    /// `close()` or `release()`.
    public let fileDescriptor: Int32
    private let closed = LockedBox(false)
    private let end: OneShot<TunnelEnd>

    init(fileDescriptor: Int32, end: OneShot<TunnelEnd> = OneShot()) {
        self.fileDescriptor = fileDescriptor
        self.end = end
    }

    /// Why the tunnel ended: returns once its WebSocket and the bridge's side of the socket are
    /// closed (a Close handshake by either side, a reset, a protocol violation, a keepalive
    /// timeout, …). See ``TunnelEnd/isClean``.
    public var ended: TunnelEnd {
        get async { await end.value }
    }

    /// The reason, if the tunnel has ended already.
    public var endedReason: TunnelEnd? { end.current }

    /// Closes the descriptor (the tunnel then closes with a WebSocket Close frame). Idempotent.
    public func close() {
        let first = closed.withLock { c -> Bool in defer { c = true }; return !c }
        if first { Glibc.close(fileDescriptor) }
    }

    /// Gives up ownership: the caller closes the descriptor.
    public func release() -> Int32 {
        closed.withLock { $0 = true }
        return fileDescriptor
    }
}

/// A running local side of a session.
public protocol ServingTunnel: Sendable {
    /// The local port (0 for a port-less stream).
    var port: UInt16 { get }
    /// Closes the listener and every bridged connection before returning.
    func close() async
    /// Returns once the tunnel has ended by itself, with why: the stream's tunnel closed, or the
    /// last connection of a listener that stopped accepting after its first ended. Returns nil
    /// at once when this serving never ends by itself (a listener that keeps accepting).
    func ended() async -> TunnelEnd?
}

extension ServingTunnel {
    /// Never ends by itself.
    public func ended() async -> TunnelEnd? { nil }
}

/// Gives each connection a listener bridges its own upgrade request, so that an app token that
/// expires or is revoked while the listener runs is replaced for the next connection, and a
/// connection Access refuses is dialled once more with a fresh token.
public protocol ConnectionAuthorizer: Sendable {
    /// The upgrade request for a new connection and the credential it carries. With
    /// `rejected`, Access refused a connection that carried that request: get a fresh credential
    /// (unless another connection already did).
    func request(rejected: UpgradeRequest?) async throws(TunnelFailure) -> (UpgradeRequest, CredentialKind)
}

/// The effectful parts a session drives; replaced by scripted doubles in tests.
public protocol TunnelTransport: Sendable {
    /// Opens one WebSocket with `configuration` to prove the edge accepts it, then closes it.
    func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure?
    /// Listens on `address` and bridges accepted connections within `limits`, each with the
    /// request of `authorizer` if given, else with `configuration`'s.
    func serve(_ configuration: CarrierConfiguration, on address: ListenAddress,
               limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel
    /// Opens a WebSocket and returns a connected socket bridged to it.
    func openStream(_ configuration: CarrierConfiguration) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel)
}

/// Waits; injectable so tests take no real time.
public protocol SessionClock: Sendable {
    /// Suspends for `seconds` (throws if the task is cancelled).
    func sleep(seconds: Double) async throws
}

/// The real clock.
public struct SystemSessionClock: SessionClock {
    /// Creates the real clock.
    public init() {}
    /// Sleeps for real.
    public func sleep(seconds: Double) async throws {
        try await Task.sleep(nanoseconds: UInt64(max(0, seconds) * 1_000_000_000))
    }
}

/// The libwebsockets transport.
public struct LiveTunnelTransport: TunnelTransport {
    let logger: Logger
    let report: @Sendable (String) -> Void

    /// - Parameter report: receives the plain message of each failed bridged connection.
    public init(logger: Logger, report: @escaping @Sendable (String) -> Void = { _ in }) {
        self.logger = logger
        self.report = report
    }

    public func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure? {
        do {
            let (stream, serving) = try await openStream(configuration)
            stream.close()
            await serving.close()
            return nil
        } catch {
            return error
        }
    }

    public func serve(_ configuration: CarrierConfiguration, on address: ListenAddress,
                      limits: ListenerLimits, authorizer: (any ConnectionAuthorizer)?) async throws(TunnelFailure) -> any ServingTunnel {
        let active = ActiveConnections()
        // A listener that stops after its first connection ends with that connection.
        let ended = OneShot<TunnelEnd>()
        let single = limits.stopAcceptingAfterFirstConnection
        let endIfIdle: @Sendable (TunnelEnd) -> Void = { reason in
            if single, active.isIdle { ended.fulfil(reason) }
        }
        let loopBox = LockedBox<CarrierLoop?>(nil)
        // The request each first dial carried, by local socket, for the redial after a refusal.
        let firstRequests = LockedBox<[Int32: UpgradeRequest]>([:])
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report, logger] event in
            switch event {
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
                    Glibc.close(fd)
                    active.release(fd)
                    report(failure.message)
                    endIfIdle(.failedToOpen(failure))
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
            listener = try LoopbackListener(address: address)
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
                Glibc.close(fd)
                return
            }
            guard let authorizer else {
                active.attach(fd: fd, id: loop.bridge(socket: fd))
                return
            }
            Task {
                await Self.authorizeAndBridge(fd: fd, loop: loop, authorizer: authorizer, rejected: nil,
                                              active: active, report: report, onFailure: endIfIdle) { request in
                    firstRequests.withLock { $0[fd] = request }
                }
            }
        }
        return LiveServing(port: UInt16(listener.port), listener: listener, loop: loop, end: single ? ended : nil)
    }

    /// Gets a request from `authorizer` and bridges `fd` with it. The first dial of a connection
    /// (`remember` given) hands the socket back if Access refuses the token; the redial does not.
    private static func authorizeAndBridge(fd: Int32, loop: CarrierLoop, authorizer: any ConnectionAuthorizer,
                                           rejected: UpgradeRequest?, active: ActiveConnections,
                                           report: @escaping @Sendable (String) -> Void,
                                           onFailure: @escaping @Sendable (TunnelEnd) -> Void,
                                           remember: (@Sendable (UpgradeRequest) -> Void)?) async {
        let request: UpgradeRequest
        let credential: CredentialKind
        do throws(TunnelFailure) {
            (request, credential) = try await authorizer.request(rejected: rejected)
        } catch {
            Glibc.close(fd)
            active.release(fd)
            report(error.message)
            onFailure(.failedToOpen(error))
            return
        }
        remember?(request)
        let id = loop.bridge(socket: fd, request: request, credential: credential, handBackOnRefusal: remember != nil)
        active.attach(fd: fd, id: id)
    }

    public func openStream(_ configuration: CarrierConfiguration) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel) {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            let code = errno
            if code == EMFILE || code == ENFILE {
                throw TunnelFailure.outOfFileDescriptors(limit: FileDescriptors.limit, what: "socketpair(): \(String(cString: strerror(code)))")
            }
            throw TunnelFailure.internalError("socketpair(): \(String(cString: strerror(code)))")
        }
        let outcome = OneShot<TunnelFailure?>()
        let end = OneShot<TunnelEnd>()
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report, logger] event in
            switch event {
            case .established: outcome.fulfil(nil)
            case .failed(_, let failure):
                if !outcome.fulfil(failure) { report(failure.message) }
            case .refused(_, let fd, let failure):
                Glibc.close(fd)
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
            Glibc.close(pair[0])
            Glibc.close(pair[1])
            throw error
        }
        loop.bridge(socket: pair[0])
        let failure = await withTaskCancellationHandler {
            await outcome.value
        } onCancel: {
            outcome.fulfil(TunnelFailure.invalidState("cancelled"))
        }
        let serving = LiveServing(port: 0, listener: nil, loop: loop, end: end)
        if let failure {
            Glibc.close(pair[1])
            await serving.close()
            throw failure
        }
        return (TunnelStream(fileDescriptor: pair[1], end: end), serving)
    }

    static func shutdown(_ loop: CarrierLoop) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                loop.shutdown()
                done.resume()
            }
        }
    }
}

/// A listener (or none) and its carrier loop.
struct LiveServing: ServingTunnel {
    let port: UInt16
    let listener: LoopbackListener?
    let loop: CarrierLoop
    /// Fulfilled when the stream's tunnel or a single-connection listener's connection ended;
    /// nil for a listener that keeps accepting.
    let end: OneShot<TunnelEnd>?

    func close() async {
        listener?.close()
        await LiveTunnelTransport.shutdown(loop)
        end?.fulfil(.shutdown)
    }

    func ended() async -> TunnelEnd? {
        guard let end else { return nil }
        return await end.value
    }
}

/// A value delivered once, awaited by any number of tasks.
final class OneShot<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Value?
    private var waiters: [CheckedContinuation<Value, Never>] = []

    /// Sets the value unless one was set; returns whether this call set it.
    @discardableResult
    func fulfil(_ value: Value) -> Bool {
        lock.lock()
        guard result == nil else { lock.unlock(); return false }
        result = value
        let pending = waiters
        waiters = []
        lock.unlock()
        pending.forEach { $0.resume(returning: value) }
        return true
    }

    /// The value, if set.
    var current: Value? {
        lock.lock()
        defer { lock.unlock() }
        return result
    }

    var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                lock.lock()
                if let result {
                    lock.unlock()
                    continuation.resume(returning: result)
                } else {
                    waiters.append(continuation)
                    lock.unlock()
                }
            }
        }
    }
}

/// The connections a listener holds open, for `maxConcurrentConnections`: local sockets waiting
/// for their bridge, and bridges by id. An id may end before it is attached (a dial that fails at
/// once); it is then never counted.
final class ActiveConnections: @unchecked Sendable {
    private let lock = NSLock()
    private var waiting = Set<Int32>()
    private var bridges = Set<Int>()
    private var endedEarly = Set<Int>()

    /// Reserves a slot for `fd` unless `limit` slots are taken; returns whether it did.
    @discardableResult
    func reserve(_ fd: Int32, limit: Int? = nil) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if let limit, waiting.count + bridges.count >= limit { return false }
        waiting.insert(fd)
        return true
    }

    /// Frees `fd`'s slot (it was closed before any bridge).
    func release(_ fd: Int32) {
        lock.lock()
        waiting.remove(fd)
        lock.unlock()
    }

    /// `fd`'s slot now belongs to bridge `id`.
    func attach(fd: Int32, id: Int) {
        lock.lock()
        waiting.remove(fd)
        if endedEarly.remove(id) == nil { bridges.insert(id) }
        lock.unlock()
    }

    /// No connection holds a slot.
    var isIdle: Bool {
        lock.lock()
        defer { lock.unlock() }
        return waiting.isEmpty && bridges.isEmpty
    }

    /// Bridge `id` ended.
    func end(_ id: Int) {
        lock.lock()
        if bridges.remove(id) == nil { endedEarly.insert(id) }
        lock.unlock()
    }
}
