internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One local socket paired with one WebSocket to the origin: the I/O executor of a
/// `BridgeStateMachine`. Lives on the carrier thread only.
///
/// Bytes from the local side are framed in place and written to the TLS stream, what it does not
/// take waiting in `toOrigin`; payload of the edge's binary frames goes to the local socket, what
/// it does not take waiting in `toLocal`. The executor reads a side only when the machine says so,
/// reports every read, end, frame and queue size to it, and performs the actions it gets back. The
/// dial (proxy, TLS, upgrade) is in `Bridge+Dial.swift`.
final class Bridge {
    /// The connection's id (a spare's own, in a range of its loop's, until a connection adopts it).
    var id: Int
    unowned let loop: CarrierLoop
    /// The connection's request and credential (for a spare, the configuration's until adopted).
    var handshake: Handshake
    /// Dialled ahead for the next local connection: no local socket and no request yet.
    var isSpare = false
    /// A connection took this spare over once its TLS was open: should the edge turn out to have
    /// closed it, the dial starts again on a new connection.
    var adoptedParked = false
    /// Bytes of the upgrade's answer have come.
    var answerStarted = false
    /// How a spare's TLS handshake went ("TLS session resumed (…)"), for its connection's log.
    var spareHandshake = ""
    /// Payload from the edge has reached the local socket.
    private var deliveredAny = false
    /// The decisions.
    private(set) var machine: BridgeStateMachine
    /// The local socket, or the descriptor read for the edge when the local side is a
    /// `LocalPair` (stdin).
    var localFD: Int32
    /// The descriptor written with the edge's bytes when the local side is a `LocalPair`
    /// (stdout); -1 when `localFD`, a socket, carries both directions.
    var outputFD: Int32 = -1
    /// What messages call the local side's two directions.
    var localNames = LocalNames.socket
    /// The local socket (or the pair's input) is in the loop's epoll set: from the 101 on; a
    /// pair's input only while it is read, since a pipe whose writer closed reports a hang-up
    /// to every `epoll_wait` until it leaves the set.
    private var localWatched = false
    /// The pair's output is in the epoll set (from the 101 on, for its errors at least).
    private var outputWatched = false
    private var outputEvents: UInt32 = 0
    /// The reader of the pair's output is gone (epoll said so): the next write fails.
    private var outputGone = false
    /// The pair's file status flags before the loop made them non-blocking, restored before
    /// they are closed (a pipe's description may be shared with another process).
    private var pairFlags: (input: Int32, output: Int32) = (0, 0)
    /// The connection's TLS session from the start of the handshake; ours to free.
    var session: OpaquePointer?
    var edgeFD: Int32 = -1
    /// What epoll watches on each socket now.
    private var localEvents: UInt32 = 0
    var edgeEvents: UInt32 = 0
    /// The edge's socket is in the loop's epoll set.
    var edgeWatched = false
    /// What OpenSSL waits for, per direction (issue 28.1): `SSL_read` said WANT_WRITE (a TLS 1.3
    /// KeyUpdate answer or an alert must go out first), so reading waits for the socket to take
    /// bytes; `SSL_write` said WANT_READ (the edge's records must come first), so writing waits
    /// for bytes from the edge. Waiting for the direction of the call instead spins.
    private var readWantsWrite = false
    private var writeWantsRead = false
    /// Reading the TLS stream failed in the read whose bytes are being handled: nothing more is
    /// written to it (a pong for a ping in those bytes would only fail, and name the wrong side).
    private var edgeReadFailed = false
    /// The dial failed and was reported.
    private var failed = false
    /// The deadline the loop's timer holds for this bridge, and the generation of that request.
    var scheduledDeadline: UInt64?
    var timerGeneration = 0
    /// How deep `apply` calls are nested, and whether the edge's socket was closed meanwhile: the
    /// machine hears of it once the actions in progress are all done.
    private var applyDepth = 0
    private var edgeReleasePending = false

    /// The dial (`Bridge+Dial.swift`): where it goes, where it is, what it sends and expects.
    var route = EdgeRoute(address: "", port: 0)
    var dialStage = DialStage.connecting
    var headReader = ResponseHeadReader()
    var proxyRequest: [UInt8] = []
    var upgradeRequest: [UInt8] = []
    /// Bytes of the current request already sent.
    var dialSent = 0
    var expectedAccept = ""
    /// When the dial fails for want of an answer (monotonic nanoseconds).
    var dialDeadline: UInt64?

    /// Framed, masked bytes the TLS stream has not taken yet.
    private var toOrigin = ByteQueue()
    /// TLS records made and not yet sent (from the WebSocket's opening on; nil before, when
    /// OpenSSL writes to the socket itself).
    private var cipher: CipherSink?
    /// Where OpenSSL reads the edge's records from (from the WebSocket's opening on; nil before,
    /// when it reads the socket itself).
    private var source: RecordSource?
    /// What the bridge's own record layer starts from, gathered during the dial; nil once the
    /// WebSocket is open.
    var handover: TLSHandover?
    /// The record layer once the WebSocket is open, when it is ours (TLS 1.3): `session` is then
    /// freed, and `cipher` and `source` carry the records.
    private var records: TLSRecords?
    /// The TLS stream is there: OpenSSL's session, or our own records.
    private var tlsOpen: Bool { session != nil || records != nil }
    /// Payload the local socket has not taken yet.
    private var toLocal = ByteQueue()
    private var reader = FrameReader()

