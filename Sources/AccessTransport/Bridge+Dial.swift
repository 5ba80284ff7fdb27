internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Where a connection to the edge goes: the address dialled, and what a proxy is asked for.
struct EdgeRoute: Sendable, Equatable {
    /// The numeric address connected to: the edge's, or the proxy's.
    var address: String
    /// Its port.
    var port: Int
    /// Through a proxy: the `host:port` asked for with `CONNECT`.
    var tunnelTarget: String?
}

/// Where a bridge's dial is. The bridge does all of it on its own socket, driven by the carrier's
/// epoll set: the TCP connect, `CONNECT` to a proxy, the TLS handshake on the carrier's own
/// `SSL_CTX`, and the HTTP upgrade, written and read by us.
enum DialStage {
    /// The TCP connection is being opened.
    case connecting
    /// The `CONNECT` request goes out, then the proxy's answer is read.
    case proxy
    /// The TLS handshake runs.
    case tls
    /// The upgrade request goes out, then the answer is read.
    case upgrade
    /// A spare's TLS is open and it waits for a local connection, reading only what the edge
    /// sends unasked (session tickets); anything else, or the end, discards it.
    case parked
    /// The WebSocket is open, or the dial failed: no more dialling.
    case over
}

/// The dial of a bridge: the TCP connection, our proxy `CONNECT`, TLS handshake and HTTP upgrade,
/// and a dial that failed. Once the 101 is read, the data path (`Bridge.swift`) takes over the TLS
/// stream, starting with the bytes that came after the 101.
extension Bridge {
    // MARK: Dialing

    /// Starts the dial: checks the request, then opens the TCP connection (non-blocking). A spare
    /// has no request yet: it opens the connection and TLS, then parks.
    func dial(route: EdgeRoute) {
        let config = loop.configuration
        let origin = config.request.origin
        self.route = route
        if !isSpare {
            guard prepareUpgrade() else { return }
        }
        let via = route.tunnelTarget.map { " through the proxy \(route.address):\(route.port) (CONNECT \($0))" }
            ?? " via \(route.address):\(route.port)"
        if isSpare {
            logger.debug("spare connection: dialing \(origin.webSocketURL)\(via) ahead of the next local connection")
        } else {
            logger.debug("connection \(id): dialing \(origin.webSocketURL)\(via)",
                         metadata: ["headers": "\(handshake.redactedLines)"])
        }
        dialDeadline = handshakeDeadline()
        switch SocketAddress(numeric: route.address, port: route.port) {
        case nil:
            failDial(.tcpConnect(SystemError(EINVAL, operation: "the address \(route.address)")))
        case let address?:
            let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else {
                failDial(.tcpConnect(SystemError.current("socket()")))
                return
            }
            edgeFD = fd
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let result = address.withSockaddr { connect(fd, $0, $1) }
            let error = SystemError.current("connect()")
            if result == 0 {
                connected()
                advanceDial()
            } else if error.code == EINPROGRESS || error.code == EINTR {
                // Writable once connected, or an error: `connectStep` says which.
                watchEdge(EPOLLOUT.rawValue)
                rearmTimer()
            } else {
                failDial(.tcpConnect(error))
            }
        }
    }

    /// Builds this connection's upgrade request (a fresh key, the expected accept). False, with
    /// the failure reported, when the headers do not fit in one request.
    private func prepareUpgrade() -> Bool {
        let config = loop.configuration
        let keyText = Base64.encode(loop.random.bytes(16), alphabet: .standard, padded: true)
        expectedAccept = Digest.webSocketAccept(key: keyText)
        let hostHeader = config.connectTo?.serverName ?? config.request.origin.hostHeader
        upgradeRequest = WebSocketUpgrade.requestHead(handshake.request, host: hostHeader, key: keyText)
        guard upgradeRequest.count <= WebSocketUpgrade.requestLimit else {
            // Said plainly before any byte leaves.
            let size = upgradeRequest.count
            upgradeRequest = []
            dialStage = .over
            dialDeadline = nil
            releaseSession()
            closeEdgeSocket()
            fail(.configuration(ConfigurationError(
                "the upgrade request's headers (\(size) bytes) do not fit in one request of at most "
                    + "\(WebSocketUpgrade.requestLimit / 1024) KiB: shorten the extra headers")))
            return false
        }
        return true
    }

