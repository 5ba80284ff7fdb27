import AccessCore

/// The decisions of one bridge (a local socket paired with a WebSocket to the edge) as a value:
/// events in, actions out, no I/O — like `SessionStateMachine` for the session.
///
/// The executor (`Bridge`) owns the sockets, the TLS session and the two byte queues. It reads
/// and writes only when the machine says a side may be read (`readsLocal`, `readsEdge`), tells it
/// what happened (bytes counted, a queue's new size, an end of stream, a frame from the edge, the
/// timer), and performs the actions it gets back, in order. Every change of a queue's size is
/// reported, so the machine's picture of the queues is exact when it decides.
///
/// What it decides: back-pressure (one watermark rule for both queues), the half-close linger,
/// the Close handshake (`CloseHandshake`), keepalive (`KeepaliveState`), owed pongs, when each side
/// is torn down, and why the tunnel ended (`TunnelEnd`: the first cause wins).
struct BridgeStateMachine: Equatable {
    /// Sizes and delays, fixed for a bridge.
    struct Settings: Equatable {
        /// Queue size at which the side filling it is paused.
        var highWatermark = 1 << 20
        /// Queue size at which a paused side resumes.
        var lowWatermark = 256 << 10
        /// Seconds between keepalive ticks (0: no keepalive).
        var keepaliveSeconds = 30
        /// How long the edge's bytes still reach the local side after its EOF (0: close at once).
        var lingerNanoseconds: UInt64 = 5_000_000_000
        /// How long the edge has to answer our Close (or to take what is queued for it).
        var closeWaitNanoseconds: UInt64 = 2_000_000_000
    }

    /// A queue of bytes waiting for a socket, as far as decisions go: its size, and whether the
    /// side filling it is paused (above the high watermark until back at the low one).
    struct QueueLevel: Equatable {
        private(set) var count = 0
        private(set) var paused = false

        /// The queue holds `count` bytes now.
        mutating func set(_ count: Int, _ settings: Settings) {
            self.count = count
            if count >= settings.highWatermark {
                paused = true
            } else if count <= settings.lowWatermark {
                paused = false
            }
        }
    }

    /// Something that happened to the bridge.
    enum Event: Equatable {
        /// The WebSocket is open (the 101 was read).
        case established
        /// The dial failed; its failure was reported and the local socket closed or handed back.
        /// `released`: the dial's socket is closed already.
        case dialFailed(released: Bool)
        /// `count` bytes were read from the local socket (and are framed for the edge).
        case localData(count: Int)
        /// The local peer sent its last byte: EOF on a read. `peerGone`: its socket hung up
        /// entirely (no half-close to linger for).
        case localEOF(peerGone: Bool)
        /// The local socket reported an error or hang-up while it was not being read.
        case localHungUp
        /// Reading or writing the local socket failed: what happened.
        case localFailed(String)
        /// `count` bytes of payload from the edge go to the local side.
        case edgeData(count: Int)
        /// Bytes (of any frame) were read from the edge.
        case heardFromEdge
        /// A ping from the edge, with its payload.
        case ping([UInt8])
        /// A Close from the edge, with its payload.
        case close([UInt8])
        /// A text frame from the edge (not allowed on the carrier).
        case text
        /// Bytes from the edge that break RFC 6455: what.
        case violation(String)
        /// Reading the TLS stream ended (EOF, reset, TLS error): how.
        case edgeReadEnded(String)
        /// Writing the TLS stream failed: why the tunnel ends.
        case edgeWriteFailed(TunnelEnd)
        /// The edge's socket reported an error or hang-up while it was not being read.
        case edgeHungUp
        /// The queue to the edge holds `count` bytes after a write; `appendedData` when bytes of a
        /// data frame (not only control frames) were added to it.
        case toOriginWritten(count: Int, appendedData: Bool)
        /// The queue to the edge holds `count` bytes after a flush.
        case toOriginFlushed(count: Int)
        /// The queue to the local side holds `count` bytes after a write.
        case toLocalWritten(count: Int)
        /// The queue to the local side holds `count` bytes after a flush.
        case toLocalFlushed(count: Int)
        /// The timer fired.
        case timer
        /// The carrier shuts down: close both sides (the WebSocket with Close 1001).
        case shutdown
        /// The edge's socket is closed: nothing of the edge's side remains.
        case edgeReleased
    }

