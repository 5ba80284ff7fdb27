internal import CCFOpenSSL

/// TLS session resumption for the carrier's connections to the edge.
///
/// libwebsockets 4.1.6 keeps no client sessions, so every new connection paid a full TLS 1.3
/// handshake (certificate chain check and two ECDSA verifications, most of a new connection's CPU).
/// This installs two OpenSSL hooks on the client `SSL_CTX` libwebsockets made for the carrier's
/// vhost: the new-session callback keeps the newest resumable session (ticket) the edge sent, and
/// the info callback offers it when the next connection's handshake starts, before the
/// ClientHello is written. Nothing else changes: a resumed session carries the verification
/// result of the full handshake it came from, made under the same `SSL_CTX` (same CA file, same
/// hostname), and an edge that cannot resume simply answers with a full handshake.
///
/// The session lives in the `SSL_CTX`'s own ex-data and is freed with it, so it can never reach
/// another carrier's context (another CA file, another edge). All calls happen on the carrier's
/// service thread, the only one that uses that `SSL_CTX`.
enum TLSSessionCache {
    /// The newest resumable session of one `SSL_CTX`, and its verification policy.
    final class Slot {
        var session: OpaquePointer?
        /// Accept a self-signed, untrusted or expired certificate (`--connect-to sni:port:host`).
        let acceptsUnverified: Bool
        init(acceptsUnverified: Bool) { self.acceptsUnverified = acceptsUnverified }
        deinit { if let session { SSL_SESSION_free(session) } }
    }

    /// Our ex-data index on `SSL_CTX`s; its free hook releases the slot with the context.
    private static let exDataIndex: Int32 = CRYPTO_get_ex_new_index(
        CRYPTO_EX_INDEX_SSL_CTX, 0, nil, nil, nil,
        { _, pointer, _, _, _, _ in
            if let pointer { Unmanaged<Slot>.fromOpaque(pointer).release() }
        })

    /// Enables resumption on a client `SSL_CTX`, and our own certificate-verify callback on each
    /// of its connections (idempotent). Returns false if OpenSSL refused.
    ///
    /// Why our own verify callback: libwebsockets 4.1.6 finds a connection's wsi in its verify
    /// callback through an `SSL` ex-data index it takes anew, process-wide, each time a context is
    /// created. A second carrier (another `AccessTunnel`, a probe) created while a handshake is in
    /// flight moves that index, the callback finds nothing and fails the handshake with "can't get
    /// wsi from ssl privdata" — a TLS failure out of nowhere. Ours needs no wsi: OpenSSL's own
    /// result decides, and the `SSL_CTX` says whether this configuration accepts an unverified
    /// certificate, as libwebsockets' `LCCSCF_ALLOW_*` flags did.
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
            if let old = slot.session { SSL_SESSION_free(old) }
            slot.session = copy
            return 0   // OpenSSL keeps (and frees) its own reference
        }
        SSL_CTX_set_info_callback(context) { ssl, event, _ in
            guard event & SSL_CB_HANDSHAKE_START != 0, let ssl,
                  SSL_is_server(ssl) == 0, SSL_in_before(ssl) == 1 else { return }   // a first handshake only
            // libwebsockets set its own callback on this SSL just before; the server's
            // certificate is checked later in this handshake, with ours.
            SSL_set_verify(ssl, SSL_VERIFY_PEER, TLSSessionCache.verifyCertificate)
            guard let slot = TLSSessionCache.slot(of: ssl), let session = slot.session else { return }
            // Before the ClientHello: OpenSSL offers the ticket of a private copy, so how this
            // connection ends cannot spoil the stored session.
            guard let copy = SSL_SESSION_dup(session) else { return }
            _ = SSL_set_session(ssl, copy)
            SSL_SESSION_free(copy)   // the connection holds its own reference
        }
        return true
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

    /// Whether the connection's handshake resumed an earlier session.
    static func resumed(_ ssl: OpaquePointer) -> Bool {
        SSL_session_reused(ssl) == 1
    }

    /// OpenSSL's verdict on the edge's certificate chain (CA file, validity, host name), with
    /// the errors libwebsockets' `LCCSCF_ALLOW_SELFSIGNED`/`_INSECURE`/`_EXPIRED` waive waived when
    /// the configuration skips verification. The error stays on the `SSL` for the failure message
    /// (`SSL_get_verify_result`).
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