    /// A local connection takes over this spare (already re-keyed to `id` by the loop): its
    /// request goes out as soon as the spare's TLS is open, at once when it is parked.
    /// `output` and `names`: a `LocalPair`'s output and names (`fd` is its input).
    func adopt(localFD fd: Int32, output: Int32, names: LocalNames, handshake: Handshake) {
        localFD = fd
        outputFD = output
        localNames = names
        self.handshake = handshake
        isSpare = false
        adoptedParked = dialStage == .parked
        guard prepareUpgrade() else { return }
        logger.debug("connection \(id): on a spare connection to the edge (\(adoptedParked ? "TLS open" : "TLS under way"))",
                     metadata: ["headers": "\(handshake.redactedLines)"])
        if adoptedParked { logger.debug("connection \(id): \(spareHandshake)") }
        spareHandshake = ""
        dialDeadline = handshakeDeadline()
        if adoptedParked {
            // Parking left the request's counters at their start (`handshakeStep`).
            dialStage = .upgrade
            advanceDial()
        }
        rearmTimer()
    }

    /// When a dial that starts now fails for want of an answer (the handshake timeout).
    private func handshakeDeadline() -> UInt64 {
        Self.now() + UInt64(max(1, loop.configuration.handshakeTimeoutSeconds)) * 1_000_000_000
    }

    /// A new key after the loop moved this bridge to another id: its socket's epoll tag and its
    /// timer follow.
    func rekey(to newID: Int) {
        id = newID
        if edgeFD >= 0, edgeWatched { loop.modify(fd: edgeFD, tag: tag(.edge), events: edgeEvents) }
        scheduledDeadline = nil
        timerGeneration &+= 1
    }

    /// The TCP connect finished: its outcome.
    private func connectStep() -> DialStep {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(edgeFD, SOL_SOCKET, SO_ERROR, &error, &length) != 0 { error = errno }
        if error != 0 { return .failed(.tcpConnect(SystemError(error, operation: "connect()"))) }
        connected()
        return dialStage == .over ? .wait(0) : .next
    }

    /// The TCP connection is open: the proxy's `CONNECT`, or TLS at once.
    private func connected() {
        if let target = route.tunnelTarget {
            proxyRequest = WebSocketUpgrade.proxyConnectHead(target: target)
            dialSent = 0
            headReader = ResponseHeadReader()
            dialStage = .proxy
        } else {
            startTLS()
        }
    }

    /// Starts the TLS handshake on the connected socket.
    private func startTLS() {
        let config = loop.configuration
        let host = config.request.origin.host
        guard let made = loop.tls.connection(fd: edgeFD, host: host, serverName: config.connectTo?.serverName ?? host) else {
            failDial(.tls("OpenSSL could not make a connection object"))
            return
        }
        session = made
        // The callbacks find the bridge through the `SSL`'s app data (ex-data slot 0, which
        // OpenSSL keeps for it): the key log and the record count for `TLSRecords`, and a TLS 1.2
        // edge's HelloRequest.
        handover = TLSHandover()
        _ = SSL_set_ex_data(made, 0, opaque)
        watchMessages(made)
        dialStage = .tls
    }

    /// Moves the dial on as far as the socket allows, then waits for the events it needs.
    func advanceDial() {
        var wanted: UInt32 = 0
        loop: while true {
            switch dialStage {
            case .over:
                return
            case .connecting, .proxy, .tls, .upgrade, .parked:
                let step: DialStep
                switch dialStage {
                case .connecting: step = connectStep()
                case .proxy: step = proxyStep()
                case .tls: step = handshakeStep()
                case .parked: step = parkedStep()
                default: step = upgradeStep()
                }
                switch step {
                case .wait(let events): wanted = events; break loop
                case .next: continue loop
                case .failed(let problem): failDial(problem); return
                }
            }
        }
        watchEdge(wanted)
    }

