internal import CCFWebSockets
internal import CCFOpenSSL
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
    private unowned let loop: CarrierLoop
    private var localFD: Int32
    private var webSocket: OpaquePointer?
    private var local: OpaquePointer?
    /// The adopted local wsi, kept after `local` is cleared, to recognise its WSI_DESTROY.
    private var localHandle: OpaquePointer?
    private var closeLocalRequested = false
    /// No more bytes will come from / go to the WebSocket.
    private var webSocketDone = false
    /// No more bytes will come from / go to the local socket.
    private var localDone = false
    /// libwebsockets has destroyed the WebSocket wsi (or never made one): no callback can follow.
    private var webSocketReleased = false
    /// The local wsi is destroyed, or the unadopted descriptor closed: no callback can follow.
    private var localReleased = false
    private var established = false
    private var reportedFailure = false
    private var toOrigin = ByteQueue()
    private var toLocal = ByteQueue()
    private var localPaused = false
    private var webSocketPaused = false
    private var tlsReason: String?
    private var closeWebSocketWith: lws_close_status?
    private(set) var bytesToOrigin = 0
    private(set) var bytesFromOrigin = 0
    // Keepalive: counters seen at the last timer, and pings the edge has not answered since.
    private var keepaliveSnapshot = (toOrigin: 0, fromOrigin: 0)
    private var unansweredPings = 0
    private var heardPong = false
    private var pingPending = false

    private let handshake: Handshake

    init(id: Int, localFD: Int32, loop: CarrierLoop, handshake: Handshake) {
        self.id = id
        self.handshake = handshake
        self.localFD = localFD
        self.loop = loop
    }

    /// Both sides are gone and no callback can reach this bridge any more.
    var isFinished: Bool { webSocketReleased && localReleased }

    private var opaque: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }
    private var logger: Logger { loop.logger }

    // MARK: Dialing

    func dial(address: String) {
        let config = loop.configuration
        let origin = config.request.origin
        var flags = Int32(LCCSCF_USE_SSL.rawValue | LCCSCF_HTTP_NO_FOLLOW_REDIRECT.rawValue)
        if config.connectTo?.skipVerification == true {
            flags |= Int32(LCCSCF_ALLOW_SELFSIGNED.rawValue | LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK.rawValue
                           | LCCSCF_ALLOW_EXPIRED.rawValue | LCCSCF_ALLOW_INSECURE.rawValue)
        }
        let serverName = config.connectTo?.serverName ?? origin.hostHeader
        logger.debug("connection \(id): dialing \(origin.webSocketURL) via \(address):\(config.dialPort)",
                     metadata: ["headers": "\(handshake.redactedLines)"])
        var wsi: OpaquePointer?
        address.withCString { addr in
            origin.path.withCString { path in
                serverName.withCString { host in
                    CarrierLoop.webSocketProtocolName.withCString { proto in
                        var info = lws_client_connect_info()
                        info.context = loop.lwsContext
                        info.vhost = loop.vhost
                        info.address = addr
                        info.port = Int32(config.dialPort)
                        info.ssl_connection = flags
                        info.path = path
                        info.host = host
                        info.ietf_version_or_minus_one = -1
                        info.local_protocol_name = proto
                        info.opaque_user_data = opaque
                        info.pwsi = withUnsafeMutablePointer(to: &wsi) { $0 }
                        _ = lws_client_connect_via_info(&info)
                    }
                }
            }
        }
        if wsi == nil {
            // Failed synchronously: the wsi no longer exists, whatever callbacks ran before.
            // libwebsockets says nothing about why; the usual cause is no route to the edge.
            if let problem = AddressResolver.routeProblem(address: address, port: config.dialPort) {
                fail(TunnelFailure.networkUnavailable(detail: "\(address):\(config.dialPort): \(problem)"))
            } else {
                fail(TunnelFailure.internalError("libwebsockets refused to start the connection to \(address):\(config.dialPort)"))
            }
            webSocketDone = true
            webSocketReleased = true
        } else if !webSocketDone {
            webSocket = wsi
        }
    }

    // MARK: Callbacks

    func handle(wsi: OpaquePointer, reason: lws_callback_reasons, user: UnsafeMutableRawPointer?,
                input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        switch reason {
        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            return appendHeaders(wsi: wsi, input: input, len: len)
        case LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION:
            if len == 0, let store = user {
                let code = X509_STORE_CTX_get_error(OpaquePointer(store))
                if let text = X509_verify_cert_error_string(Int(code)) {
                    tlsReason = String(cString: text)
                }
            }
            return 0
        case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
            let message = input.map { String(cString: $0.assumingMemoryBound(to: CChar.self)) } ?? ""
            onConnectionError(wsi: wsi, message: message)
            return 0
        case LWS_CALLBACK_CLIENT_ESTABLISHED:
            webSocket = wsi
            onEstablished()
            armKeepalive(wsi)
            return 0
        case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
            heardPong = true
            return 0
        case LWS_CALLBACK_TIMER:
            return keepaliveTick(wsi)
        case LWS_CALLBACK_CLIENT_RECEIVE:
            return onOriginData(wsi: wsi, input: input, len: len)
        case LWS_CALLBACK_CLIENT_WRITEABLE:
            return writeToOrigin(wsi: wsi)
        case LWS_CALLBACK_CLIENT_CLOSED:
            onWebSocketClosed()
            return 0
        case LWS_CALLBACK_RAW_RX:
            return onLocalData(input: input, len: len)
        case LWS_CALLBACK_RAW_WRITEABLE:
            return writeToLocal(wsi: wsi)
        case LWS_CALLBACK_RAW_CLOSE:
            onLocalClosed()
            return 0
        case LWS_CALLBACK_WSI_DESTROY:
            if wsi == localHandle {
                local = nil
                localDone = true
                localReleased = true
            } else {
                webSocket = nil
                webSocketDone = true
                webSocketReleased = true
            }
            finishIfDone()
            return 0
        default:
            return 0
        }
    }

    private func appendHeaders(wsi: OpaquePointer, input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        guard let input else { return -1 }
        let cursor = input.assumingMemoryBound(to: UnsafeMutablePointer<UInt8>?.self)
        guard let start = cursor.pointee else { return -1 }
        let end = start + len
        for header in handshake.headers {
            let failed = header.name.withUnsafeBufferPointer { name in
                header.value.withUnsafeBufferPointer { value in
                    lws_add_http_header_by_name(wsi, name.baseAddress, value.baseAddress,
                                                Int32(value.count - 1), cursor, end) != 0
                }
            }
            if failed {
                logger.error("connection \(id): the request headers do not fit libwebsockets' buffer")
                return -1
            }
        }
        return 0
    }

    private func onConnectionError(wsi: OpaquePointer, message: String) {
        logger.debug("connection \(id): libwebsockets reports \"\(message)\"")
        let status = Int(lws_http_client_http_response(wsi))
        var location: String?
        if status >= 300 && status < 400 {
            var buffer = [CChar](repeating: 0, count: 4096)
            let n = lws_hdr_copy(wsi, &buffer, Int32(buffer.count), WSI_TOKEN_HTTP_LOCATION)
            if n > 0 { location = String(nulTerminated: buffer) }
        }
        let config = loop.configuration
        let failure = DialFailureClassifier.classify(
            host: config.request.origin.host, address: "\(config.dialHost):\(config.dialPort)",
            credential: handshake.credential, status: status, location: location, message: message,
            tlsReason: tlsReason, recentLog: LWSLog.recentLines(), timeoutSeconds: config.handshakeTimeoutSeconds)
        webSocket = nil
        webSocketDone = true
        fail(failure)
        finishIfDone()
    }

    private func fail(_ failure: TunnelFailure) {
        guard !reportedFailure else { return }
        reportedFailure = true
        // The owner reports the plain message to people; the log keeps the technical detail.
        logger.debug("connection \(id) failed: \(failure.detail)")
        if !established, local == nil, !localDone {
            if handshake.handBackOnRefusal, failure.category == .authentication {
                let fd = localFD
                localFD = -1
                localDone = true
                localReleased = true
                loop.onEvent(.refused(id: id, socket: fd, failure))
                return
            }
            Glibc.close(localFD)
            localFD = -1
            localDone = true
            localReleased = true
        }
        loop.onEvent(.failed(id: id, failure))
    }

    private func onEstablished() {
        established = true
        logger.debug("connection \(id): WebSocket established")
        var desc = lws_adopt_desc_t()
        desc.vh = loop.vhost
        desc.type = LWS_ADOPT_SOCKET
        desc.fd.sockfd = localFD
        desc.opaque = opaque
        let adopted: OpaquePointer? = CarrierLoop.rawProtocolName.withCString { name in
            desc.vh_prot_name = name
            return lws_adopt_descriptor_vhost_via_info(&desc)
        }
        guard let adopted else {
            logger.error("connection \(id): libwebsockets could not adopt the local socket")
            Glibc.close(localFD)
            localFD = -1
            localDone = true
            localReleased = true
            closeWebSocket(status: LWS_CLOSE_STATUS_GOINGAWAY)
            return
        }
        local = adopted
        localHandle = adopted
        loop.onEvent(.established(id: id))
    }

    // MARK: Local → origin

    private func onLocalData(input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        guard let input, len > 0 else { return 0 }
        toOrigin.append(UnsafeRawBufferPointer(start: input, count: len))
        if toOrigin.count >= loop.tuning.highWatermark, !localPaused, let local {
            localPaused = true
            _ = lws_rx_flow_control(local, 0)
        }
        if let webSocket { _ = lws_callback_on_writable(webSocket) }
        return 0
    }

    private func writeToOrigin(wsi: OpaquePointer) -> Int32 {
        let pre = loop.pre
        let scratch = loop.scratch
        if pingPending {
            pingPending = false
            if lws_write(wsi, scratch + pre, 0, LWS_WRITE_PING) < 0 { return -1 }
            if lws_send_pipe_choked(wsi) != 0 {
                _ = lws_callback_on_writable(wsi)
                return 0
            }
        }
        while !toOrigin.isEmpty {
            var failed = false
            let sent = toOrigin.consume(upTo: loop.tuning.chunkSize) { chunk in
                (scratch + pre).update(from: chunk.bindMemory(to: UInt8.self).baseAddress!, count: chunk.count)
                if lws_write(wsi, scratch + pre, chunk.count, LWS_WRITE_BINARY) < chunk.count { failed = true }
                return chunk.count
            }
            if failed {
                logger.info("connection \(id): writing to the WebSocket failed")
                return -1
            }
            bytesToOrigin += sent
            if lws_send_pipe_choked(wsi) != 0 { break }
        }
        if localPaused, toOrigin.count <= loop.tuning.lowWatermark, let local {
            localPaused = false
            _ = lws_rx_flow_control(local, 1)
        }
        if !toOrigin.isEmpty {
            _ = lws_callback_on_writable(wsi)
            return 0
        }
        if let status = closeWebSocketWith ?? (localDone ? LWS_CLOSE_STATUS_NORMAL : nil) {
            lws_close_reason(wsi, status, nil, 0)
            return -1
        }
        return 0
    }

    // MARK: Origin → local

    private func onOriginData(wsi: OpaquePointer, input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        if lws_frame_is_binary(wsi) == 0 {
            logger.error("connection \(id): the origin sent a text frame; closing (only binary frames carry tunnel bytes)")
            closeWebSocket(status: LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE)
            return 0
        }
        guard let input, len > 0 else { return 0 }
        if localDone { return 0 }
        toLocal.append(UnsafeRawBufferPointer(start: input, count: len))
        bytesFromOrigin += len
        if toLocal.count >= loop.tuning.highWatermark, !webSocketPaused {
            webSocketPaused = true
            _ = lws_rx_flow_control(wsi, 0)
        }
        if let local { _ = lws_callback_on_writable(local) }
        return 0
    }

    private func writeToLocal(wsi: OpaquePointer) -> Int32 {
        let pre = loop.pre
        let scratch = loop.scratch
        while !toLocal.isEmpty {
            var failed = false
            _ = toLocal.consume(upTo: loop.tuning.chunkSize) { chunk in
                (scratch + pre).update(from: chunk.bindMemory(to: UInt8.self).baseAddress!, count: chunk.count)
                if lws_write(wsi, scratch + pre, chunk.count, LWS_WRITE_HTTP) < chunk.count { failed = true }
                return chunk.count
            }
            if failed { return -1 }
            if lws_send_pipe_choked(wsi) != 0 { break }
        }
        if webSocketPaused, toLocal.count <= loop.tuning.lowWatermark, let webSocket {
            webSocketPaused = false
            _ = lws_rx_flow_control(webSocket, 1)
        }
        if !toLocal.isEmpty {
            _ = lws_callback_on_writable(wsi)
            return 0
        }
        return webSocketDone || closeLocalRequested ? -1 : 0
    }

    // MARK: Keepalive

    private func armKeepalive(_ wsi: OpaquePointer) {
        let seconds = loop.configuration.keepaliveSeconds
        guard seconds > 0 else { return }
        keepaliveSnapshot = (bytesToOrigin, bytesFromOrigin)
        lws_set_timer_usecs(wsi, lws_usec_t(seconds) * 1_000_000)
    }

    /// Every interval: an idle tunnel sends a ping; three intervals of pings without any answer
    /// (no pong, no data) mean the edge or the path is gone, so the tunnel is closed.
    private func keepaliveTick(_ wsi: OpaquePointer) -> Int32 {
        let seconds = loop.configuration.keepaliveSeconds
        guard seconds > 0, wsi == webSocket, !webSocketDone else { return 0 }
        let heard = heardPong || bytesFromOrigin != keepaliveSnapshot.fromOrigin
        let active = heard || bytesToOrigin != keepaliveSnapshot.toOrigin
        if heard { unansweredPings = 0 }
        heardPong = false
        keepaliveSnapshot = (bytesToOrigin, bytesFromOrigin)
        if unansweredPings >= 3 {
            logger.warning("connection \(id): the edge did not answer keepalive pings for \(3 * seconds) s; closing the tunnel")
            closeBoth()
            return 0
        }
        if !active {
            unansweredPings += 1
            pingPending = true
            _ = lws_callback_on_writable(wsi)
        }
        lws_set_timer_usecs(wsi, lws_usec_t(seconds) * 1_000_000)
        return 0
    }

    // MARK: Endings

    private func onLocalClosed() {
        logger.debug("connection \(id): local side closed")
        local = nil
        localDone = true
        toLocal.reset()
        if let webSocket { _ = lws_callback_on_writable(webSocket) }
        finishIfDone()
    }

    private func onWebSocketClosed() {
        logger.debug("connection \(id): WebSocket closed")
        webSocket = nil
        webSocketDone = true
        toOrigin.reset()
        if let local { _ = lws_callback_on_writable(local) }
        finishIfDone()
    }

    private func closeWebSocket(status: lws_close_status) {
        closeWebSocketWith = status
        if let webSocket { _ = lws_callback_on_writable(webSocket) }
    }

    /// Closes both sides now (shutdown): the WebSocket with a Close frame after what is queued.
    func closeBoth() {
        closeWebSocket(status: LWS_CLOSE_STATUS_GOINGAWAY)
        closeLocalRequested = true
        if let local { _ = lws_callback_on_writable(local) }
        if !established, !localDone, local == nil {
            Glibc.close(localFD)
            localFD = -1
            localDone = true
            localReleased = true
        }
    }

    private func finishIfDone() {
        guard isFinished else { return }
        if !reportedFailure {
            loop.onEvent(.closed(id: id, toOrigin: bytesToOrigin, fromOrigin: bytesFromOrigin))
        }
        loop.forget(self)
    }
}
