import AccessCore
import AccessTransport
import Dispatch
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// One tunnel with no TCP port: bytes in, bytes out, as ``AccessTunnel/openStream(hostname:method:)``
/// returns it.
///
/// Swift callers read and write it asynchronously:
///
/// ```swift
/// let stream = try await tunnel.openStream(hostname: "ssh.example.com", method: method)
/// try await stream.write(Array("hello\n".utf8))
/// stream.finishWriting()                          // half-close: the edge's reply still arrives
/// for try await chunk in stream.inbound { handle(chunk) }
/// print(await stream.ended)                       // why the tunnel ended
/// ```
///
/// A C library or an event loop that wants a socket instead takes the descriptor, the escape
/// hatch: ``fileDescriptor`` (still owned by the stream) for libssh2-style consumers, or
/// ``releaseFileDescriptor()`` to own it, e.g. for SwiftNIO's
/// `ClientBootstrap.withConnectedSocket(_:)`. The descriptor is one end of a connected Unix
/// stream socket; the tunnel's carrier holds the other. Use either the async methods or the
/// descriptor, not both; and one reader and one writer at a time.
public final class TunnelStream: Sendable {
    /// How much ``read(upTo:)`` and ``inbound`` read at most at once.
    public static let defaultChunkSize = 64 * 1024

    private struct State {
        /// The descriptor, until `close()` or `releaseFileDescriptor()`.
        var descriptor: Int32?
        /// Readiness waits in progress, by id: cancelled (and so woken) before the descriptor closes.
        var waits: [Int: DispatchSourceProtocol] = [:]
        var nextWait = 0
    }

    private let raw: Int32
    private let host: String
    private let state: LockedBox<State>
    private let end: OneShot<TunnelEnd>

    /// The stream over `descriptor`, whose tunnel to `host` reports its end through `end`.
    package init(descriptor: Int32, host: String, end: OneShot<TunnelEnd> = OneShot()) {
        raw = descriptor
        self.host = host
        state = LockedBox(State(descriptor: descriptor))
        self.end = end
    }

    /// The stream of a tunnel whose local side is a `LocalPair` the carrier serves itself: no
    /// descriptor of its own (its byte methods fail with `.invalidState`); ``ended`` works.
    package init(joinedTo host: String, end: OneShot<TunnelEnd>) {
        raw = -1
        self.host = host
        state = LockedBox(State(descriptor: nil))
        self.end = end
    }

    deinit {
        if let descriptor = state.withLock({ $0.descriptor }) { FileDescriptors.close(descriptor) }
    }

    // MARK: Bytes

    /// The bytes from the edge, chunk by chunk, until the tunnel ends: an async sequence for
    /// `for try await`. It finishes when the edge finished cleanly and throws the
    /// ``TunnelFailure`` of a tunnel that ended otherwise (reset, keepalive timeout, …).
    public var inbound: Inbound { Inbound(stream: self) }

