internal import CCFWebSockets
internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One local socket paired with one WebSocket to the origin. Lives on the carrier thread only.
///
/// Bytes from the local side queue in `toOrigin` and leave as binary frames; binary frames from the
/// origin queue in `toLocal`. A queue above the high watermark pauses the side that fills it
/// (`lws_rx_flow_control`), so memory stays bounded whatever either peer does. When one side ends,
/// the other first drains what it still holds, then closes — the WebSocket with a Close frame.
final class Bridge {
    let id: Int
    unowned let loop: CarrierLoop
    var localFD: Int32
    var webSocket: OpaquePointer?
    /// After the upgrade: the WebSocket's TLS session and socket, which the bridge reads and
    /// writes itself (libwebsockets owns and finally frees them).
    var ssl: OpaquePointer?
    private var edgeFD: Int32 = -1
    /// What epoll watches on each socket now.
    private var localEvents: UInt32 = 0
    private var edgeEvents: UInt32 = 0
    /// Where each side's life is (see the enums).
    var local = LocalSide.open
    var edge = EdgeSide.open
    /// The upgrade succeeded once (a fact, not a lifetime).
    var established = false
    var reportedFailure = false
    /// Framed, masked bytes the TLS stream has not taken yet.
    private var toOrigin = ByteQueue()
    /// Payload the local socket has not taken yet.
    private var toLocal = ByteQueue()
    private var reader = FrameReader()
    private var readerStopped = false
    private var random = SystemRandomNumberGenerator()
    /// Reading the local socket is paused: `toOrigin` is above the high watermark.
    private var localPaused = false
    /// Reading the TLS stream is paused: `toLocal` is above the high watermark.
    private var webSocketPaused = false
    /// `toOrigin` holds bytes of a data frame (not only control frames).
    private var queueHoldsData = false
    /// Reading the TLS stream is paused: the local side cannot take more, or the edge sends
    /// pings while it does not read even our pong (and no data of ours waits for it, so the pause
    /// cannot starve a flow that needs the edge to read first).
    private var edgeReadPaused: Bool { webSocketPaused || (owedPong != nil && !queueHoldsData) }
    /// Our Close frame and the edge's.
    private var closing = CloseHandshake()
    /// The TLS stream failed (read or write error, reset): no close_notify can follow.
    private var edgeBroken = false
    private var closeSent: Bool { closing.sent }
    private var closeReceived: Bool { closing.received }
    var tlsReason: String?
    /// Why the tunnel ends: the first cause noted wins.
    private var end: TunnelEnd?
    private var closeWebSocketWith: lws_close_status?
    private(set) var bytesToOrigin = 0
    private(set) var bytesFromOrigin = 0
    private var keepalive = KeepaliveState()
    /// The one lws timer of the WebSocket serves three deadlines (monotonic nanoseconds): the
    /// edge's answer to our Close, the end of a half-close linger, the next keepalive tick.
    private var closeDeadline: UInt64?
    private var lingerDeadline: UInt64?
    private var keepaliveDeadline: UInt64?
    /// The payload of the newest ping not answered yet because bytes for the edge are still
    /// queued: a ping flood from an edge that does not read costs one pong, not a queue of them
    /// (RFC 6455 §5.5.3 allows answering only the most recent ping).
    private var owedPong: [UInt8]?

    let handshake: Handshake

    init(id: Int, localFD: Int32, loop: CarrierLoop, handshake: Handshake) {
        self.id = id
        self.handshake = handshake
        self.localFD = localFD
        self.loop = loop
    }

    /// Both sides are gone and no callback can reach this bridge any more.
    var isFinished: Bool { edge == .released && local == .closed }