    /// `outputFD` and `localNames`: a `LocalPair`'s output and names (`localFD` is its input).
    init(id: Int, localFD: Int32, outputFD: Int32 = -1, localNames: LocalNames = .socket, loop: CarrierLoop,
         handshake: Handshake) {
        self.id = id
        self.handshake = handshake
        self.localFD = localFD
        self.outputFD = outputFD
        self.localNames = localNames
        self.loop = loop
        let configuration = loop.configuration
        var settings = BridgeStateMachine.Settings()
        settings.highWatermark = loop.tuning.highWatermark
        settings.lowWatermark = loop.tuning.lowWatermark
        settings.keepaliveSeconds = configuration.keepaliveSeconds
        settings.lingerNanoseconds = UInt64(max(0, configuration.halfCloseLingerSeconds) * 1_000_000_000)
        machine = BridgeStateMachine(settings: settings)
    }

    /// The local side is a `LocalPair` (two descriptors) rather than one socket.
    var isPair: Bool { outputFD >= 0 }
    /// Where the edge's bytes are written.
    private var writeFD: Int32 { outputFD >= 0 ? outputFD : localFD }

    var opaque: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }
    var logger: Logger { loop.logger }

    /// Monotonic nanoseconds (CLOCK_MONOTONIC, the loop's timerfd clock).
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    // MARK: The machine

    /// Tells the machine what happened and performs what it says, in order.
    func apply(_ event: BridgeStateMachine.Event) {
        applyDepth += 1
        let endBefore = machine.end
        let actions = machine.handle(event, now: Self.now())
        // Said before the actions run: once they close the local socket, its peer may look at the log.
        if endBefore == nil, case .keepaliveTimeout(let silence)? = machine.end {
            logger.debug("connection \(id): the edge did not answer keepalive pings for \(silence.components.seconds) s; closing the tunnel")
        }
        for action in actions {
            perform(action)
        }
        applyDepth -= 1
        if applyDepth == 0, edgeReleasePending {
            edgeReleasePending = false
            apply(.edgeReleased)
        }
    }

    private func perform(_ action: BridgeStateMachine.Action) {
        switch action {
        case .sendControl(let opcode, let payload):
            let room = loop.controlBuffer + WebSocketFrames.maxClientHeader
            let count = min(payload.count, 125)
            payload.withUnsafeBytes { room.copyMemory(from: $0.baseAddress!, byteCount: count) }
            if sendFrame(opcode: opcode, payload: room, count: count) {
                apply(.toOriginWritten(count: pendingToOrigin, appendedData: false))
            }
        case .closeLocal:
            closeLocalSocket()
        case .tearDownEdge(let closeNotify):
            if closeNotify, let records, let cipher {
                _ = records.sealCloseNotify(into: cipher)
                if edgeFD >= 0 { _ = cipher.send(to: edgeFD) }
            } else if closeNotify, let session {
                ERR_clear_error()
                _ = SSL_shutdown(session)
                // The close_notify, if the socket takes it now; the edge is torn down either way.
                if let cipher, edgeFD >= 0 { _ = cipher.send(to: edgeFD) }
            }
            unwatchEdge()
            releaseSession()
            toOrigin.reset()
            cipher?.reset()
        case .killConnection:
            closeEdgeSocket()
        case .abortDial:
            dialStage = .over
            dialDeadline = nil
            releaseSession()
            closeEdgeSocket()
        case .readEdge:
            readEdge()
        case .armTimer:
            rearmTimer()
        case .finished(let end):
            if let end {
                logger.debug("connection \(id) ended: \(end)")
                loop.onEvent(.closed(id: id, toOrigin: machine.bytesToOrigin, fromOrigin: machine.bytesFromOrigin, reason: end))
            }
            loop.forget(self)
        }
    }

    /// The 101 is read: from here on the bridge reads and writes the TLS stream and the local
    /// socket (both watched by the loop's epoll). `leftover` is what came after the 101's head in
    /// the same read: the first bytes of the data path.
    func onEstablished(leftover: UnsafeRawBufferPointer) {
        dialDeadline = nil
        // From here on OpenSSL writes records into our sink, sent a frame at a time. The upgrade
        // request has gone out whole, so nothing waits in OpenSSL for the socket.
        if let session {
            let sink = CipherSink(scratch: loop.cipherScratch)
            if let bio = sink.makeBIO() {
                SSL_set0_wbio(session, bio)
                cipher = sink
            }
            // OpenSSL holds no bytes read ahead (it reads whole records only), so the reads can
            // move to our source now.
            let reader = RecordSource(scratch: loop.recordScratch, fd: edgeFD)
            if SSL_has_pending(session) != 1, let bio = reader.makeBIO() {
                SSL_set0_rbio(session, bio)
                source = reader
            }
            // A TLS 1.3 stream's records are ours from here on: OpenSSL's session goes.
            if cipher != nil, source != nil, let made = handover?.records(for: session) {
                records = made
                SSL_free(session)
                self.session = nil
                logger.debug("connection \(id): TLS records from here on sealed and opened by the bridge (\(made.suite.name))")
            }
        }
        handover?.forget()
        handover = nil
        logger.debug("connection \(id): WebSocket established")
        let flags = fcntl(localFD, F_GETFL)
        _ = fcntl(localFD, F_SETFL, flags | O_NONBLOCK)
        if isPair {
            let outputFlags = fcntl(outputFD, F_GETFL)
            _ = fcntl(outputFD, F_SETFL, outputFlags | O_NONBLOCK)
            pairFlags = (flags, outputFlags)
            // Watched with no events until bytes wait for it: epoll still reports its errors, so
            // a reader that went away is known before anything is written.
            loop.watch(fd: outputFD, tag: tag(.output), events: 0)
            outputWatched = true
        }
        loop.watch(fd: localFD, tag: tag(.local), events: EPOLLIN.rawValue)
        localWatched = true
        localEvents = EPOLLIN.rawValue
        watchEdge(EPOLLIN.rawValue)
        // Armed first: reading what already arrived may start a Close, whose 2 s timer must stay (12.8).
        apply(.established)
        loop.onEvent(.established(id: id))
        if leftover.count > 0 {
            apply(.heardFromEdge)
            onEdgeBytes(leftover)
        }
        // OpenSSL may already hold decrypted bytes that epoll cannot announce.
        readEdge()
        updateInterest()
    }

    /// What an epoll tag names: the local socket (or a pair's input), the edge's socket, or a
    /// pair's output.
    enum Side: UInt64 { case local = 0, edge = 1, output = 2 }

    func tag(_ side: Side) -> UInt64 { UInt64(id) << 2 | side.rawValue }

    /// An epoll event for one of the bridge's descriptors.
    func onEvent(_ side: Side, events: UInt32) {
        let hungUp = events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
        switch side {
        case .local:
            guard localFD >= 0 else { return }
            if isPair {
                // A pipe's hang-up is its writer's close: the bytes before it are still read, and
                // its EOF ends the input only; the output decides whether anyone is left.
                readLocal(peerGone: outputGone)
                break
            }
            if events & EPOLLOUT.rawValue != 0 || hungUp { flushLocal() }
            if events & EPOLLIN.rawValue != 0 || hungUp, localFD >= 0 {
                // Nothing more can be read or written there when it hung up while not read.
                if hungUp && !machine.readsLocal { apply(.localHungUp) } else { readLocal(peerGone: hungUp) }
            }
        case .output:
            guard outputFD >= 0 else { return }
            if hungUp {
                // Its reader is gone. Level-triggered, this would be said again and again: the
                // output leaves the set, and the next write fails (EPIPE) as it would anyway.
                outputGone = true
                unwatchOutput()
            }
            flushLocal()
            // Nobody is left on the local side: the input ended and the output cannot be read.
            if outputGone, machine.local == .inputEnded, toLocal.isEmpty { apply(.localHungUp) }
        case .edge:
            if dialStage.isUnderWay {
                advanceDial()
                return
            }
            guard tlsOpen, machine.edgeIsOpen else { return }
            let readable = events & EPOLLIN.rawValue != 0
            let writable = events & EPOLLOUT.rawValue != 0
            // Records made earlier go first: an OpenSSL call waiting for room may need it.
            if writable { sendRecords() }
            guard tlsOpen, machine.edgeIsOpen else { break }
            // A call waiting for the other direction goes on first, with the same bytes.
            if writable, readWantsWrite {
                readWantsWrite = false
                readEdge()
            }
            if readable, writeWantsRead {
                writeWantsRead = false
                flushEdge()
            }
            guard tlsOpen, machine.edgeIsOpen else { break }
            if writable, !writeWantsRead { flushEdge() }
            if readable && !readWantsWrite || hungUp {
                // epoll says the socket has bytes (or its end) again.
                source?.drained = false
                if hungUp && machine.edgeReadPaused { apply(.edgeHungUp) } else { readEdge() }
            }
        }
        updateInterest()
    }

    // MARK: Local → origin

    /// Reads the local socket. `peerGone`: epoll reported a hang-up (a Unix socket's peer closed
    /// it entirely), so its EOF is the end, not a half-close worth lingering for.
    private func readLocal(peerGone: Bool) {
        let chunk = loop.tuning.chunkSize
        let payload = loop.txBuffer + WebSocketFrames.maxClientHeader
        // A few reads per event, so one busy connection cannot starve the others.
        for _ in 0..<4 {
            guard localFD >= 0, machine.readsLocal else { return }
            let n = read(localFD, payload, chunk)
            if n > 0 {
                apply(.localData(count: n))
                sendFrame(opcode: WebSocketFrames.opBinary, payload: payload, count: n)
                if n < chunk { return }
            } else if n == 0 {
                apply(.localEOF(peerGone: peerGone))
                return
            } else {
                let error = SystemError.current()
                if error.code == EINTR { continue }
                if !error.wouldBlock { apply(.localFailed("cannot read \(localNames.input): \(error)")) }
                return
            }
        }
    }

    /// Frames, masks and writes `count` bytes that sit in a buffer with header room before them,
    /// queueing what the TLS stream does not take now. Returns false if the stream failed.
    @discardableResult
    private func sendFrame(opcode: UInt8, payload: UnsafeMutableRawPointer, count: Int) -> Bool {
        guard tlsOpen, machine.edgeIsOpen, !edgeReadFailed else { return false }
        let key = loop.random.word()
        let frame = WebSocketFrames.frameInPlace(opcode: opcode, payload: payload, count: count, maskKey: key)
        let bytes = UnsafeRawBufferPointer(start: frame, count: payload + count - frame)
        var offset = 0
        if toOrigin.isEmpty {
            writing: while offset < bytes.count {
                switch edgeWrite(bytes.baseAddress! + offset, bytes.count - offset) {
                case .wrote(let n): offset += n
                case .full:
                    // Our record buffer is full: send it, and go on if the socket took it all.
                    guard let cipher, !cipher.isEmpty else { break writing }
                    guard sendRecords() else { return false }
                    if !cipher.isEmpty { break writing }
                case .failed(let reason):
                    apply(.edgeWriteFailed(reason))
                    return false
                }
            }
        }
        if offset < bytes.count {
            toOrigin.append(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
        }
        guard sendRecords() else { return false }
        if offset < bytes.count || !(cipher?.isEmpty ?? true), opcode == WebSocketFrames.opBinary {
            apply(.toOriginWritten(count: pendingToOrigin, appendedData: true))
        }
        return true
    }

    /// Bytes for the edge not yet handed to the kernel: plaintext waiting for `SSL_write`, and
    /// records waiting for the socket.
    private var pendingToOrigin: Int { toOrigin.count + (cipher?.count ?? 0) }

    /// Sends the records waiting in the sink as far as the socket takes them. False when the
    /// socket failed (the machine has heard it).
    @discardableResult
    private func sendRecords() -> Bool {
        guard let cipher, !cipher.isEmpty, edgeFD >= 0 else { return true }
        switch cipher.send(to: edgeFD) {
        case .progress:
            return true
        case .failed(let code):
            let detail = SystemError(code).description
            logger.debug("connection \(id): writing to the WebSocket failed (\(detail))")
            cipher.reset()
            apply(.edgeWriteFailed(code == ECONNRESET || code == EPIPE ? .reset(detail: detail) : .writeFailed(detail: detail)))
            return false
        }
    }

    /// What one `SSL_write` did.
    private enum WriteResult {
        case wrote(Int)
        /// The socket takes no more now.
        case full
        /// The stream failed: why the tunnel ends.
        case failed(TunnelEnd)
    }

    /// Writes `count` bytes at `p` to the TLS stream: sealed by our records, or by OpenSSL.
    private func edgeWrite(_ p: UnsafeRawPointer, _ count: Int) -> WriteResult {
        if let records, let cipher {
            switch records.seal(p, count, into: cipher) {
            case .bytes(0): return .full
            case .bytes(let n): return .wrote(n)
            case .failed(let why):
                logger.debug("connection \(id): writing to the WebSocket failed (\(why))")
                return .failed(.writeFailed(detail: why))
            }
        }
        guard let session else { return .failed(.writeFailed(detail: "the TLS stream is gone")) }
        return sslWrite(session, p, count)
    }

    private func sslWrite(_ ssl: OpaquePointer, _ p: UnsafeRawPointer, _ count: Int) -> WriteResult {
        ERR_clear_error()
        let r = SSL_write(ssl, p, Int32(min(count, 1 << 30)))
        if r > 0 { return .wrote(Int(r)) }
        let code = errno
        let error = SSL_get_error(ssl, r)
        switch error {
        case SSL_ERROR_WANT_WRITE:
            return .full
        case SSL_ERROR_WANT_READ:
            writeWantsRead = true
            return .full
        default:
            let detail = Self.streamFailure(error, errno: code)
            logger.debug("connection \(id): writing to the WebSocket failed (\(detail))")
            if error == SSL_ERROR_SYSCALL && (code == ECONNRESET || code == EPIPE) {
                return .failed(.reset(detail: detail))
            }
            return .failed(.writeFailed(detail: detail))
        }
    }

    /// Why a TLS stream failed, in words, from `SSL_get_error` and the errno saved right after the
    /// call; clears OpenSSL's error queue. Never an errno of 0: OpenSSL reports a stream cut
    /// without close_notify with none (issue 28.3).
    static func streamFailure(_ error: Int32, errno code: Int32) -> String {
        let queued = ERR_peek_last_error()
        ERR_clear_error()
        switch error {
        case SSL_ERROR_ZERO_RETURN:
            return "TLS closed without a WebSocket Close"
        case SSL_ERROR_SYSCALL where code != 0:
            return SystemError(code).description
        case SSL_ERROR_SSL where queued != 0 && ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING,
             SSL_ERROR_SYSCALL:
            return "the connection ended without a WebSocket Close"
        default:
            if queued != 0, let text = ERR_reason_error_string(queued) { return "TLS error: \(String(cString: text))" }
            return "TLS error"
        }
    }

    private func flushEdge() {
        guard tlsOpen else { return }
        // Records already made go first; plaintext waits while the socket holds them back.
        guard sendRecords() else { return }
        // A KeyUpdate the edge asked for goes before any more of ours.
        if let records, records.keyUpdateOwed, let cipher {
            if case .failed(let why) = records.sendKeyUpdate(into: cipher) {
                apply(.edgeWriteFailed(.writeFailed(detail: why)))
                return
            }
            guard sendRecords() else { return }
        }
        while !toOrigin.isEmpty, cipher?.isEmpty ?? true {
            var failure: TunnelEnd?
            let sent = toOrigin.consume(upTo: 1 << 20) { chunk in
                switch edgeWrite(chunk.baseAddress!, chunk.count) {
                case .wrote(let n): return n
                case .full: return 0
                case .failed(let reason):
                    failure = reason
                    return 0
                }
            }
            if let failure {
                apply(.edgeWriteFailed(failure))
                return
            }
            guard sendRecords() else { return }
            if sent == 0 { break }
        }
        apply(.toOriginFlushed(count: pendingToOrigin))
    }

    // MARK: Origin → local

    private func readEdge() {
        if let records, let source { return readRecords(records, source) }
        // Reading can make records too (a KeyUpdate's answer, an alert): they leave at once.
        defer { sendRecords() }
        let buffer = loop.rxBuffer
        let capacity = loop.rxCapacity
        var budget = 1 << 20
        // Bytes left in the loop's receive buffer when reading pauses stay there until another
        // bridge of the loop needs the buffer (they then move to this bridge's own queue); the
        // machine reads again as soon as it resumes (`.readEdge`).
        defer { source?.mayReceive = true }
        // Once the budget is spent, what was already received is still decrypted, but nothing
        // more is taken from the socket this time (epoll announces it again).
        while session != nil, machine.readsEdge, budget > 0 || source?.hasBytes == true {
            if budget <= 0 { source?.mayReceive = false }
            var filled = 0
            var drained = false
            var ended: String?

            // Whole records only (the space left is at least one record), so OpenSSL keeps no
            // decrypted bytes back.
            while capacity - filled >= 16 << 10 + 256, let ssl = session {
                ERR_clear_error()
                let r = SSL_read(ssl, buffer + filled, Int32(capacity - filled))
                if r > 0 {
                    filled += Int(r)
                    // Nothing buffered in OpenSSL or in our source: the next call would only read
                    // the socket, which epoll announces when it has more (no read that fails
                    // with EAGAIN).
                    if SSL_has_pending(ssl) != 1, source?.hasBytes != true {
                        drained = true
                        break
                    }
                    continue
                }
                let code = errno
                let error = SSL_get_error(ssl, r)
                switch error {
                case SSL_ERROR_WANT_READ:
                    ERR_clear_error()
                    drained = true
                case SSL_ERROR_WANT_WRITE:
                    // Reading goes on once the socket takes what OpenSSL must send first.
                    ERR_clear_error()
                    readWantsWrite = true
                    drained = true
                default:
                    ended = Self.streamFailure(error, errno: code)
                }
                break
            }
            // Bytes read before a failure still count and reach the local side; but the stream is
            // broken, so no answer to them is written (a pong would fail as a write).
            if ended != nil { edgeReadFailed = true }
            if filled > 0 {
                apply(.heardFromEdge)
                onEdgeBytes(UnsafeRawBufferPointer(start: buffer, count: filled))
            }
            budget -= filled
            if let ended {
                logger.debug("connection \(id): the WebSocket's TLS stream ended (\(ended))")
                apply(.edgeReadEnded(ended))
                return
            }
            if drained { return }
        }
    }

    /// Reads the edge's records with our own record layer: each is opened in place in the loop's
    /// receive buffer, and the payloads of all the records one `recv()` brought go to the local
    /// side with one `sendmsg()` (before the next `recv()` reuses the buffer).
    private func readRecords(_ records: TLSRecords, _ source: RecordSource) {
        // An answer to a KeyUpdate, if the edge asked for one, leaves at once.
        defer { sendRecords() }
        defer { source.mayReceive = true }
        let start = source.received
        func end(_ why: String) {
            sendBatchToLocal()
            edgeReadFailed = true
            logger.debug("connection \(id): the WebSocket's TLS stream ended (\(why))")
            apply(.edgeReadEnded(why))
        }
        while tlsOpen, machine.readsEdge {
            // Past the budget, what was already received is still opened, but nothing more is
            // taken from the socket this time (epoll announces it again).
            if source.received - start >= 1 << 20 { source.mayReceive = false }
            var next = source.nextRecord(receive: false)
            if case .needMore = next {
                // Receiving reuses the buffer: what was gathered from it goes out first.
                sendBatchToLocal()
                guard tlsOpen, machine.readsEdge, !source.drained else { return }
                next = source.nextRecord(receive: true)
            }
            switch next {
            case .record(let record, let length):
                let opened = records.open(record, length: length)
                // The bytes stay where they are until the next receive; the batch is sent first.
                source.consume(length)
                switch opened {
                case .data(let offset, let count):
                    apply(.heardFromEdge)
                    onEdgeBytes(UnsafeRawBufferPointer(start: record + offset, count: count), flush: false)
                case .nothing:
                    if records.keyUpdateOwed, let cipher, case .failed(let why) = records.sendKeyUpdate(into: cipher) {
                        sendBatchToLocal()
                        apply(.edgeWriteFailed(.writeFailed(detail: why)))
                        return
                    }
                case .closed:
                    return end("TLS closed without a WebSocket Close")
                case .failed(let why):
                    return end(why)
                }
            case .needMore:
                continue
            case .later:
                break
            case .endOfStream:
                return end("the connection ended without a WebSocket Close")
            case .failed(let code):
                return end(SystemError(code).description)
            case .malformed(let what):
                return end("TLS error: \(what)")
            }
            if case .later = next { break }
        }
        sendBatchToLocal()
    }

    private func onEdgeBytes(_ bytes: UnsafeRawBufferPointer, flush: Bool = true) {
        // After a Close or a protocol violation nothing more is parsed; the edge's TLS stream is
        // read until it ends or the Close timer fires.
        guard !machine.readerStopped else { return }
        // The payloads go out together once the pass is over (or the batch is full), and before
        // anything else the frames say happens, so their order with it stays the wire's. With our
        // own records, the pass is the records one `recv()` brought (`readRecords` sends them).
        defer { if flush { sendBatchToLocal() } }
        reader.feed(bytes) { event in
            if case .data(let payload) = event {
                // Nobody to deliver to any more after our Close or the local side's end.
                guard machine.acceptsEdgeData else { return true }
                apply(.edgeData(count: payload.count))
                if loop.localBatch.isFull { sendBatchToLocal() }
                gatherForLocal(payload)
                return true
            }
            sendBatchToLocal()
            switch event {
            case .data:
                return true
            case .pong:
                return true
            case .ping(let payload):
                apply(.ping(payload))
                return true
            case .close(let payload):
                logger.debug("connection \(id): the edge sent a Close frame (\(CloseHandshake.check(payload)))")
                apply(.close(payload))
                return false
            case .text:
                logger.debug("connection \(id): the origin sent a text frame (only binary frames carry tunnel bytes)")
                apply(.text)
                return true
            case .violation(let what):
                logger.debug("connection \(id): the edge sent \(what); closing the tunnel")
                apply(.violation(what))
                return false
            }
        }
    }

    /// Adds a frame's payload (a slice of the loop's receive buffer) to what this pass sends to
    /// the local socket.
    private func gatherForLocal(_ payload: UnsafeRawBufferPointer) {
        guard localFD >= 0 else { return }
        if !deliveredAny {
            // The connection has carried the edge's first bytes: a spare may follow, now that its
            // handshakes no longer compete with this connection's own first exchange.
            deliveredAny = true
            loop.wantsSpare(route: route)
        }
        loop.localBatch.append(payload)
    }

    /// Sends the payloads gathered in this pass with one `sendmsg()`, as far as the local socket
    /// takes them; the rest waits in `toLocal` (as everything does while `toLocal` holds bytes).
    private func sendBatchToLocal() {
        let batch = loop.localBatch
        guard !batch.isEmpty else { return }
        guard localFD >= 0 else { return batch.reset() }
        if toLocal.isEmpty {
            switch batch.send(to: writeFD, socket: !isPair) {
            case .all:
                return
            case .full:
                break
            case .failed(let error):
                batch.reset()
                apply(.localFailed("cannot write to \(localNames.output): \(error)"))
                return
            }
        }
        batch.drain { toLocal.append($0) }
        apply(.toLocalWritten(count: toLocal.count))
    }

    private func flushLocal() {
        while !toLocal.isEmpty, localFD >= 0 {
            var failure: SystemError?
            let sent = toLocal.consume(upTo: 1 << 20) { chunk in
                let n = isPair ? write(writeFD, chunk.baseAddress!, chunk.count)
                    : send(localFD, chunk.baseAddress!, chunk.count, Int32(MSG_NOSIGNAL))
                if n < 0 {
                    let error = SystemError.current()
                    if !error.wouldBlock && error.code != EINTR { failure = error }
                }
                return max(0, n)
            }
            if let failure {
                apply(.localFailed("cannot write to \(localNames.output): \(failure)"))
                return
            }
            if sent == 0 { break }
        }
        apply(.toLocalFlushed(count: toLocal.count))
    }

    // MARK: OpenSSL's callbacks

    /// Watches the stream's records and handshake messages while OpenSSL reads and writes them:
    /// each record after the handshake is counted and a KeyUpdate noted (`TLSHandover`), and a TLS
    /// 1.2 edge's HelloRequest is said once to be refused (`SSL_OP_NO_RENEGOTIATION` on the
    /// carrier's context does the refusing).
    func watchMessages(_ ssl: OpaquePointer) {
        SSL_set_msg_callback(ssl, Self.message)
        _ = SSL_ctrl(ssl, SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, opaque)
    }

    private var renegotiationRefused = false

    /// OpenSSL's key-log callback (the carrier's context): a connection's application traffic
    /// secrets, for its `TLSHandover`. Secrets are never logged or written.
    static let keyLog: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> Void = { ssl, line in
        guard let ssl, let line, let raw = SSL_get_ex_data(ssl, 0) else { return }
        Unmanaged<Bridge>.fromOpaque(raw).takeUnretainedValue().handover?.take(line: line)
    }

    /// OpenSSL's message callback. The bridge outlives its `SSL` (it frees it), so the unretained
    /// pointer stays valid while the callback can run.
    private static let message: @convention(c) (Int32, Int32, Int32, UnsafeRawPointer?, Int, OpaquePointer?,
                                                UnsafeMutableRawPointer?) -> Void = { written, _, type, bytes, count, _, bridge in
        guard let bridge else { return }
        let owner = Unmanaged<Bridge>.fromOpaque(bridge).takeUnretainedValue()
        if type == SSL3_RT_HEADER {
            if let handover = owner.handover, handover.counting {
                if written != 0 { handover.recordsWritten += 1 } else { handover.recordsRead += 1 }
            }
            return
        }
        guard type == SSL3_RT_HANDSHAKE, count >= 1, let bytes else { return }
        let kind = bytes.load(as: UInt8.self)
        if kind == UInt8(SSL3_MT_KEY_UPDATE), owner.handover?.counting == true { owner.handover?.keyUpdateSeen = true }
        guard written == 0, kind == UInt8(SSL3_MT_HELLO_REQUEST) else { return }
        guard !owner.renegotiationRefused else { return }
        owner.renegotiationRefused = true
        owner.logger.warning("connection \(owner.id): the edge asked to renegotiate TLS, which an Access edge never does; refused (no_renegotiation), the tunnel goes on")
    }

    // MARK: Interest

    private func updateInterest() {
        if isPair {
            updatePairInterest()
        } else if localFD >= 0, localWatched {
            var want: UInt32 = 0
            if machine.readsLocal { want |= EPOLLIN.rawValue }
            if !toLocal.isEmpty { want |= EPOLLOUT.rawValue }
            if want != localEvents {
                localEvents = want
                loop.modify(fd: localFD, tag: tag(.local), events: want)
            }
        }
        if tlsOpen, machine.edgeIsOpen, edgeFD >= 0 {
            // Each direction waits for what OpenSSL needs to go on, not for its own readiness.
            var want: UInt32 = 0
            if machine.readsEdge {
                want |= readWantsWrite ? EPOLLOUT.rawValue : EPOLLIN.rawValue
            }
            if !toOrigin.isEmpty {
                want |= writeWantsRead ? EPOLLIN.rawValue : EPOLLOUT.rawValue
            }
            if let cipher, !cipher.isEmpty { want |= EPOLLOUT.rawValue }
            watchEdge(want)
        }
    }

    /// A pair's input is in the set while it is read (see `localWatched`), its output with
    /// EPOLLOUT while bytes wait for it.
    private func updatePairInterest() {
        guard localFD >= 0, outputFD >= 0 else { return }
        let reads = machine.readsLocal
        if reads != localWatched {
            if reads { loop.watch(fd: localFD, tag: tag(.local), events: EPOLLIN.rawValue) } else { loop.unwatch(fd: localFD) }
            localWatched = reads
        }
        let want: UInt32 = toLocal.isEmpty ? 0 : EPOLLOUT.rawValue
        if outputWatched, want != outputEvents {
            outputEvents = want
            loop.modify(fd: outputFD, tag: tag(.output), events: want)
        }
    }

    private func unwatchOutput() {
        if outputFD >= 0, outputWatched { loop.unwatch(fd: outputFD) }
        outputWatched = false
    }

    // MARK: Timer

    /// Asks the loop's timer for the earliest deadline (the dial's or the machine's), when it moved.
    func rearmTimer() {
        let next = [dialDeadline, machine.nextDeadline].compactMap({ $0 }).min()
        guard next != scheduledDeadline else { return }
        scheduledDeadline = next
        timerGeneration &+= 1
        if let next { loop.schedule(bridge: id, generation: timerGeneration, at: next) }
    }

    /// The loop's timer reached this bridge's deadline.
    func onTimer() {
        scheduledDeadline = nil
        if let deadline = dialDeadline, Self.now() >= deadline {
            dialDeadline = nil
            if isSpare {
                if dialStage == .parked {
                    logger.debug("spare connection: unused for \(loop.spareLifetimeText); closed")
                } else {
                    logger.debug("spare connection: no TLS within \(loop.configuration.handshakeTimeoutSeconds) s; dropped")
                }
                closeSpare()
                return
            }
            logger.debug("connection \(id): no answer within \(loop.configuration.handshakeTimeoutSeconds) s")
            failDial(.timedOut)
            return
        }
        apply(.timer)
        updateInterest()
        rearmTimer()
    }

    // MARK: Endings

    /// Frees the TLS session (the socket is closed apart).
    func releaseSession() {
        if let session { SSL_free(session) }
        session = nil
        records = nil
        handover = nil
        cipher?.reset()
        source?.reset()
    }

    func unwatchEdge() {
        if edgeFD >= 0, edgeWatched { loop.unwatch(fd: edgeFD) }
        edgeWatched = false
    }

    /// Closes the edge's socket (once); the machine hears it is released when the actions in
    /// progress are done.
    func closeEdgeSocket() {
        guard edgeFD >= 0 else { return }
        dropEdgeSocket()
        edgeReleasePending = true
    }

    /// Closes the edge's socket without a word to the machine: the socket of a dial it never heard
    /// of (a spare's, or the dead one a taken spare leaves before its redial).
    func dropEdgeSocket() {
        guard edgeFD >= 0 else { return }
        unwatchEdge()
        Glibc.close(edgeFD)
        edgeFD = -1
    }

    /// Puts the edge's socket in the epoll set with these events, or changes them.
    func watchEdge(_ events: UInt32) {
        guard edgeFD >= 0 else { return }
        if !edgeWatched {
            loop.watch(fd: edgeFD, tag: tag(.edge), events: events)
            edgeWatched = true
        } else if events != edgeEvents {
            loop.modify(fd: edgeFD, tag: tag(.edge), events: events)
        }
        edgeEvents = events
    }

    private func closeLocalSocket() {
        guard localFD >= 0 else { return }
        if localWatched { loop.unwatch(fd: localFD) }
        localWatched = false
        if isPair {
            // Closing them is the local side's end (EOF for the reader of the output); no reset
            // for a pair, whose descriptors may be pipes.
            unwatchOutput()
            _ = fcntl(localFD, F_SETFL, pairFlags.input)
            _ = fcntl(outputFD, F_SETFL, pairFlags.output)
            Glibc.close(outputFD)
            outputFD = -1
            Glibc.close(localFD)
            localFD = -1
            toLocal.reset()
            return
        }
        // A tunnel that did not end cleanly ends the local connection abortively (RST): its
        // application sees ECONNRESET after the bytes that arrived, never a FIN that passes a
        // reply cut short for a complete one (issue 28.2). A clean end keeps the FIN.
        if machine.end?.isClean != true { FileDescriptors.resetOnClose(localFD) }
        Glibc.close(localFD)
        localFD = -1
        toLocal.reset()
    }

    /// Closes both sides now (shutdown): the WebSocket with a Close frame after what is queued.
    func closeBoth() {
        if isSpare {
            closeSpare()
            return
        }
        apply(.shutdown)
        updateInterest()
    }

    /// The loop is gone: close what is left, without a word to anyone.
    func abandon() {
        releaseSession()
        if edgeFD >= 0 { Glibc.close(edgeFD) }
        edgeFD = -1
        if localFD >= 0 { Glibc.close(localFD) }
        localFD = -1
        if outputFD >= 0 { Glibc.close(outputFD) }
        outputFD = -1
    }

    /// The dial failed: the owner is told (the local socket closed, or handed back after an Access
    /// refusal when asked), then the machine.
    func fail(_ failure: TunnelFailure) {
        guard !failed else { return }
        failed = true
        // The owner reports the plain message to people; the log keeps the technical detail.
        logger.debug("connection \(id) failed: \(failure.detail)")
        let fd = localFD
        localFD = -1
        if outputFD >= 0 {
            // A pair's descriptors are the dial's own duplicates: closed, with no reset.
            Glibc.close(outputFD)
            outputFD = -1
            if fd >= 0 { Glibc.close(fd) }
            loop.onEvent(.failed(id: id, failure))
        } else if fd >= 0, handshake.handBackOnRefusal, failure.category == .authentication {
            loop.onEvent(.refused(id: id, socket: fd, failure))
        } else if fd >= 0, handshake.handBackWhenRetryable, failure.isRetryable, failure.category == .transport {
            loop.onEvent(.retryable(id: id, socket: fd, attempt: handshake.attempt, failure))
        } else {
            if fd >= 0 { FileDescriptors.closeUnserved(fd) }
            loop.onEvent(.failed(id: id, failure))
        }
        // The dial's socket is closed already (`failDial`), or was never opened.
        apply(.dialFailed(released: edgeFD < 0))
    }
}