    /// Reads the next bytes from the edge: at most `maximumCount`, as soon as there are any.
    ///
    /// - Returns: the bytes, or nil once the edge has finished and everything was read.
    /// - Throws: ``TunnelFailure``: the failure that ended the tunnel (kind `.connectionLost`,
    ///   `.protocolViolation`, …), `.invalidState` after ``close()`` or
    ///   ``releaseFileDescriptor()``, `.cancelled` when the calling task is cancelled.
    public func read(upTo maximumCount: Int = TunnelStream.defaultChunkSize) async throws(TunnelFailure) -> [UInt8]? {
        let count = max(1, maximumCount)
        while true {
            let fd = try descriptor(for: "read")
            var buffer = [UInt8](repeating: 0, count: count)
            let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, count, Int32(MSG_DONTWAIT)) }
            if got > 0 {
                buffer.removeSubrange(got...)
                return buffer
            }
            if got == 0 { return try await finished() }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try await waitUntilReady(fd, reading: true)
            case ECONNRESET: return try await finished()
            default: throw Self.localFailure("reading the tunnel stream", code)
            }
        }
    }

    /// Writes every byte of `bytes`, waiting while the tunnel's buffers are full.
    ///
    /// - Throws: ``TunnelFailure``: the failure that ended the tunnel, or kind `.connectionLost`
    ///   when it is gone; `.invalidState` after ``finishWriting()``, ``close()`` or
    ///   ``releaseFileDescriptor()``; `.cancelled` when the calling task is cancelled (some of
    ///   the bytes may have been sent).
    public func write(_ bytes: some Collection<UInt8>) async throws(TunnelFailure) {
        let data = Array(bytes)
        var sent = 0
        while sent < data.count {
            let fd = try descriptor(for: "write")
            let done = data.withUnsafeBytes {
                send(fd, $0.baseAddress! + sent, data.count - sent, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))
            }
            if done >= 0 {
                sent += done
                continue
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: try await waitUntilReady(fd, reading: false)
            case EPIPE, ECONNRESET:
                throw await endFailure() ?? .invalidState("the tunnel to \(host) has ended; nothing more can be written")
            default: throw Self.localFailure("writing the tunnel stream", code)
            }
        }
    }

    /// Says that nothing more will be written (a half-close, like `shutdown(SHUT_WR)`): the
    /// edge's bytes still arrive until the edge closes, or until the tunnel's half-close linger
    /// (``AccessTunnel/Options/halfCloseLinger``) passes. Idempotent.
    public func finishWriting() {
        guard let fd = state.withLock({ $0.descriptor }) else { return }
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    /// Closes the stream: the tunnel closes with a WebSocket Close frame, and a read or write in
    /// progress ends with kind `.invalidState`. Idempotent.
    public func close() {
        let (descriptor, waits) = state.withLock { s -> (Int32?, [DispatchSourceProtocol]) in
            defer { s.descriptor = nil; s.waits = [:] }
            return (s.descriptor, Array(s.waits.values))
        }
        // Dispatch wants its sources cancelled before their descriptor is closed.
        waits.forEach { $0.cancel() }
        if let descriptor { FileDescriptors.close(descriptor) }
    }

    // MARK: How it ended

    /// Why the tunnel ended: returns once its WebSocket and the carrier's side of the socket are
    /// closed (a Close handshake by either side, a reset, a protocol violation, a keepalive
    /// timeout, …). See `TunnelEnd.isClean`.
    public var ended: TunnelEnd {
        get async { await end.value }
    }

    /// The reason, if the tunnel has ended already.
    public var endedReason: TunnelEnd? { end.current }

    // MARK: The descriptor (escape hatch)

    /// The socket itself, for a C library that reads and writes it (libssh2) — the escape hatch.
    /// The stream still owns it: it stays open until ``close()``, and must not be closed by the
    /// caller. It is a blocking socket unless the caller changes that.
    public var fileDescriptor: FileDescriptor { FileDescriptor(rawValue: raw) }

    /// Hands the socket over: the caller owns it from now on and closes it (closing it closes
    /// the tunnel). For SwiftNIO, `ClientBootstrap(group:).withConnectedSocket(descriptor.rawValue)`.
    /// The stream's own methods no longer work (kind `.invalidState`); ``ended`` still does.
    public func releaseFileDescriptor() -> FileDescriptor {
        let waits = state.withLock { s -> [DispatchSourceProtocol] in
            defer { s.descriptor = nil; s.waits = [:] }
            return Array(s.waits.values)
        }
        waits.forEach { $0.cancel() }
        return FileDescriptor(rawValue: raw)
    }

    // MARK: Internals

    private func descriptor(for what: String) throws(TunnelFailure) -> Int32 {
        guard let fd = state.withLock({ $0.descriptor }) else {
            throw .invalidState("cannot \(what): the tunnel stream was closed or its descriptor handed over")
        }
        return fd
    }

    /// The end of the bytes: nil after a clean end, else the failure that ended the tunnel.
    /// The carrier reports the end once its WebSocket is gone, right after it closes its side.
    private func finished() async throws(TunnelFailure) -> [UInt8]? {
        if let failure = await endFailure() { throw failure }
        return nil
    }

    /// The failure that ended the tunnel, if it ended badly (waiting, bounded, for the carrier's
    /// report); nil for a clean end or no report.
    private func endFailure() async -> TunnelFailure? {
        let reason: TunnelEnd?
        if let known = end.current {
            reason = known
        } else {
            reason = await end.value(within: 10)
        }
        return reason?.failure(host: host)
    }

    /// Waits until `fd` can be read (or written) without blocking, or the stream is closed, or
    /// the task is cancelled.
    private func waitUntilReady(_ fd: Int32, reading: Bool) async throws(TunnelFailure) {
        enum Wake: Sendable { case ready, closed, cancelled }
        let woken = OneShot<Wake>()
        let source: DispatchSourceProtocol = reading
            ? DispatchSource.makeReadSource(fileDescriptor: fd, queue: Self.queue)
            : DispatchSource.makeWriteSource(fileDescriptor: fd, queue: Self.queue)
        source.setEventHandler { woken.fulfil(.ready) }
        source.setCancelHandler { woken.fulfil(.closed) }
        let id: Int? = state.withLock { s in
            guard s.descriptor == fd else { return nil }
            s.nextWait += 1
            s.waits[s.nextWait] = source
            return s.nextWait
        }
        guard let id else {
            throw .invalidState("the tunnel stream was closed or its descriptor handed over")
        }
        source.resume()
        let wake = await withTaskCancellationHandler {
            await woken.value
        } onCancel: {
            woken.fulfil(.cancelled)
        }
        let registered = state.withLock { $0.waits.removeValue(forKey: id) }
        registered?.cancel()
        switch wake {
        case .ready: return
        case .closed: throw .invalidState("the tunnel stream was closed while waiting")
        case .cancelled: throw .cancelled("waiting for the tunnel to \(host)")
        }
    }

    private static func localFailure(_ what: String, _ code: Int32) -> TunnelFailure {
        TunnelFailure(category: .localResource, isRetryable: false, message: "\(what) failed: \(SystemError(code).text)",
                      detail: "errno \(code)", kind: .localIO)
    }

    /// The queue that delivers readiness; its handlers only resume waiting tasks.
    private static let queue = DispatchQueue(label: "cf-access-tcp tunnel stream readiness")
}

extension TunnelStream {
    /// The bytes from the edge as an async sequence of chunks (see ``TunnelStream/inbound``).
    public struct Inbound: AsyncSequence, Sendable {
        /// A chunk: the bytes one read returned (at most ``TunnelStream/defaultChunkSize``).
        public typealias Element = [UInt8]
        /// What iterating throws.
        public typealias Failure = TunnelFailure

        let stream: TunnelStream

        /// An iterator that reads the stream.
        public func makeAsyncIterator() -> Iterator { Iterator(stream: stream) }

        /// Reads the stream chunk by chunk.
        public struct Iterator: AsyncIteratorProtocol {
            let stream: TunnelStream

            /// The next chunk, or nil once the edge finished cleanly.
            public mutating func next() async throws(TunnelFailure) -> [UInt8]? {
                try await stream.read()
            }

            /// The next chunk, or nil once the edge finished cleanly.
            public mutating func next(isolation actor: isolated (any Actor)?) async throws(TunnelFailure) -> [UInt8]? {
                try await stream.read()
            }
        }
    }
}