    /// What the executor must do, in order.
    enum Action: Equatable {
        /// Frame and send a control frame (ping, pong, Close), queueing what the socket does not
        /// take, then report the queue's size (`toOriginWritten`).
        case sendControl(opcode: UInt8, payload: [UInt8])
        /// Close the local socket (whatever is queued for it is dropped).
        case closeLocal
        /// Stop using the TLS stream and drop what is queued for the edge; with `closeNotify`,
        /// first end the TLS session properly. (`killConnection` closes the socket next.)
        case tearDownEdge(closeNotify: Bool)
        /// Close the edge's socket (nothing of ours uses it any more); `edgeReleased` follows.
        case killConnection
        /// Give up a dial under way (shutdown before the WebSocket opened).
        case abortDial
        /// Read the TLS stream now: OpenSSL may hold decrypted bytes epoll cannot announce.
        case readEdge
        /// The deadlines changed: set the timer to `nextDeadline`.
        case armTimer
        /// Both sides are gone: report why the tunnel ended (nil: a dial failure, reported
        /// already) and forget the bridge.
        case finished(TunnelEnd?)
    }

    /// The edge's side, from the bridge's point of view.
    enum EdgeState: Equatable {
        /// Dialling: no TLS stream yet.
        case dialling
        /// The TLS stream carries bytes.
        case open
        /// No more bytes come or go; the socket is not closed yet.
        case done
        /// The socket is closed.
        case released
    }

    let settings: Settings
    private(set) var local = LocalSide.open
    private(set) var edge = EdgeState.dialling
    /// The first cause of the end.
    private(set) var end: TunnelEnd?
    private(set) var toOrigin = QueueLevel()
    private(set) var toLocal = QueueLevel()
    /// The queue to the edge holds bytes of a data frame.
    private var queueHoldsData = false
    /// The newest ping not answered yet because bytes for the edge are queued (RFC 6455 §5.5.3
    /// allows answering only the most recent one).
    private(set) var owedPong: [UInt8]?
    private var closing = CloseHandshake()
    /// The TLS stream failed: no close_notify can follow.
    private var edgeBroken = false
    /// After a Close or a protocol violation nothing more of the edge's bytes is parsed.
    private(set) var readerStopped = false
    /// The Close code we end with when the local side ends (1000 unless a reason chose another).
    private var closeCode: UInt16 = 1000
    private var keepalive = KeepaliveState()
    /// Data bytes carried each way.
    private(set) var bytesToOrigin = 0
    private(set) var bytesFromOrigin = 0
    /// Deadlines (monotonic nanoseconds): the edge's answer to our Close, the end of a half-close
    /// linger, the next keepalive tick.
    private(set) var closeDeadline: UInt64?
    private(set) var lingerDeadline: UInt64?
    private(set) var keepaliveDeadline: UInt64?
    /// The dial failed and was reported: the end needs no report of its own.
    private var failureReported = false
    private var finished = false

    /// A bridge that is dialling.
    init(settings: Settings) {
        self.settings = settings
    }

    // MARK: Queries

    /// The WebSocket is open and its TLS stream usable.
    var edgeIsOpen: Bool { edge == .open }
    /// Our Close frame is out (or queued).
    var closeSent: Bool { closing.sent }
    /// The local socket may be read now.
    var readsLocal: Bool { edge == .open && local == .open && !closing.sent && !toOrigin.paused }
    /// Reading the TLS stream is paused: the local side cannot take more, or the edge sends
    /// pings while it does not read even our pong (and no data of ours waits for it, so the pause
    /// cannot starve a flow that needs the edge to read first).
    var edgeReadPaused: Bool { toLocal.paused || (owedPong != nil && !queueHoldsData) }
    /// The TLS stream may be read now.
    var readsEdge: Bool { edge == .open && !edgeReadPaused }
    /// Payload from the edge still has somewhere to go.
    var acceptsEdgeData: Bool { !closing.sent && local != .closed }
    /// The earliest deadline, if any.
    var nextDeadline: UInt64? { [closeDeadline, lingerDeadline, keepaliveDeadline].compactMap { $0 }.min() }

    // MARK: Events

