internal import CCFOpenSSL
import AccessCore
import FoundationEssentials

/// An ECDSA P-256 key pair for Access short-lived SSH certificates (PROTOCOL.md §4), made and
/// read with OpenSSL 3. The private key is kept as the PEM text OpenSSH reads (`-----BEGIN EC
/// PRIVATE KEY-----`, SEC 1, as cloudflared writes it); descriptions never show it.
package struct ECDSAKeyPair: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The private key, PEM (a secret: write it only to a 0600 file).
    package let privateKeyPEM: String
    /// The public key, as OpenSSH writes it.
    package let publicKey: OpenSSHPublicKey

    /// `ECDSAKeyPair(ecdsa-sha2-nistp256)`: no key material.
    package var description: String { "ECDSAKeyPair(\(publicKey.type))" }
    /// Same as `description`.
    package var debugDescription: String { description }
    /// Shows only `description`.
    package var customMirror: Mirror { Mirror(self, children: ["description": description]) }

    /// A fresh key pair from OpenSSL's random generator.
    package static func generate() throws(TunnelFailure) -> ECDSAKeyPair {
        defer { ERR_clear_error() }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else {
            throw .internalError("OpenSSL cannot make EC keys")
        }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
              EVP_PKEY_generate(context, &key) == 1, let key else {
            throw .internalError("OpenSSL could not generate an ECDSA P-256 key")
        }
        defer { EVP_PKEY_free(key) }
        guard let pair = pair(from: key) else { throw .internalError("OpenSSL could not encode the new ECDSA key") }
        return pair
    }

    /// The key pair in `pem`, if it is an ECDSA P-256 private key (PEM, unencrypted).
    package static func load(pem: String) -> ECDSAKeyPair? {
        defer { ERR_clear_error() }
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            // No passphrase callback: an encrypted key is simply not ours.
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
        }
        guard let key else { return nil }
        defer { EVP_PKEY_free(key) }
        guard EVP_PKEY_is_a(key, "EC") == 1 else { return nil }
        var group = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(key, "group", &group, group.count, &length) == 1 else { return nil }
        let name = String(decoding: group.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard name == "prime256v1" || name == "P-256" else { return nil }
        return pair(from: key)
    }

    /// The PEM and OpenSSH public key of an EC P-256 `EVP_PKEY`.
    private static func pair(from key: OpaquePointer) -> ECDSAKeyPair? {
        // OpenSSH wants the uncompressed point (a key read from a file may say otherwise).
        _ = EVP_PKEY_set_utf8_string_param(key, "point-format", "uncompressed")
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        guard EVP_PKEY_get_octet_string_param(key, "pub", &point, point.count, &length) == 1, length == 65,
              let publicKey = try? OpenSSHPublicKey.ecdsaP256(point: point) else { return nil }
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey_traditional(bio, key, nil, nil, 0, nil, nil) == 1 else { return nil }
        var pem: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = BIO_read(bio, &chunk, Int32(chunk.count))
            if n <= 0 { break }
            pem += chunk[..<Int(n)]
        }
        // The buffers held the secret: wipe them.
        defer { chunk.withUnsafeMutableBytes { _ = memset($0.baseAddress!, 0, $0.count) } }
        guard !pem.isEmpty else { return nil }
        let text = String(decoding: pem, as: UTF8.self)
        pem.withUnsafeMutableBytes { _ = memset($0.baseAddress!, 0, $0.count) }
        return ECDSAKeyPair(privateKeyPEM: text, publicKey: publicKey)
    }
}
