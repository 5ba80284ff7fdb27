internal import CCFOpenSSL
internal import CCFShim
import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// The carrier's own TLS client: one `SSL_CTX` per carrier, made and freed by us, and one `SSL`
/// per connection on the bridge's own socket (reference/DECISIONS.md, "Own TLS and upgrade").
/// Nothing here is process-wide: the context's settings,
/// the session it keeps for resumption and its verification policy live in the context.
final class TLSClientContext {
    /// The `SSL_CTX`.
    let context: OpaquePointer
    /// Accept a self-signed, untrusted or expired certificate, and skip the name check
    /// (`--connect-to sni:port:host`, as in cloudflared).
    let acceptsUnverified: Bool

    /// The ALPN list we offer: HTTP/1.1 only, since the WebSocket upgrade is an HTTP/1.1 request.
    private static let alpn: [UInt8] = [8] + Array("http/1.1".utf8)

    /// A client context trusting `caFile` (PEM), or OpenSSL's default verify paths when nil
    /// (the system store; `SSL_CERT_FILE` and `SSL_CERT_DIR` override it, as for cloudflared).
    init(caFile: String?, acceptsUnverified: Bool) throws(TunnelFailure) {
        guard let method = TLS_client_method(), let made = SSL_CTX_new(method) else {
            throw .internalError("OpenSSL could not create a TLS client context")
        }
        context = made
        self.acceptsUnverified = acceptsUnverified
        // From here on deinit frees the context, whatever fails below.
        _ = SSL_CTX_ctrl(made, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_2_VERSION), nil)
        // RELEASE_BUFFERS: an idle connection gives its ~33 KB of TLS read and write buffers back
        // (measured: 33–35 KB of RSS per idle tunnel without it, 17–19 KB with it).
        _ = SSL_CTX_ctrl(made, SSL_CTRL_MODE,
                         Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS), nil)
        // An Access edge never renegotiates (it speaks TLS 1.3, which has no renegotiation); a TLS
        // 1.2 peer that asks gets a no_renegotiation alert and the stream goes on (issue 28.1).
        _ = SSL_CTX_set_options(made, CCFShim_SSL_OP_NO_RENEGOTIATION())
        // No read-ahead: OpenSSL's would move what is left in its buffer to the front before
        // every record. A bridge's reads go through `RecordSource` instead, one recv() per 256 KiB.
        if let caFile {
            guard SSL_CTX_load_verify_locations(made, caFile, nil) == 1 else {
                ERR_clear_error()
                if let exhausted = FileDescriptors.exhausted() { throw exhausted }
                throw .configuration(ConfigurationError(
                    "cannot load the CA certificates from \(caFile): give a readable PEM file of CA certificates"),
                    subject: .caFile)
            }
        } else if SSL_CTX_set_default_verify_paths(made) != 1 {
            ERR_clear_error()
            throw .configuration(ConfigurationError(
                "cannot load the system CA certificates: give a PEM file of CA certificates with --ca-file"),
                subject: .caFile)
        }
        _ = Self.alpn.withUnsafeBufferPointer { SSL_CTX_set_alpn_protos(made, $0.baseAddress, UInt32($0.count)) }
        SSL_CTX_set_verify(made, SSL_VERIFY_PEER, TLSSessionCache.verifyCertificate)
        // The application traffic secrets go to the connection's `TLSHandover` (its records after
        // the upgrade are ours: `TLSRecords`), and nowhere else.
        SSL_CTX_set_keylog_callback(made, Bridge.keyLog)
        guard TLSSessionCache.install(on: made, acceptsUnverified: acceptsUnverified) else {
            throw .internalError("OpenSSL refused the TLS session hooks")
        }
        guard TLSSessionCache.preferFastCiphers(on: made) else {
            throw .internalError("OpenSSL refused our TLS 1.3 cipher suites")
        }
    }

    deinit { SSL_CTX_free(context) }

    /// A client `SSL` on the connected socket `fd`, for the edge called `host` (checked against
    /// its certificate unless `acceptsUnverified`) presenting `serverName` (SNI), with the newest
    /// session of this context offered for resumption. Nil when OpenSSL is out of memory.
    func connection(fd: Int32, host: String, serverName: String) -> OpaquePointer? {
        guard let ssl = SSL_new(context) else { return nil }
        guard SSL_set_fd(ssl, fd) == 1 else {
            SSL_free(ssl)
            return nil
        }
        if !acceptsUnverified {
            let param = SSL_get0_param(ssl)
            X509_VERIFY_PARAM_set_hostflags(param, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            if X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1 {
                _ = X509_VERIFY_PARAM_set1_host(param, host, 0)
            }
        }
        // SNI carries names only (RFC 6066 §3), never an address.
        if !Self.isAddress(serverName) {
            _ = serverName.withCString { name in
                SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, Int(TLSEXT_NAMETYPE_host_name), UnsafeMutableRawPointer(mutating: name))
            }
        }
        TLSSessionCache.offer(to: ssl)
        return ssl
    }

    /// Whether `text` is a numeric IPv4 or IPv6 address.
    static func isAddress(_ text: String) -> Bool {
        var buffer = in6_addr()
        return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
    }
}