    /// Takes an event that happened at `now` (monotonic nanoseconds); returns what to do, in order.
    mutating func handle(_ event: Event, now: UInt64) -> [Action] {
        var actions: [Action] = []
        switch event {
        case .established:
            guard edge == .dialling else { break }
            edge = .open
            if settings.keepaliveSeconds > 0 {
                keepaliveDeadline = now + UInt64(settings.keepaliveSeconds) * 1_000_000_000
                actions.append(.armTimer)
            }
        case .dialFailed(let released):
            failureReported = true
            local = .closed
            edge = released ? .released : .done
        case .localData(let count):
            bytesToOrigin += count
        case .localEOF(let peerGone):
            if peerGone || settings.lingerNanoseconds == 0 || closing.sent {
                localEnded(now, &actions)
            } else if local == .open {
                // A WebSocket has no half-close: the Close waits, and the edge's reply still
                // reaches the local side until the edge closes or the linger passes. How the
                // tunnel ends is not known yet: a reply cut short (reset, TLS error, violation,
                // a Close with an error code) ends it as it would with the local side open, and
                // only a clean Close or the linger's end makes it a local close (issue 28.2).
                local = .inputEnded
                lingerDeadline = now + settings.lingerNanoseconds
                actions.append(.armTimer)
            }
        case .localHungUp:
            localEnded(now, &actions)
        case .localFailed(let detail):
            noteEnd(.localIOFailed(detail: detail))
            localEnded(now, &actions)
        case .edgeData(let count):
            bytesFromOrigin += count
        case .heardFromEdge:
            keepalive.heardFromEdge()
        case .ping(let payload):
            guard edge == .open, !closing.sent else { break }
            if toOrigin.count == 0 {
                actions.append(.sendControl(opcode: WebSocketFrames.opPong, payload: Array(payload.prefix(125))))
            } else {
                owedPong = Array(payload.prefix(125))
            }
        case .close(let payload):
            guard edge == .open else { break }
            let (verdict, answer) = closing.receive(payload)
            switch verdict {
            case .valid(let code): noteEnd(.closedByEdge(code: code))
            case .malformed(let what): noteEnd(.protocolViolation(detail: what))
            }
            readerStopped = true
            if case .sendClose(let payload) = answer {
                // The teardown follows once the answer has left (`toOriginWritten`).
                actions.append(.sendControl(opcode: WebSocketFrames.opClose, payload: payload))
                armCloseDeadline(now, &actions)
            } else if toOrigin.count == 0 {
                tearDownEdge(&actions)
            }
        case .text:
            guard edge == .open, !closing.sent else { break }
            noteEnd(.protocolViolation(detail: "a text frame; only binary frames carry tunnel bytes"))
            closeCode = 1003
            sendClose(1003, now, &actions)
        case .violation(let what):
            noteEnd(.protocolViolation(detail: what))
            readerStopped = true
            sendClose(1002, now, &actions)
        case .edgeReadEnded(let how):
            guard edge == .open else { break }
            edgeBroken = true
            if !closing.received { noteEnd(.reset(detail: how)) }
            tearDownEdge(&actions)
        case .edgeWriteFailed(let reason):
            guard edge == .open else { break }
            edgeBroken = true
            noteEnd(reason)
            tearDownEdge(&actions)
        case .edgeHungUp:
            guard edge == .open else { break }
            tearDownEdge(&actions)
        case .toOriginWritten(let count, let appendedData):
            guard edge == .open else { break }
            toOrigin.set(count, settings)
            if appendedData && count > 0 { queueHoldsData = true }
            drained(&actions)
        case .toOriginFlushed(let count):
            guard edge == .open else { break }
            toOrigin.set(count, settings)
            drained(&actions)
        case .toLocalWritten(let count):
            guard local != .closed else { break }
            toLocal.set(count, settings)
        case .toLocalFlushed(let count):
            guard local != .closed else { break }
            let wasPaused = toLocal.paused
            toLocal.set(count, settings)
            // Reading resumes at once: epoll only announces what is in the kernel.
            if wasPaused, !toLocal.paused, readsEdge { actions.append(.readEdge) }
            if count == 0, edge != .open || local == .closing { closeLocal(&actions) }
        case .timer:
            timer(now, &actions)
        case .shutdown:
            noteEnd(.shutdown)
            closeBoth(now, &actions)
        case .edgeReleased:
            edgeGone(&actions)
            edge = .released
        }
        finishIfDone(&actions)
        // The timer is set once, to the deadlines as they are after the event (the last request stays).
        var kept = false
        for index in actions.indices.reversed() where actions[index] == .armTimer {
            if kept { actions.remove(at: index) } else { kept = true }
        }
        return actions
    }

    // MARK: Rules

    /// Remembers why the tunnel ends, unless an earlier cause is known.
    private mutating func noteEnd(_ reason: TunnelEnd) {
        if end == nil { end = reason }
    }

    /// The local peer closed (or failed): the WebSocket ends with a Close frame after what is
    /// queued for the edge.
    private mutating func localEnded(_ now: UInt64, _ actions: inout [Action]) {
        noteEnd(.closedByLocal(code: closeCode))
        if local != .closed { closeLocal(&actions) }
        sendClose(closeCode, now, &actions)
    }

