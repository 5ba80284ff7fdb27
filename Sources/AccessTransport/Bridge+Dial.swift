internal import CCFWebSockets
internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Where a connection to the edge goes: what libwebsockets dials, and what a proxy is asked for.
struct EdgeRoute: Sendable {
    /// The numeric address libwebsockets connects to: the edge's, or the proxy's.
    var address: String
    /// Its port.
    var port: Int
    /// Through a proxy: the `host:port` asked for with `CONNECT`.
    var tunnelTarget: String?
}

/// Where a bridge's dial is. libwebsockets only opens the TCP connection (a RAW client); the
/// carrier does the rest on that socket itself: `CONNECT` to a proxy, the TLS handshake on its
/// own `SSL_CTX`, and the HTTP upgrade, written and read by us.
enum DialStage {
    /// libwebsockets is opening the TCP connection.
    case connecting
    /// The `CONNECT` request goes out, then the proxy's answer is read.
    case proxy
    /// The TLS handshake runs.
    case tls
    /// The upgrade request goes out, then the answer is read.
    case upgrade
    /// The WebSocket is open, or the dial failed: no more dialling.
    case over
}

/// The dial of a bridge: the TCP connection libwebsockets opens, then our own proxy `CONNECT`,
/// TLS handshake and HTTP upgrade, and a dial that failed. Once the 101 is read, the data path
/// (`Bridge.swift`) takes over the TLS stream, starting with the bytes that came after the 101.
extension Bridge {
    // MARK: Dialing

    /// Starts the dial: checks the request, then asks libwebsockets for the TCP connection.
    func dial(route: EdgeRoute) {
        let config = loop.configuration
        let origin = config.request.origin
        self.route = route
        let keyText = Base64.encode(loop.random.bytes(16), alphabet: .standard, padded: true)
        expectedAccept = Digest.webSocketAccept(key: keyText)
        let hostHeader = config.connectTo?.serverName ?? origin.hostHeader
        upgradeRequest = WebSocketUpgrade.requestHead(handshake.request, host: hostHeader, key: keyText)
        guard upgradeRequest.count <= WebSocketUpgrade.requestLimit else {
            // Said plainly before any byte leaves.
            fail(.configuration(ConfigurationError(
                "the upgrade request's headers (\(upgradeRequest.count) bytes) do not fit in one request of at most "
                    + "\(WebSocketUpgrade.requestLimit / 1024) KiB: shorten the extra headers")))
            upgradeRequest = []
            dialStage = .over
            apply(.edgeReleased)
            return
        }
        let via = route.tunnelTarget.map { " through the proxy \(route.address):\(route.port) (CONNECT \($0))" }
            ?? " via \(route.address):\(route.port)"
        logger.debug("connection \(id): dialing \(origin.webSocketURL)\(via)",
                     metadata: ["headers": "\(handshake.redactedLines)"])
        var wsi: OpaquePointer?
        route.address.withCString { addr in
            "RAW".withCString { method in
                CarrierLoop.edgeProtocolName.withCString { proto in
                    var info = lws_client_connect_info()
                    info.context = loop.lwsContext
                    info.vhost = loop.vhost
                    info.address = addr
                    info.host = addr
                    info.port = Int32(route.port)
                    info.method = method
                    info.local_protocol_name = proto
                    info.opaque_user_data = opaque
                    info.pwsi = withUnsafeMutablePointer(to: &wsi) { $0 }
                    _ = lws_client_connect_via_info(&info)
                }
            }
        }
        if wsi == nil {
            // Failed synchronously: the wsi no longer exists, whatever callbacks ran before (a
            // connection error reported then has already failed the bridge).
            if let exhausted = FileDescriptors.exhausted() {
                fail(exhausted)
            } else {
                fail(classified(.tcpConnect(message: "libwebsockets refused to start the connection",
                                            routeProblem: AddressResolver.routeProblem(address: route.address, port: route.port))))
            }
            dialStage = .over
            apply(.edgeReleased)
        } else if dialStage == .connecting {
            connection = wsi
            dialDeadline = Self.now() + UInt64(max(1, config.handshakeTimeoutSeconds)) * 1_000_000_000
            rearmTimer()
        }
    }

