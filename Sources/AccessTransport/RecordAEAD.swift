internal import CCFShim

/// An AEAD key for TLS 1.3's records, from BoringSSL as swift-crypto builds it (issue 27 point 1;
/// reference/DECISIONS.md, "The records' AEAD is BoringSSL's").
///
/// BoringSSL's headers and OpenSSL's define C types of the same names, and one Swift module cannot
/// import both, so the functions used are declared by `CCFShim_BoringSSL.h` (checked against
/// swift-crypto's own headers by scripts/check-c-warnings) and the context is an opaque pointer.
/// BoringSSL's symbols carry swift-crypto's `CCryptoBoringSSL_` prefix: they never meet OpenSSL's,
/// in this process or in the host process of a library user. BoringSSL's error queue is its own
/// (not OpenSSL's): a failure clears what it left there.
package final class RecordAEAD {
    /// The AEADs of TLS 1.3's three cipher suites (RFC 8446 §B.4).
    package enum Algorithm: Sendable {
        case aes128GCM
        case aes256GCM
        case chacha20Poly1305

        /// The key's length in bytes.
        package var keyLength: Int { self == .aes128GCM ? 16 : 32 }
    }

    /// The tag's length of every TLS 1.3 AEAD.
    package static let tagLength = 16
    /// The nonce's length of every TLS 1.3 AEAD.
    package static let nonceLength = 12

    /// BoringSSL's `EVP_AEAD_CTX`, owned.
    private let context: OpaquePointer

    /// A key for `algorithm`; nil when `key` has the wrong length or BoringSSL refuses it.
    package init?(_ algorithm: Algorithm, key: UnsafeRawBufferPointer) {
        guard key.count == algorithm.keyLength, let base = key.baseAddress else { return nil }
        let aead = switch algorithm {
        case .aes128GCM: CCryptoBoringSSL_EVP_aead_aes_128_gcm()
        case .aes256GCM: CCryptoBoringSSL_EVP_aead_aes_256_gcm()
        case .chacha20Poly1305: CCryptoBoringSSL_EVP_aead_chacha20_poly1305()
        }
        guard let made = CCryptoBoringSSL_EVP_AEAD_CTX_new(aead, base.assumingMemoryBound(to: UInt8.self), key.count,
                                                            Self.tagLength) else {
            CCryptoBoringSSL_ERR_clear_error()
            return nil
        }
        context = made
    }

    deinit {
        CCryptoBoringSSL_EVP_AEAD_CTX_free(context)
    }

    /// Seals `count` bytes from `input` into `output` (the same place is allowed, or places that
    /// do not overlap), followed by the one byte `extra` sealed as if it came after them, then the
    /// tag: `count + 1 + tagLength` bytes at `output` in all. `ad` is authenticated, not sealed.
    package func seal(nonce: UnsafeRawPointer, input: UnsafeRawPointer, count: Int, extra: UInt8,
                      ad: UnsafeRawPointer, adLength: Int, output: UnsafeMutableRawPointer) -> Bool {
        var extraByte = extra
        var tail = 0
        let ok = CCryptoBoringSSL_EVP_AEAD_CTX_seal_scatter(
            context, output.assumingMemoryBound(to: UInt8.self),
            (output + count).assumingMemoryBound(to: UInt8.self), &tail, 1 + Self.tagLength,
            nonce.assumingMemoryBound(to: UInt8.self), Self.nonceLength,
            input.assumingMemoryBound(to: UInt8.self), count, &extraByte, 1,
            ad.assumingMemoryBound(to: UInt8.self), adLength)
        guard ok == 1, tail == 1 + Self.tagLength else {
            CCryptoBoringSSL_ERR_clear_error()
            return false
        }
        return true
    }

    /// Opens in place the `count` bytes at `bytes` (the sealed bytes, then the tag): true, with
    /// the `count - tagLength` plaintext bytes at `bytes`, when the tag proves them whole.
    package func open(nonce: UnsafeRawPointer, bytes: UnsafeMutableRawPointer, count: Int,
                      ad: UnsafeRawPointer, adLength: Int) -> Bool {
        guard count >= Self.tagLength else { return false }
        var opened = 0
        let data = bytes.assumingMemoryBound(to: UInt8.self)
        let ok = CCryptoBoringSSL_EVP_AEAD_CTX_open(
            context, data, &opened, count,
            nonce.assumingMemoryBound(to: UInt8.self), Self.nonceLength, data, count,
            ad.assumingMemoryBound(to: UInt8.self), adLength)
        guard ok == 1, opened == count - Self.tagLength else {
            CCryptoBoringSSL_ERR_clear_error()
            return false
        }
        return true
    }
}