    /// What one step of the dial came to.
    enum DialStep {
        /// Wait for these epoll events on the edge's socket.
        case wait(UInt32)
        /// The stage changed: go on.
        case next
        /// The dial failed.
        case failed(DialProblem)
    }

    /// Sends `CONNECT`, then reads the proxy's answer without reading past it (the TLS
    /// handshake that follows is ours): each read peeks, and takes only the head's bytes.
    private func proxyStep() -> DialStep {
        while dialSent < proxyRequest.count {
            let n = proxyRequest.withUnsafeBytes { send(edgeFD, $0.baseAddress! + dialSent, $0.count - dialSent, Int32(MSG_NOSIGNAL)) }
            if n > 0 { dialSent += n; continue }
            let code = errno
            if n < 0 && code == EINTR { continue }
            if n < 0 && (code == EAGAIN || code == EWOULDBLOCK) { return .wait(EPOLLOUT.rawValue) }
            return .failed(.proxyBroken("sending CONNECT failed: \(SystemError(code))"))
        }
        let room = min(loop.rxCapacity, 16 << 10)
        while true {
            let n = recv(edgeFD, loop.rxBuffer, room, Int32(MSG_PEEK))
            if n == 0 { return .failed(.proxyBroken("it closed the connection without answering CONNECT")) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { return .wait(EPOLLIN.rawValue) }
                return .failed(.proxyBroken("reading its answer to CONNECT failed: \(SystemError(code))"))
            }
            let outcome = headReader.feed(UnsafeRawBufferPointer(start: loop.rxBuffer, count: n))
            let taken: Int
            switch outcome {
            case .needMore: taken = n
            case .complete(_, let consumed): taken = consumed
            default: taken = 0
            }
            if taken > 0 { _ = recv(edgeFD, loop.rxBuffer, taken, 0) }
            switch outcome {
            case .needMore:
                continue
            case .complete(let head, _):
                guard (200...299).contains(head.status) else {
                    return .failed(.proxyRefused(status: head.status, reason: head.reason))
                }
                logger.debug("connection \(id): the proxy opened the tunnel (HTTP \(head.status))")
                startTLS()
                return .next
            case .notHTTP(let first):
                return .failed(.proxyBroken("an answer to CONNECT that is not HTTP (\"\(DialFailureClassifier.shown(first))…\")"))
            case .malformed(let why):
                return .failed(.proxyBroken("an answer to CONNECT that cannot be parsed (\(why))"))
            case .tooLarge(let limit):
                return .failed(.proxyBroken("an answer to CONNECT larger than \(limit / 1024) KiB"))
            }
        }
    }