/// TLS session resumption for the carrier's connections to the edge, and the certificate check.
///
/// Every new connection would otherwise pay a full TLS 1.3 handshake (certificate chain check and
/// two ECDSA verifications, most of a new connection's CPU). The new-session callback on the
/// carrier's `SSL_CTX` keeps a copy of the newest resumable session (ticket) the edge sent, and
/// each new connection is offered a copy of it before its ClientHello. Nothing else changes: a
/// resumed session carries the verification result of the full handshake it came from, made
/// under the same `SSL_CTX` (same CA file, same hostname), and an edge that cannot resume simply
/// answers with a full handshake.
///
/// The session lives in the `SSL_CTX`'s own ex-data and is freed with it, so it can never reach
/// another carrier's context (another CA file, another edge). The loops of one pool share the
/// `SSL_CTX` (one CA store, one session for all), so the slot is locked.
enum TLSSessionCache {
    /// The newest resumable session of one `SSL_CTX`, and its verification policy.
    final class Slot {
        /// The session, under `lock`: the loops of one pool share the context.
        private var session: OpaquePointer?
        private let lock = PThreadMutex()
        /// Accept a self-signed, untrusted or expired certificate (`--connect-to sni:port:host`).
        let acceptsUnverified: Bool
        init(acceptsUnverified: Bool) { self.acceptsUnverified = acceptsUnverified }
        deinit { if let session { SSL_SESSION_free(session) } }

        /// Keeps `copy` (owned) as the newest session.
        func store(_ copy: OpaquePointer) {
            lock.lock()
            let old = session
            session = copy
            lock.unlock()
            if let old { SSL_SESSION_free(old) }
        }

        /// A copy of the newest session (owned by the caller), if there is one.
        func copy() -> OpaquePointer? {
            lock.lock()
            defer { lock.unlock() }
            return session.flatMap { SSL_SESSION_dup($0) }
        }
    }

    /// Our ex-data index on `SSL_CTX`s (taken once; only our own contexts carry a slot under it);
    /// its free hook releases the slot with the context.
    private static let exDataIndex: Int32 = CRYPTO_get_ex_new_index(
        CRYPTO_EX_INDEX_SSL_CTX, 0, nil, nil, nil,
        { _, pointer, _, _, _, _ in
            if let pointer { Unmanaged<Slot>.fromOpaque(pointer).release() }
        })