    var opaque: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }
    var logger: Logger { loop.logger }

    /// The upgrade succeeded: from here on the bridge reads and writes the TLS stream and the
    /// local socket itself (both watched by the loop's epoll), and libwebsockets only keeps the
    /// connection's TLS session and socket, its timer, and closes them at the end.
    func onEstablished(wsi: OpaquePointer) {
        established = true
        logger.debug("connection \(id): WebSocket established")
        let fd = lws_get_socket_fd(wsi)
        guard let session = lws_get_ssl(wsi), fd >= 0 else {
            logger.error("connection \(id): the WebSocket has no TLS session to carry the data")
            closeLocal()
            killWebSocket()
            return
        }
        _ = CCFShim_clamp_reads(session, 0)
        logger.debug("connection \(id): \(TLSSessionCache.handshakeSummary(session))")
        // libwebsockets must not read this socket any more: its per-byte frame parser is slow.
        _ = lws_rx_flow_control(wsi, 0)
        _ = SSL_ctrl(session, SSL_CTRL_MODE,
                     Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), nil)
        ssl = session
        edgeFD = fd
        let flags = fcntl(localFD, F_GETFL)
        _ = fcntl(localFD, F_SETFL, flags | O_NONBLOCK)
        loop.watch(fd: localFD, tag: tag(.local), events: EPOLLIN.rawValue)
        localEvents = EPOLLIN.rawValue
        loop.watch(fd: edgeFD, tag: tag(.edge), events: EPOLLIN.rawValue)
        edgeEvents = EPOLLIN.rawValue
        loop.onEvent(.established(id: id))
        // OpenSSL may already hold decrypted bytes that epoll cannot announce.
        readEdge()
    }

    enum Side: UInt64 { case local = 0, edge = 1 }

    private func tag(_ side: Side) -> UInt64 { UInt64(id) << 1 | side.rawValue }

    /// An epoll event for one of the two sockets.
    func onEvent(_ side: Side, events: UInt32) {
        let failed = events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
        switch side {
        case .local:
            guard localFD >= 0 else { return }
            if events & EPOLLOUT.rawValue != 0 || failed { flushLocal() }
            if events & EPOLLIN.rawValue != 0 || failed {
                if failed && (localPaused || !readingLocal) {
                    // Nothing more can be read or written there.
                    onLocalEnded()
                } else {
                    readLocal(peerGone: failed)
                }
            }
        case .edge:
            guard ssl != nil else { return }
            if events & EPOLLOUT.rawValue != 0 { flushEdge() }
            if events & EPOLLIN.rawValue != 0 || failed {
                if failed && edgeReadPaused { tearDownEdge() } else { readEdge() }
            }
        }
        updateInterest()
    }

    // MARK: Local → origin

    private var readingLocal: Bool { localFD >= 0 && ssl != nil && !closeSent && local == .open }

    /// Reads the local socket. `peerGone`: epoll reported a hang-up (a Unix socket's peer closed
    /// it entirely), so its EOF is the end, not a half-close worth lingering for.
    private func readLocal(peerGone: Bool = false) {
        let chunk = loop.tuning.chunkSize
        let payload = loop.txBuffer + WebSocketFrames.maxClientHeader
        // A few reads per event, so one busy connection cannot starve the others.
        for _ in 0..<4 {
            guard readingLocal, !localPaused else { return }
            let n = recv(localFD, payload, chunk, 0)
            if n > 0 {
                bytesToOrigin += n
                sendFrame(opcode: WebSocketFrames.opBinary, payload: payload, count: n)
                if n < chunk { return }
            } else if n == 0 {
                if peerGone { onLocalEnded() } else { onLocalEOF() }
                return
            } else {
                if errno == EINTR { continue }
                if errno != EAGAIN && errno != EWOULDBLOCK {
                    noteEnd(.localIOFailed(detail: "reading the local connection failed: \(Self.errorText(errno))"))
                    onLocalEnded()
                }
                return
            }
        }
    }

    /// Frames, masks and sends `count` bytes that sit in a buffer with header room before them.
    private func sendFrame(opcode: UInt8, payload: UnsafeMutableRawPointer, count: Int) {
        let key = UInt32.random(in: .min ... .max, using: &random)
        let frame = WebSocketFrames.frameInPlace(opcode: opcode, payload: payload, count: count, maskKey: key)
        writeEdge(UnsafeRawBufferPointer(start: frame, count: payload + count - frame),
                  isData: opcode == WebSocketFrames.opBinary)
    }

    private func sendControl(opcode: UInt8, payload: [UInt8]) {
        let room = loop.controlBuffer + WebSocketFrames.maxClientHeader
        let count = min(payload.count, 125)
        payload.withUnsafeBytes { room.copyMemory(from: $0.baseAddress!, byteCount: count) }
        sendFrame(opcode: opcode, payload: room, count: count)
    }

    /// Writes framed bytes to the TLS stream, queueing what the socket does not take now.
    private func writeEdge(_ bytes: UnsafeRawBufferPointer, isData: Bool) {
        guard ssl != nil else { return }
        var offset = 0
        if toOrigin.isEmpty {
            while offset < bytes.count {
                let w = sslWrite(bytes.baseAddress! + offset, bytes.count - offset)
                if w > 0 {
                    offset += w
                } else if w == 0 {
                    break
                } else {
                    tearDownEdge()
                    return
                }
            }
        }
        if offset < bytes.count {
            toOrigin.append(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            if isData { queueHoldsData = true }
            if toOrigin.count >= loop.tuning.highWatermark { localPaused = true }
        }
    }

    /// SSL_write: bytes written, 0 when the socket is full, -1 when the stream failed.
    private func sslWrite(_ p: UnsafeRawPointer, _ count: Int) -> Int {
        guard let ssl else { return -1 }
        ERR_clear_error()
        let r = SSL_write(ssl, p, Int32(min(count, 1 << 30)))
        if r > 0 { return Int(r) }
        let error = SSL_get_error(ssl, r)
        let code = errno
        switch error {
        case SSL_ERROR_WANT_WRITE, SSL_ERROR_WANT_READ: return 0
        default:
            edgeBroken = true
            logger.debug("connection \(id): writing to the WebSocket failed")
            if error == SSL_ERROR_SYSCALL && (code == ECONNRESET || code == EPIPE) {
                noteEnd(.reset(detail: Self.errorText(code)))
            } else {
                noteEnd(.writeFailed(detail: error == SSL_ERROR_SYSCALL ? Self.errorText(code) : "TLS error \(error)"))
            }
            return -1
        }
    }

    private func flushEdge() {
        while !toOrigin.isEmpty, ssl != nil {
            var failed = false
            let sent = toOrigin.consume(upTo: 1 << 20) { chunk in
                let w = sslWrite(chunk.baseAddress!, chunk.count)
                if w < 0 { failed = true }
                return max(0, w)
            }
            if failed { tearDownEdge(); return }
            if sent == 0 { break }
        }
        if localPaused, toOrigin.count <= loop.tuning.lowWatermark { localPaused = false }
        if toOrigin.isEmpty { queueHoldsData = false }
        if toOrigin.isEmpty, let pong = owedPong, !closeSent {
            owedPong = nil
            sendControl(opcode: WebSocketFrames.opPong, payload: pong)
            // Reading resumes at once: OpenSSL may hold bytes epoll cannot announce.
            if !edgeReadPaused { readEdge() }
        }
        if toOrigin.isEmpty, closeSent, closeReceived { tearDownEdge() }
    }

    /// The local peer sent its last byte (stdin EOF, `shutdown(SHUT_WR)`, or a close we cannot
    /// tell apart from one). A WebSocket has no half-close, so the Close frame waits: the edge's
    /// reply still reaches the local side until the edge closes or the linger passes.
    private func onLocalEOF() {
        let linger = loop.configuration.halfCloseLingerSeconds
        guard linger > 0, !closeSent else {
            onLocalEnded()
            return
        }
        logger.debug("connection \(id): local side finished sending; lingering up to \(linger) s for the edge")
        noteEnd(.closedByLocal(code: UInt16(truncatingIfNeeded: LWS_CLOSE_STATUS_NORMAL.rawValue)))
        local = .inputEnded
        lingerDeadline = Self.now() + UInt64(linger * 1_000_000_000)
        rearmTimer()
    }

    /// The local peer closed (or failed): the WebSocket ends with a Close frame after what is queued.
    private func onLocalEnded() {
        logger.debug("connection \(id): local side closed")
        noteEnd(.closedByLocal(code: UInt16(truncatingIfNeeded: (closeWebSocketWith ?? LWS_CLOSE_STATUS_NORMAL).rawValue)))
        closeLocal()
        sendClose(closeWebSocketWith ?? LWS_CLOSE_STATUS_NORMAL)
    }

    // MARK: Origin → local

    private func readEdge() {
        let buffer = loop.rxBuffer
        let capacity = loop.rxCapacity
        var budget = 1 << 20
        while ssl != nil, !edgeReadPaused, budget > 0 {
            var filled = 0
            var drained = false
            var ended = false
            var endDetail = ""

            // Whole records only (the space left is at least one record), so OpenSSL keeps no
            // decrypted bytes back that epoll would not announce.
            while capacity - filled >= 16 << 10 + 256, let ssl {
                ERR_clear_error()
                let r = SSL_read(ssl, buffer + filled, Int32(capacity - filled))
                if r > 0 { filled += Int(r); continue }
                let code = errno
                let error = SSL_get_error(ssl, r)
                if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE {
                    drained = true
                } else {
                    ended = true
                    switch error {
                    case SSL_ERROR_ZERO_RETURN: endDetail = "TLS closed without a WebSocket Close"
                    case SSL_ERROR_SYSCALL: endDetail = code == 0 ? "the connection ended without a WebSocket Close" : Self.errorText(code)
                    default: endDetail = "TLS error"
                    }
                }
                break
            }
            if filled > 0 {
                keepalive.heardFromEdge()
                onEdgeBytes(UnsafeRawBufferPointer(start: buffer, count: filled))
            }
            budget -= filled
            if ended {
                edgeBroken = true
                logger.debug("connection \(id): the WebSocket's TLS stream ended (\(endDetail))")
                if !closeReceived { noteEnd(.reset(detail: endDetail)) }
                tearDownEdge()
                return
            }
            if drained { return }
        }
    }

    private func onEdgeBytes(_ bytes: UnsafeRawBufferPointer) {
        // After a Close or a protocol violation nothing more is parsed; the edge's TLS stream is
        // read until it ends or the Close timer fires.
        if readerStopped { return }
        reader.feed(bytes) { event in
            switch event {
            case .data(let payload):
                if closeSent || localFD < 0 { return true }   // nobody to deliver to any more
                bytesFromOrigin += payload.count
                deliverToLocal(payload)
                return true
            case .pong:
                return true
            case .ping(let payload):
                guard !closeSent else { return true }
                if toOrigin.isEmpty {
                    sendControl(opcode: WebSocketFrames.opPong, payload: payload)
                } else {
                    owedPong = Array(payload.prefix(125))
                }
                return true
            case .close(let payload):
                let (verdict, action) = closing.receive(payload)
                switch verdict {
                case .valid(let code):
                    logger.debug("connection \(id): the edge sent a Close frame (\(code.map(String.init) ?? "no code"))")
                    noteEnd(.closedByEdge(code: code))
                case .malformed(let what):
                    logger.debug("connection \(id): the edge sent \(what); answering with Close 1002")
                    noteEnd(.protocolViolation(detail: what))
                }
                if case .sendClose(let answer) = action {
                    sendControl(opcode: WebSocketFrames.opClose, payload: answer)
                    armCloseDeadline()
                }
                readerStopped = true
                if toOrigin.isEmpty { tearDownEdge() }
                return false
            case .text:
                if !closeSent {
                    logger.debug("connection \(id): the origin sent a text frame; closing (only binary frames carry tunnel bytes)")
                    noteEnd(.protocolViolation(detail: "a text frame; only binary frames carry tunnel bytes"))
                    closeWebSocketWith = LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE
                    sendClose(LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE)
                }
                return true
            case .violation(let what):
                logger.debug("connection \(id): the edge sent \(what); closing the tunnel")
                noteEnd(.protocolViolation(detail: what))
                readerStopped = true
                sendClose(LWS_CLOSE_STATUS_PROTOCOL_ERR)
                return false
            }
        }
    }

    private func deliverToLocal(_ payload: UnsafeRawBufferPointer) {
        var offset = 0
        if toLocal.isEmpty {
            while offset < payload.count {
                let n = send(localFD, payload.baseAddress! + offset, payload.count - offset, Int32(MSG_NOSIGNAL))
                if n > 0 { offset += n; continue }
                if n < 0 && errno == EINTR { continue }
                if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
                noteEnd(.localIOFailed(detail: "writing to the local connection failed: \(Self.errorText(n < 0 ? errno : EPIPE))"))
                onLocalEnded()
                return
            }
        }
        if offset < payload.count {
            toLocal.append(UnsafeRawBufferPointer(rebasing: payload[offset...]))
            if toLocal.count >= loop.tuning.highWatermark { webSocketPaused = true }
        }
    }

    private func flushLocal() {
        while !toLocal.isEmpty, localFD >= 0 {
            var failed = false
            var failure: Int32 = 0
            let sent = toLocal.consume(upTo: 1 << 20) { chunk in
                let n = send(localFD, chunk.baseAddress!, chunk.count, Int32(MSG_NOSIGNAL))
                if n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                    failed = true
                    failure = errno
                }
                return max(0, n)
            }
            if failed {
                noteEnd(.localIOFailed(detail: "writing to the local connection failed: \(Self.errorText(failure))"))
                onLocalEnded()
                return
            }
            if sent == 0 { break }
        }
        if webSocketPaused, toLocal.count <= loop.tuning.lowWatermark {
            webSocketPaused = false
            // Resume at once: epoll only announces what is in the kernel.
            readEdge()
        }
        if toLocal.isEmpty, edge != .open || local == .closing { closeLocal() }
    }

    // MARK: Interest

    private func updateInterest() {
        if localFD >= 0 {
            var want: UInt32 = 0
            if readingLocal && !localPaused { want |= EPOLLIN.rawValue }
            if !toLocal.isEmpty { want |= EPOLLOUT.rawValue }
            if want != localEvents {
                localEvents = want
                loop.modify(fd: localFD, tag: tag(.local), events: want)
            }
        }
        if ssl != nil, edgeFD >= 0 {
            var want: UInt32 = 0
            if !edgeReadPaused { want |= EPOLLIN.rawValue }
            if !toOrigin.isEmpty { want |= EPOLLOUT.rawValue }
            if want != edgeEvents {
                edgeEvents = want
                loop.modify(fd: edgeFD, tag: tag(.edge), events: want)
            }
        }
    }

    // MARK: Keepalive

    func armKeepalive(_ wsi: OpaquePointer) {
        let seconds = loop.configuration.keepaliveSeconds
        guard seconds > 0 else { return }
        keepaliveDeadline = Self.now() + UInt64(seconds) * 1_000_000_000
        rearmTimer()
    }

    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Sets the lws timer to the earliest deadline.
    private func rearmTimer() {
        guard let webSocket, let next = [closeDeadline, lingerDeadline, keepaliveDeadline].compactMap({ $0 }).min()
        else { return }
        let now = Self.now()
        let micros = next > now ? (next - now) / 1_000 : 0
        lws_set_timer_usecs(webSocket, lws_usec_t(max(1, micros)))
    }

    func onTimer(_ wsi: OpaquePointer) -> Int32 {
        guard wsi == webSocket, edge == .open else { return 0 }
        let now = Self.now()
        if let deadline = closeDeadline, now >= deadline {
            // The edge did not answer our Close in time.
            closeDeadline = nil
            tearDownEdge()
            return 0
        }
        if let deadline = lingerDeadline, now >= deadline {
            lingerDeadline = nil
            logger.debug("connection \(id): the half-close linger passed; closing")
            onLocalEnded()
            updateInterest()
        }
        if let deadline = keepaliveDeadline, now >= deadline, !closeSent {
            keepaliveTick()
        }
        rearmTimer()
        return 0
    }

    /// Every interval (`KeepaliveState` decides): a ping after an interval of silence or of
    /// nothing from the edge; the tunnel is closed after three intervals without a word from it.
    private func keepaliveTick() {
        let seconds = loop.configuration.keepaliveSeconds
        keepaliveDeadline = nil
        guard seconds > 0 else { return }
        switch keepalive.tick(sent: bytesToOrigin, received: bytesFromOrigin) {
        case .close:
            logger.debug("connection \(id): the edge did not answer keepalive pings for \(KeepaliveState.deadAfter * seconds) s; closing the tunnel")
            noteEnd(.keepaliveTimeout(after: .seconds(KeepaliveState.deadAfter * seconds)))
            closeBoth()
            return
        case .ping:
            sendControl(opcode: WebSocketFrames.opPing, payload: [])
            updateInterest()
        case .none:
            break
        }
        keepaliveDeadline = Self.now() + UInt64(seconds) * 1_000_000_000
    }

    // MARK: Endings

    /// Sends a Close frame (after what is queued) and waits a little for the edge's Close.
    private func sendClose(_ status: lws_close_status) {
        guard ssl != nil else { return }
        guard case .sendClose(let payload) = closing.close(code: UInt16(truncatingIfNeeded: status.rawValue)) else { return }
        sendControl(opcode: WebSocketFrames.opClose, payload: payload)
        armCloseDeadline()
    }

    /// The edge has 2 s to answer our Close (or to take the rest of what is queued).
    private func armCloseDeadline() {
        lingerDeadline = nil
        keepaliveDeadline = nil
        closeDeadline = Self.now() + 2_000_000_000
        rearmTimer()
    }

    /// Stops using the TLS stream and lets libwebsockets close it (no frame of its own: the
    /// Close frames are ours). The local side gets what is queued for it, then closes.
    private func tearDownEdge() {
        // A Close handshake we took part in ends the TLS session properly too (close_notify),
        // unless the stream already broke.
        if let ssl, closeSent, !edgeBroken {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
        }
        if edgeFD >= 0 {
            loop.unwatch(fd: edgeFD)
            edgeFD = -1
        }
        ssl = nil
        edge.finish()
        toOrigin.reset()
        killWebSocket()
        if toLocal.isEmpty { closeLocal() }
    }

    private func killWebSocket() {
        if let webSocket { lws_set_timeout(webSocket, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC) }
    }

    private func closeLocal() {
        guard localFD >= 0 else { return }
        if established { loop.unwatch(fd: localFD) }
        Glibc.close(localFD)
        localFD = -1
        local = .closed
        toLocal.reset()
        finishIfDone()
    }

    /// libwebsockets closed the WebSocket (after our teardown, or on its own: context destroyed).
    func onWebSocketClosed() {
        logger.debug("connection \(id): WebSocket closed")
        if edgeFD >= 0 {
            loop.unwatch(fd: edgeFD)
            edgeFD = -1
        }
        ssl = nil
        webSocket = nil
        edge.finish()
        toOrigin.reset()
        if toLocal.isEmpty { closeLocal() } else { updateInterest() }
        finishIfDone()
    }

    private func closeWebSocket(status: lws_close_status) {
        closeWebSocketWith = status
        sendClose(status)
        updateInterest()
    }

    /// Closes both sides now (shutdown): the WebSocket with a Close frame after what is queued.
    func closeBoth() {
        noteEnd(.shutdown)
        if local != .closed { local = .closing }
        if established {
            closeWebSocket(status: LWS_CLOSE_STATUS_GOINGAWAY)
            if toLocal.isEmpty { closeLocal() }
            if ssl == nil { killWebSocket() }
        } else if local != .closed {
            Glibc.close(localFD)
            localFD = -1
            local = .closed
        }
    }

    /// After the loop's context is gone: close what libwebsockets did not own.
    func abandon() {
        if localFD >= 0 {
            Glibc.close(localFD)
            localFD = -1
        }
    }

    /// Remembers why the tunnel ends, unless an earlier cause is known.
    private func noteEnd(_ reason: TunnelEnd) {
        if end == nil { end = reason }
    }

    static func errorText(_ code: Int32) -> String { String(cString: strerror(code)) }

    func finishIfDone() {
        guard isFinished else { return }
        if !reportedFailure {
            let reason = end ?? .reset(detail: "the WebSocket closed")
            logger.debug("connection \(id) ended: \(reason)")
            loop.onEvent(.closed(id: id, toOrigin: bytesToOrigin, fromOrigin: bytesFromOrigin, reason: reason))
        }
        loop.forget(self)
    }
}

/// The local socket's life, from the bridge's side.
enum LocalSide: Equatable {
    /// Read and written.
    case open
    /// The local peer sent its last byte (EOF): only written to, for the edge's reply
    /// (half-close), until the edge closes or the linger passes.
    case inputEnded
    /// To be closed once what is queued for it is written (shutdown).
    case closing
    /// Closed (or handed back): nothing of it remains.
    case closed
}

/// The WebSocket's life, from the bridge's side.
enum EdgeSide: Equatable {
    /// Dialling or established: bytes may come and go.
    case open
    /// No more bytes will come from or go to it; libwebsockets still holds the wsi.
    case done
    /// libwebsockets destroyed the wsi (or never made one): no callback can follow.
    case released

    /// No more I/O (a released side stays released).
    mutating func finish() {
        if self == .open { self = .done }
    }
}