    /// One call of the TLS handshake.
    private func handshakeStep() -> DialStep {
        guard let session else { return .wait(0) }
        ERR_clear_error()
        let r = SSL_connect(session)
        if r == 1 {
            let summary = TLSSessionCache.handshakeSummary(session)
            if isSpare {
                spareHandshake = summary
                logger.debug("spare connection: \(summary)")
            } else {
                logger.debug("connection \(id): \(summary)")
            }
            let pins = loop.configuration.pins
            if !pins.isEmpty {
                let chain = TLSSessionCache.presentedPins(session)
                guard let matched = chain.firstIndex(where: { pins.contains($0) }) else {
                    return .failed(.pinMismatch(presented: chain.enumerated().map { index, pin in
                        "\(pin) (\(index == 0 ? "leaf" : "certificate \(index + 1) of the chain"))"
                    }))
                }
                logger.debug("connection \(id): the pinned key \(chain[matched]) is the \(matched == 0 ? "leaf's" : "key of certificate \(matched + 1) of the chain")")
            }
            handover?.handshakeFinished()
            dialSent = 0
            headReader = ResponseHeadReader()
            if isSpare {
                dialStage = .parked
                dialDeadline = Self.now() + loop.spareLifetimeNanoseconds
                rearmTimer()
                loop.spareParked(self)
                logger.debug("spare connection: TLS open; it waits \(loop.spareLifetimeText) for the next local connection")
                return .next
            }
            dialStage = .upgrade
            return .next
        }
        let code = errno
        let error = SSL_get_error(session, r)
        switch error {
        case SSL_ERROR_WANT_READ: return .wait(EPOLLIN.rawValue)
        case SSL_ERROR_WANT_WRITE: return .wait(EPOLLOUT.rawValue)
        default: return .failed(tlsProblem(session, error: error, errno: code))
        }
    }

    /// Why a TLS handshake failed: the certificate's verdict, else OpenSSL's reason, else how the
    /// connection ended.
    private func tlsProblem(_ session: OpaquePointer, error: Int32, errno code: Int32) -> DialProblem {
        if let reason = TLSSessionCache.verifyFailure(session) { return .tls(reason) }
        let queued = ERR_peek_last_error()
        ERR_clear_error()
        if error == SSL_ERROR_SSL, queued != 0 {
            if ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING {
                return .closedDuringTLS("closed without a TLS alert")
            }
            if let text = ERR_reason_error_string(queued) { return .tls(String(cString: text)) }
            return .tls("OpenSSL error \(queued)")
        }
        if error == SSL_ERROR_SYSCALL, code != 0 { return .closedDuringTLS(SystemError(code).description) }
        return .closedDuringTLS("closed by the peer")
    }

    /// A parked spare heard from the edge: session tickets are taken in; the end, an alert or
    /// bytes nobody asked for discard it (no request was sent, so nothing of anyone's is lost).
    private func parkedStep() -> DialStep {
        guard let session else { return .wait(0) }
        ERR_clear_error()
        let r = SSL_read(session, loop.rxBuffer, Int32(loop.rxCapacity))
        if r > 0 { return .failed(.closedDuringTLS("the edge sent data before any request")) }
        let code = errno
        let error = SSL_get_error(session, r)
        switch error {
        case SSL_ERROR_WANT_READ: return .wait(EPOLLIN.rawValue)
        case SSL_ERROR_WANT_WRITE: return .wait(EPOLLOUT.rawValue)
        default: return .failed(.closedDuringTLS(streamEnd(error: error, errno: code, writing: false)))
        }
    }

    /// Sends the upgrade request, then reads the answer: bytes after its head are the first of
    /// the data path, whatever the TLS records.
    private func upgradeStep() -> DialStep {
        guard let session else { return .wait(0) }
        while dialSent < upgradeRequest.count {
            ERR_clear_error()
            let r = upgradeRequest.withUnsafeBytes {
                SSL_write(session, $0.baseAddress! + dialSent, Int32($0.count - dialSent))
            }
            if r > 0 { dialSent += Int(r); continue }
            let code = errno
            let error = SSL_get_error(session, r)
            switch error {
            case SSL_ERROR_WANT_WRITE: return .wait(EPOLLOUT.rawValue)
            case SSL_ERROR_WANT_READ: return .wait(EPOLLIN.rawValue)
            default: return .failed(.closedBeforeAnswer(streamEnd(error: error, errno: code, writing: true)))
            }
        }
        let buffer = loop.rxBuffer
        while true {
            ERR_clear_error()
            let r = SSL_read(session, buffer, Int32(loop.rxCapacity))
            if r <= 0 {
                let code = errno
                let error = SSL_get_error(session, r)
                if error == SSL_ERROR_WANT_READ { return .wait(EPOLLIN.rawValue) }
                if error == SSL_ERROR_WANT_WRITE { return .wait(EPOLLOUT.rawValue) }
                return .failed(.closedBeforeAnswer(streamEnd(error: error, errno: code, writing: false)))
            }
            answerStarted = true
            let count = Int(r)
            switch headReader.feed(UnsafeRawBufferPointer(start: buffer, count: count)) {
            case .needMore:
                continue
            case .complete(let head, let consumed):
                switch WebSocketUpgrade.judge(head, expectedAccept: expectedAccept) {
                case .accepted:
                    dialStage = .over
                    // What only the dial needed goes now (the head's bytes and its parsed form
                    // would stay for the connection's life: memory per idle connection).
                    upgradeRequest = []
                    headReader = ResponseHeadReader()
                    expectedAccept = ""
                    onEstablished(leftover: UnsafeRawBufferPointer(start: buffer + consumed, count: count - consumed))
                    return .wait(edgeEvents)
                case .refused(let status, let location):
                    return .failed(.refused(status: status, location: location))
                case .broken(let what):
                    return .failed(.brokenAnswer(what))
                }
            case .notHTTP(let first):
                return .failed(.notHTTP(first: first))
            case .malformed(let why):
                return .failed(.unreadableAnswer(why))
            case .tooLarge(let limit):
                return .failed(.unreadableAnswer("larger than \(limit / 1024) KiB"))
            }
        }
    }

    /// How the TLS stream ended while the upgrade was under way, in words.
    private func streamEnd(error: Int32, errno code: Int32, writing: Bool) -> String {
        ERR_clear_error()
        switch error {
        case SSL_ERROR_ZERO_RETURN: return "TLS closed"
        case SSL_ERROR_SYSCALL where code != 0: return SystemError(code).description
        default: return writing ? "writing the request failed" : "the connection ended"
        }
    }

    /// The dial failed: everything of it is released, and the owner is told why. A spare goes
    /// without a word; a connection whose parked spare the edge had closed (it ends before the
    /// answer's first byte) is dialled once more on a new connection.
    func failDial(_ problem: DialProblem) {
        if isSpare {
            if dialStage == .parked, case .closedDuringTLS(let how) = problem {
                logger.debug("spare connection: the edge ended it while it waited (\(how)); dropped")
            } else {
                logger.debug("spare connection: \(classified(problem).detail); dropped")
            }
            discardSpare(closeNotify: false)
            return
        }
        if adoptedParked, !answerStarted, case .closedBeforeAnswer(let how) = problem {
            logger.debug("connection \(id): the spare connection was closed by the edge (\(how)); dialling a new one")
            adoptedParked = false
            releaseSession()
            dropEdgeSocket()
            dialStage = .connecting
            dial(route: route)
            return
        }
        dialStage = .over
        dialDeadline = nil
        releaseSession()
        closeEdgeSocket()
        fail(classified(problem))
    }

    func classified(_ problem: DialProblem) -> TunnelFailure {
        let config = loop.configuration
        let context = DialFailureClassifier.Context(
            host: config.request.origin.host, address: HostText.withPort(config.dialHost, config.dialPort),
            credential: handshake.credential,
            proxy: route.tunnelTarget == nil ? nil : config.proxy?.description,
            timeoutSeconds: config.handshakeTimeoutSeconds)
        return DialFailureClassifier.classify(problem, context)
    }
}

extension Bridge {
    /// A spare the loop no longer wants (it expired, the loop stops, the edge's address changed)
    /// leaves it, with a close_notify when its TLS is open.
    func closeSpare() {
        discardSpare(closeNotify: dialStage == .parked)
    }

    /// The spare leaves the loop: its TLS and socket are released (after a close_notify when
    /// asked), and no one is told.
    func discardSpare(closeNotify: Bool) {
        dialStage = .over
        dialDeadline = nil
        if closeNotify, let session {
            ERR_clear_error()
            _ = SSL_shutdown(session)
            ERR_clear_error()
        }
        releaseSession()
        dropEdgeSocket()
        loop.spareGone(self)
    }
}

extension DialStage {
    /// The dial has started and is not over.
    var isUnderWay: Bool { self != .over }
}
