import CCFOpenSSL
import CCFSodium
import Foundation

/// An RSA-2048 key the emulator signs JWTs with (RS256), made with OpenSSL 3 at start-up or on
/// rotation, never written anywhere.
///
/// Owns its `EVP_PKEY` and frees it in `deinit`. After `init` nothing in it changes, and
/// OpenSSL allows concurrent signing with one key through separate digest contexts, so it is
/// shared across event loops.
final class RSASigningKey: @unchecked Sendable {
    /// The key id, 64 lower-case hex digits (what Cloudflare's `kid`s look like).
    let kid: String
    /// The public modulus `n`, big-endian, no leading zero.
    let modulus: [UInt8]
    /// The public exponent `e`, big-endian.
    let exponent: [UInt8]
    /// A self-signed X.509 certificate of the public key, PEM (JWKS `public_cert`).
    let certificatePEM: String
    private let key: OpaquePointer

    /// Makes a fresh key; throws an `EdgeError` naming the failing OpenSSL step.
    init(bits: Int32 = 2048) throws {
        key = try Self.generate(bits: bits)
        do {
            modulus = try Self.bigNumber(key, "n")
            exponent = try Self.bigNumber(key, "e")
            certificatePEM = try Self.selfSignedCertificate(key)
        } catch {
            EVP_PKEY_free(key)
            throw error
        }
        kid = Sodium.randomBytes(32).map { String(format: "%02x", $0) }.joined()
    }

