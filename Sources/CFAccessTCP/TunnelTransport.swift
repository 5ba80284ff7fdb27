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

    init(fileDescriptor: Int32) { self.fileDescriptor = fileDescriptor }

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
}

/// The effectful parts a session drives; replaced by scripted doubles in tests.
public protocol TunnelTransport: Sendable {
    /// Opens one WebSocket with `configuration` to prove the edge accepts it, then closes it.
    func probe(_ configuration: CarrierConfiguration) async -> TunnelFailure?
    /// Listens on `address` and bridges accepted connections within `limits`.
    func serve(_ configuration: CarrierConfiguration, on address: ListenAddress,
               limits: ListenerLimits) async throws(TunnelFailure) -> any ServingTunnel
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
                      limits: ListenerLimits) async throws(TunnelFailure) -> any ServingTunnel {
        let active = LockedBox(Set<Int>())
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report, logger] event in
            switch event {
            case .established(let id):
                logger.debug("connection \(id) established")
            case .failed(let id, let failure):
                active.withLock { _ = $0.remove(id) }
                report(failure.message)
            case .closed(let id, let up, let down):
                active.withLock { _ = $0.remove(id) }
                logger.debug("connection \(id) closed", metadata: ["sent": "\(up)", "received": "\(down)"])
            }
        }
        try loop.start()
        let listener: LoopbackListener
        do {
            listener = try LoopbackListener(address: address)
        } catch {
            await Self.shutdown(loop)
            throw error
        }
        let accepted = LockedBox(0)
        listener.startAccepting { [logger] fd in
            let first = accepted.withLock { n -> Bool in n += 1; return n == 1 }
            if limits.stopAcceptingAfterFirstConnection, first { listener.close() }
            if let max = limits.maxConcurrentConnections, active.withLock({ $0.count }) >= max {
                logger.info("refusing a local connection: \(max) already open (maxConcurrentConnections)")
                Glibc.close(fd)
                return
            }
            // Reserve the slot before the bridge exists, so a burst cannot overshoot the limit.
            let reservation = -Int(fd) - 1
            active.withLock { _ = $0.insert(reservation) }
            let id = loop.bridge(socket: fd)
            active.withLock { set in
                set.remove(reservation)
                set.insert(id)
            }
        }
        return LiveServing(port: UInt16(listener.port), listener: listener, loop: loop)
    }

    public func openStream(_ configuration: CarrierConfiguration) async throws(TunnelFailure) -> (TunnelStream, any ServingTunnel) {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw TunnelFailure.internalError("socketpair(): \(String(cString: strerror(errno)))")
        }
        let outcome = OneShot<TunnelFailure?>()
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report] event in
            switch event {
            case .established: outcome.fulfil(nil)
            case .failed(_, let failure):
                if !outcome.fulfil(failure) { report(failure.message) }
            case .closed: outcome.fulfil(TunnelFailure.protocolViolation("the WebSocket closed before it opened"))
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
        let serving = LiveServing(port: 0, listener: nil, loop: loop)
        if let failure {
            Glibc.close(pair[1])
            await serving.close()
            throw failure
        }
        return (TunnelStream(fileDescriptor: pair[1]), serving)
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

    func close() async {
        listener?.close()
        await LiveTunnelTransport.shutdown(loop)
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