    /// The TCP connection is open: libwebsockets stops reading it, and our dial goes on.
    func onTCPConnected(wsi: OpaquePointer) {
        connection = wsi
        let fd = lws_get_socket_fd(wsi)
        _ = lws_rx_flow_control(wsi, 0)
        guard fd >= 0 else {
            failDial(.closedDuringTLS("libwebsockets gave no socket"))
            return
        }
        edgeFD = fd
        if let target = route.tunnelTarget {
            proxyRequest = WebSocketUpgrade.proxyConnectHead(target: target)
            dialSent = 0
            headReader = ResponseHeadReader()
            dialStage = .proxy
        } else {
            startTLS()
        }
        advanceDial()
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
        dialStage = .tls
    }

    /// Moves the dial on as far as the socket allows, then waits for the events it needs.
    func advanceDial() {
        var wanted: UInt32 = 0
        loop: while true {
            switch dialStage {
            case .connecting, .over:
                return
            case .proxy, .tls, .upgrade:
                let step: DialStep
                switch dialStage {
                case .proxy: step = proxyStep()
                case .tls: step = handshakeStep()
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
            logger.debug("connection \(id): \(TLSSessionCache.handshakeSummary(session))")
            dialSent = 0
            headReader = ResponseHeadReader()
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
            let count = Int(r)
            switch headReader.feed(UnsafeRawBufferPointer(start: buffer, count: count)) {
            case .needMore:
                continue
            case .complete(let head, let consumed):
                switch WebSocketUpgrade.judge(head, expectedAccept: expectedAccept) {
                case .accepted:
                    dialStage = .over
                    upgradeRequest = []
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

    /// The dial failed: everything of it is released, and the owner is told why.
    func failDial(_ problem: DialProblem) {
        dialStage = .over
        dialDeadline = nil
        unwatchEdge()
        releaseSession()
        fail(classified(problem))
        killConnection()
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

    // MARK: Callbacks

    func handle(wsi: OpaquePointer, reason: lws_callback_reasons, user: UnsafeMutableRawPointer?,
                input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        switch reason {
        case LWS_CALLBACK_RAW_CONNECTED:
            onTCPConnected(wsi: wsi)
            return 0
        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            let message = input.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? ""
            onConnectionError(message: message)
            return 0
        case LWS_CALLBACK_TIMER:
            return onTimer(wsi)
        case LWS_CALLBACK_RAW_RX:
            // Never expected: libwebsockets stops reading this socket as soon as it is connected.
            logger.error("connection \(id): libwebsockets read bytes of the edge's socket; closing")
            return -1
        case LWS_CALLBACK_RAW_CLOSE:
            if dialStage.isUnderWay {
                // libwebsockets saw the socket fail before we did: one more step names the cause.
                advanceDial()
                if dialStage.isUnderWay { failDial(.closedBeforeAnswer("the connection closed")) }
            }
            onConnectionClosed()
            return 0
        case LWS_CALLBACK_WSI_DESTROY:
            onConnectionReleased()
            return 0
        default:
            return 0
        }
    }

    /// libwebsockets could not open the TCP connection (it releases the connection next).
    func onConnectionError(message: String) {
        logger.debug("connection \(id): libwebsockets reports \"\(message)\"")
        // A dial given up already (failed, or aborted by a shutdown) has nothing more to say.
        guard dialStage == .connecting else { return }
        let problem = DialProblem.tcpConnect(message: message,
                                             routeProblem: AddressResolver.routeProblem(address: route.address, port: route.port))
        dialStage = .over
        dialDeadline = nil
        fail(classified(problem))
    }
}

extension DialStage {
    /// The dial is past libwebsockets' TCP connect and not over.
    var isUnderWay: Bool {
        switch self {
        case .proxy, .tls, .upgrade: return true
        case .connecting, .over: return false
        }
    }
}