    /// Closes both sides: the WebSocket with Close 1001 after what is queued, the local socket
    /// once what is queued for it is written; a dial under way is given up.
    private mutating func closeBoth(_ now: UInt64, _ actions: inout [Action]) {
        switch edge {
        case .dialling:
            if local != .closed { closeLocal(&actions) }
            edge = .done
            actions.append(.abortDial)
        case .open:
            if local != .closed { local = .closing }
            closeCode = 1001
            sendClose(1001, now, &actions)
            if toLocal.count == 0, local != .closed { closeLocal(&actions) }
        case .done, .released:
            if local != .closed { local = .closing }
            if toLocal.count == 0, local != .closed { closeLocal(&actions) }
            if edge == .done { actions.append(.killConnection) }
        }
    }

    private mutating func closeLocal(_ actions: inout [Action]) {
        local = .closed
        toLocal.set(0, settings)
        lingerDeadline = nil
        actions.append(.closeLocal)
    }

    /// Sends our Close (after what is queued) and gives the edge a while to answer.
    private mutating func sendClose(_ code: UInt16, _ now: UInt64, _ actions: inout [Action]) {
        guard edge == .open, case .sendClose(let payload) = closing.close(code: code) else { return }
        actions.append(.sendControl(opcode: WebSocketFrames.opClose, payload: payload))
        armCloseDeadline(now, &actions)
    }

    /// Only the Close deadline is left: no more linger or keepalive.
    private mutating func armCloseDeadline(_ now: UInt64, _ actions: inout [Action]) {
        lingerDeadline = nil
        keepaliveDeadline = nil
        closeDeadline = now + settings.closeWaitNanoseconds
        actions.append(.armTimer)
    }

    /// The queue to the edge changed: what waits for it to drain.
    private mutating func drained(_ actions: inout [Action]) {
        guard toOrigin.count == 0 else { return }
        queueHoldsData = false
        if let pong = owedPong, !closing.sent {
            owedPong = nil
            actions.append(.sendControl(opcode: WebSocketFrames.opPong, payload: pong))
            if readsEdge { actions.append(.readEdge) }
        }
        if closing.isComplete { tearDownEdge(&actions) }
    }

    /// Stops using the TLS stream (ending the TLS session properly after a Close handshake we took
    /// part in, unless the stream broke); the local side gets what is queued for it, then closes.
    private mutating func tearDownEdge(_ actions: inout [Action]) {
        guard edge == .open else { return }
        edge = .done
        toOrigin.set(0, settings)
        owedPong = nil
        closeDeadline = nil
        keepaliveDeadline = nil
        actions.append(.tearDownEdge(closeNotify: closing.sent && !edgeBroken))
        actions.append(.killConnection)
        if toLocal.count == 0, local != .closed { closeLocal(&actions) }
    }

    /// The edge's socket is gone (closed by us; a late report changes nothing).
    private mutating func edgeGone(_ actions: inout [Action]) {
        switch edge {
        case .open:
            edge = .done
            toOrigin.set(0, settings)
            owedPong = nil
            closeDeadline = nil
            keepaliveDeadline = nil
            actions.append(.tearDownEdge(closeNotify: false))
            if toLocal.count == 0, local != .closed { closeLocal(&actions) }
        case .dialling:
            edge = .done
        case .done, .released:
            break
        }
    }

    private mutating func timer(_ now: UInt64, _ actions: inout [Action]) {
        guard edge == .open else { return }
        if let deadline = closeDeadline, now >= deadline {
            // The edge did not answer our Close in time.
            tearDownEdge(&actions)
            return
        }
        if let deadline = lingerDeadline, now >= deadline {
            lingerDeadline = nil
            localEnded(now, &actions)
        }
        if let deadline = keepaliveDeadline, now >= deadline, !closing.sent {
            keepaliveDeadline = nil
            let seconds = settings.keepaliveSeconds
            switch keepalive.tick(sent: bytesToOrigin, received: bytesFromOrigin) {
            case .close:
                noteEnd(.keepaliveTimeout(after: .seconds(KeepaliveState.deadAfter * seconds)))
                closeBoth(now, &actions)
            case .ping:
                actions.append(.sendControl(opcode: WebSocketFrames.opPing, payload: []))
                keepaliveDeadline = now + UInt64(seconds) * 1_000_000_000
            case .none:
                keepaliveDeadline = now + UInt64(seconds) * 1_000_000_000
            }
        }
        if edge == .open { actions.append(.armTimer) }
    }

    private mutating func finishIfDone(_ actions: inout [Action]) {
        guard !finished, edge == .released, local == .closed else { return }
        finished = true
        actions.append(.finished(failureReported ? nil : (end ?? .reset(detail: "the WebSocket closed"))))
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