    deinit {
        EVP_PKEY_free(key)
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message`.
    func sign(_ message: [UInt8]) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw Self.failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else {
            throw Self.failure("EVP_DigestSignInit")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else {
            throw Self.failure("EVP_DigestSign (size)")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
            throw Self.failure("EVP_DigestSign")
        }
        return Array(signature.prefix(length))
    }

    /// True when `signature` is this key's RS256 signature of `message`.
    func verify(_ message: [UInt8], signature: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else {
            ERR_clear_error()
            return false
        }
        let ok = EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
        ERR_clear_error()
        return ok
    }

    // MARK: OpenSSL steps

    private static func generate(bits: Int32) throws -> OpaquePointer {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nil) else { throw failure("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw failure("EVP_PKEY_keygen_init") }
        guard EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1 else {
            throw failure("EVP_PKEY_CTX_set_rsa_keygen_bits")
        }
        var key: OpaquePointer?
        guard EVP_PKEY_generate(context, &key) == 1, let key else { throw failure("EVP_PKEY_generate") }
        return key
    }

    /// A big-number parameter of the key (`"n"` or `"e"`), big-endian bytes.
    private static func bigNumber(_ key: OpaquePointer, _ name: String) throws -> [UInt8] {
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, name, &number) == 1, let number else {
            throw failure("EVP_PKEY_get_bn_param(\(name))")
        }
        defer { BN_free(number) }
        var bytes = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
        let written = BN_bn2bin(number, &bytes)
        return Array(bytes.prefix(Int(written)))
    }

    /// A self-signed certificate (30 days, SHA-256) for the key, as PEM text.
    private static func selfSignedCertificate(_ key: OpaquePointer) throws -> String {
        guard let certificate = X509_new() else { throw failure("X509_new") }
        defer { X509_free(certificate) }
        let serial = Sodium.randomBytes(8).reduce(0) { ($0 << 8) | Int($1) } & 0x3fff_ffff_ffff_ffff
        guard X509_set_version(certificate, 2) == 1,
              ASN1_INTEGER_set(X509_get_serialNumber(certificate), serial | 1) == 1,
              X509_gmtime_adj(X509_getm_notBefore(certificate), -60) != nil,
              X509_gmtime_adj(X509_getm_notAfter(certificate), 30 * 86_400) != nil,
              X509_set_pubkey(certificate, key) == 1,
              let name = X509_get_subject_name(certificate),
              X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, "cf-access-edge signing key", -1, -1, 0) == 1,
              X509_set_issuer_name(certificate, name) == 1
        else { throw failure("building the JWKS certificate") }
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else { throw failure("X509_sign") }
        guard let bio = BIO_new(BIO_s_mem()) else { throw failure("BIO_new") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_X509(bio, certificate) == 1 else { throw failure("PEM_write_bio_X509") }
        var pem = [UInt8](repeating: 0, count: BIO_ctrl_pending(bio))
        let read = BIO_read(bio, &pem, Int32(pem.count))
        guard read > 0 else { throw failure("BIO_read") }
        return String(decoding: pem.prefix(Int(read)), as: UTF8.self)
    }

    /// An `EdgeError` naming the step and OpenSSL's first queued error; clears the queue.
    private static func failure(_ step: String) -> EdgeError {
        let code = ERR_get_error()
        ERR_clear_error()
        guard code != 0 else { return EdgeError("OpenSSL \(step) failed") }
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &text, text.count)
        let reason = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return EdgeError("OpenSSL \(step) failed: \(reason)")
    }
}

/// libsodium: random bytes and the NaCl box (X25519 + XSalsa20-Poly1305) of the transfer
/// service.
enum Sodium {
    /// Public and secret key size of a box key pair.
    static let keyBytes = 32
    /// Nonce size of a box.
    static let nonceBytes = 24

    /// `sodium_init()`, run once on first use (safe to call again; < 0 means unusable).
    private static let initialized: Bool = sodium_init() >= 0

    private static func ready() {
        precondition(initialized, "libsodium failed to initialise")
    }

    /// `count` bytes from libsodium's CSPRNG.
    static func randomBytes(_ count: Int) -> [UInt8] {
        ready()
        var bytes = [UInt8](repeating: 0, count: count)
        randombytes_buf(&bytes, count)
        return bytes
    }

    /// A fresh box key pair.
    static func boxKeyPair() -> (publicKey: [UInt8], secretKey: [UInt8]) {
        ready()
        var publicKey = [UInt8](repeating: 0, count: keyBytes)
        var secretKey = [UInt8](repeating: 0, count: keyBytes)
        let status = crypto_box_keypair(&publicKey, &secretKey)
        precondition(status == 0, "crypto_box_keypair failed")
        return (publicKey, secretKey)
    }

    /// `crypto_box_easy`: the MAC (16 bytes) followed by the ciphertext of `message`, from
    /// `senderSecretKey` to `recipientPublicKey`. Nil for a key the library refuses.
    static func box(_ message: [UInt8], nonce: [UInt8], recipientPublicKey: [UInt8],
                    senderSecretKey: [UInt8]) -> [UInt8]? {
        ready()
        guard nonce.count == nonceBytes, recipientPublicKey.count == keyBytes,
              senderSecretKey.count == keyBytes else { return nil }
        var sealed = [UInt8](repeating: 0, count: message.count + Int(crypto_box_macbytes()))
        guard crypto_box_easy(&sealed, message, UInt64(message.count), nonce,
                              recipientPublicKey, senderSecretKey) == 0 else { return nil }
        return sealed
    }
}

/// Base64 in both alphabets, for JWT segments, JWKS numbers and the transfer keys.
enum Base64Text {
    /// Standard alphabet with padding.
    static func standard(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
    }

    /// URL alphabet (`-`, `_`), with or without `=` padding.
    static func url(_ bytes: [UInt8], padded: Bool) -> String {
        var text = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
        if !padded {
            while text.hasSuffix("=") { text.removeLast() }
        }
        return text
    }

    /// Decodes URL-alphabet base64, padding optional; nil for any character outside the URL
    /// alphabet (so `+` and `/` are refused) or a bad length.
    static func decodeURL(_ text: String) -> [UInt8]? {
        let body = text.hasSuffix("==") ? text.dropLast(2) : text.hasSuffix("=") ? text.dropLast(1) : Substring(text)
        guard body.unicodeScalars.allSatisfy({ scalar in
            switch scalar {
            case "A"..."Z", "a"..."z", "0"..."9", "-", "_": return true
            default: return false
            }
        }) else { return nil }
        if text.contains("=") && text.count % 4 != 0 { return nil }
        var standard = body.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard standard.count % 4 != 1 else { return nil }
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map { [UInt8]($0) }
    }
}