    /// Enables resumption on one of our client `SSL_CTX`s (idempotent). Returns false if OpenSSL
    /// refused.
    @discardableResult
    static func install(on context: OpaquePointer, acceptsUnverified: Bool) -> Bool {
        let index = exDataIndex
        guard index >= 0 else { return false }
        if SSL_CTX_get_ex_data(context, index) != nil { return true }
        let slot = Unmanaged.passRetained(Slot(acceptsUnverified: acceptsUnverified)).toOpaque()
        guard SSL_CTX_set_ex_data(context, index, slot) == 1 else {
            Unmanaged<Slot>.fromOpaque(slot).release()
            return false
        }
        // Client sessions go to our callback only, not to OpenSSL's internal store.
        _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_SESS_CACHE_MODE,
                         Int(SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE), nil)
        SSL_CTX_sess_set_new_cb(context) { ssl, session in
            // A copy: OpenSSL marks the connection's own session object unresumable when that
            // connection ends without a close_notify, which is how WebSocket tunnels end.
            guard let ssl, let session, SSL_SESSION_is_resumable(session) == 1,
                  let slot = TLSSessionCache.slot(of: ssl), let copy = SSL_SESSION_dup(session) else { return 0 }
            slot.store(copy)
            return 0   // OpenSSL keeps (and frees) its own reference
        }
        return true
    }

    /// Offers a copy of the newest session to a new connection, before its ClientHello: how this
    /// connection ends cannot spoil the stored session.
    static func offer(to ssl: OpaquePointer) {
        guard let slot = slot(of: ssl), let copy = slot.copy() else { return }
        _ = SSL_set_session(ssl, copy)
        SSL_SESSION_free(copy)   // the connection holds its own reference
    }

    /// TLS 1.3 cipher suites in our order of preference: AES-128-GCM first, as Go's TLS (and so
    /// cloudflared) orders them on machines with AES instructions. It costs ~10% less CPU per
    /// byte than OpenSSL's default first choice, AES-256-GCM; every TLS 1.3 server must offer it.
    static let cipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

    /// Sets our TLS 1.3 cipher suite order on a client `SSL_CTX`. Returns false if OpenSSL refused.
    @discardableResult
    static func preferFastCiphers(on context: OpaquePointer) -> Bool {
        SSL_CTX_set_ciphersuites(context, cipherSuites) == 1
    }

    /// How a connection's TLS handshake went, for the debug log: resumed or full, and the cipher.
    static func handshakeSummary(_ ssl: OpaquePointer) -> String {
        let cipher = SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? "?"
        return (resumed(ssl) ? "TLS session resumed" : "full TLS handshake") + " (\(cipher))"
    }

    /// The pins (SHA-256 of the SubjectPublicKeyInfo) of the certificates the peer presented,
    /// leaf first. A resumed session keeps the chain of the full handshake it came from.
    static func presentedPins(_ ssl: OpaquePointer) -> [PublicKeyPin] {
        guard let chain = SSL_get_peer_cert_chain(ssl) else { return [] }
        var pins: [PublicKeyPin] = []
        for index in 0..<max(0, OPENSSL_sk_num(chain)) {
            guard let raw = OPENSSL_sk_value(chain, index),
                  let key = X509_get_X509_PUBKEY(OpaquePointer(raw)) else { continue }
            var der: UnsafeMutablePointer<UInt8>?
            let length = i2d_X509_PUBKEY(key, &der)
            guard length > 0, let der else { continue }
            let bytes = Array(UnsafeBufferPointer(start: der, count: Int(length)))
            CRYPTO_free(der, #file, #line)
            if let pin = PublicKeyPin(sha256: Digest.sha256(bytes)) { pins.append(pin) }
        }
        return pins
    }

    /// Whether the connection's handshake resumed an earlier session.
    static func resumed(_ ssl: OpaquePointer) -> Bool {
        SSL_session_reused(ssl) == 1
    }

    /// OpenSSL's verdict on the edge's certificate chain (CA file, validity, host name), with the
    /// errors of an unverifiable certificate waived when the configuration skips verification
    /// (`--connect-to sni:port:host`). The error stays on the `SSL` for the failure message
    /// (`SSL_get_verify_result`). Needs no per-connection state: the `SSL_CTX` holds the policy.
    static let verifyCertificate: @convention(c) (Int32, OpaquePointer?) -> Int32 = { preverifyOK, store in
        if preverifyOK == 1 { return 1 }
        guard let store, let raw = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()),
              let slot = slot(of: OpaquePointer(raw)), slot.acceptsUnverified else { return 0 }
        switch X509_STORE_CTX_get_error(store) {
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
             X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE,
             X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED:
            X509_STORE_CTX_set_error(store, X509_V_OK)
            return 1
        default:
            return 0
        }
    }

    /// Why the certificate of `ssl`'s peer was refused, or nil if it was not.
    static func verifyFailure(_ ssl: OpaquePointer) -> String? {
        let code = SSL_get_verify_result(ssl)
        guard code != Int(X509_V_OK), let text = X509_verify_cert_error_string(code) else { return nil }
        return String(cString: text)
    }

    private static func slot(of ssl: OpaquePointer) -> Slot? {
        guard let context = SSL_get_SSL_CTX(ssl),
              let raw = SSL_CTX_get_ex_data(context, exDataIndex) else { return nil }
        return Unmanaged<Slot>.fromOpaque(raw).takeUnretainedValue()
    }
}
