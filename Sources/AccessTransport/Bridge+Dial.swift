internal import CCFWebSockets
internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The libwebsockets part of a bridge: dialling the WebSocket, the callbacks of its wsi, and a
/// dial that failed. Once `CLIENT_ESTABLISHED` fires, the data path (`Bridge.swift`) takes over
/// the TLS stream; libwebsockets then only keeps the connection's timer and closes it at the end.
extension Bridge {
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
            if let exhausted = FileDescriptors.exhausted() {
                fail(exhausted)
            } else if let problem = AddressResolver.routeProblem(address: address, port: config.dialPort) {
                fail(TunnelFailure.networkUnavailable(detail: "\(address):\(config.dialPort): \(problem)"))
            } else {
                fail(TunnelFailure.internalError("libwebsockets refused to start the connection to \(address):\(config.dialPort)"))
            }
            edge = .released
        } else if edge == .open {
            webSocket = wsi
        }
    }

    // MARK: Callbacks

    func handle(wsi: OpaquePointer, reason: lws_callback_reasons, user: UnsafeMutableRawPointer?,
                input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
        switch reason {
        case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER:
            // The 101 is read a byte at a time, so nothing after it stays in libwebsockets.
            if let session = lws_get_ssl(wsi) { _ = CCFShim_clamp_reads(session, 1) }
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
            // Armed first: reading what already arrived may start a Close, whose 2 s timer
            // must stay (12.8).
            armKeepalive(wsi)
            onEstablished(wsi: wsi)
            return 0
        case LWS_CALLBACK_TIMER:
            return onTimer(wsi)
        case LWS_CALLBACK_CLIENT_RECEIVE:
            // Bytes libwebsockets parsed itself would be out of order with ours: never expected,
            // since it stops reading at the upgrade.
            logger.error("connection \(id): libwebsockets delivered WebSocket data after the upgrade; closing")
            return -1
        case LWS_CALLBACK_CLIENT_CLOSED:
            onWebSocketClosed()
            return 0
        case LWS_CALLBACK_WSI_DESTROY:
            webSocket = nil
            edge = .released
            if ssl != nil { onWebSocketClosed() }
            finishIfDone()
            return 0
        default:
            return 0
        }
    }

    func appendHeaders(wsi: OpaquePointer, input: UnsafeMutableRawPointer?, len: Int) -> Int32 {
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
                let size = handshake.headers.reduce(0) { $0 + $1.name.count + $1.value.count + 1 }
                logger.error("connection \(id): the request headers do not fit libwebsockets' buffer")
                // Said plainly before libwebsockets reports a vague connection error.
                fail(.configuration(ConfigurationError(
                    "the upgrade request's headers (\(size) bytes) do not fit in one request of at most "
                        + "\(CarrierLoop.requestBufferSize / 1024) KiB: shorten the extra headers")))
                return -1
            }
        }
        return 0
    }

    func onConnectionError(wsi: OpaquePointer, message: String) {
        logger.debug("connection \(id): libwebsockets reports \"\(message)\"")
        let status = Int(lws_http_client_http_response(wsi))
        var location: String?
        if status >= 300 && status < 400 {
            var buffer = [CChar](repeating: 0, count: 4096)
            let n = lws_hdr_copy(wsi, &buffer, Int32(buffer.count), WSI_TOKEN_HTTP_LOCATION)
            if n > 0 { location = String(nulTerminated: buffer) }
        }
        var notHTTPStart: String?
        if let session = lws_get_ssl(wsi) {
            if tlsReason == nil { tlsReason = TLSSessionCache.verifyFailure(session) }
            var first = [CChar](repeating: 0, count: 8)   // CCFShim_not_http_answer keeps up to 7
            if CCFShim_not_http_answer(session, &first, Int32(first.count)) > 0 {
                notHTTPStart = String(decoding: first.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
        let config = loop.configuration
        let failure = DialFailureClassifier.classify(
            host: config.request.origin.host, address: "\(config.dialHost):\(config.dialPort)",
            credential: handshake.credential, status: status, location: location, message: message,
            tlsReason: tlsReason, recentLog: LWSLog.recentLines(), timeoutSeconds: config.handshakeTimeoutSeconds,
            proxy: config.proxy?.description, notHTTPStart: notHTTPStart)
        webSocket = nil
        edge.finish()
        fail(failure)
        finishIfDone()
    }

    func fail(_ failure: TunnelFailure) {
        guard !reportedFailure else { return }
        reportedFailure = true
        // The owner reports the plain message to people; the log keeps the technical detail.
        logger.debug("connection \(id) failed: \(failure.detail)")
        if !established, local != .closed {
            if handshake.handBackOnRefusal, failure.category == .authentication {
                let fd = localFD
                localFD = -1
                local = .closed
                loop.onEvent(.refused(id: id, socket: fd, failure))
                return
            }
            Glibc.close(localFD)
            localFD = -1
            local = .closed
        }
        loop.onEvent(.failed(id: id, failure))
    }
}
