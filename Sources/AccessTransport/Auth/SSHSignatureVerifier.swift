internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import FoundationEssentials

/// What checking an SSH signature came to.
package enum SSHSignatureCheck: Sendable, Equatable {
    /// The signature is the key's, over the data.
    case valid
    /// The signature does not verify (or the key or signature is malformed).
    case invalid
    /// The signature's algorithm is not one this check takes (`ssh-rsa`, SHA-1, as OpenSSH's
    /// default `CASignatureAlgorithms`; `ssh-dss`; security keys), or does not fit the key.
    case disallowed(String)
}

/// Verifies SSH signatures (RFC 4253 §6.6 blobs) with OpenSSL 3, as a certificate's CA signature
/// is checked: `ssh-ed25519`, `ecdsa-sha2-nistp256/384/521` (SHA-256/384/512, r and s as mpints)
/// and `rsa-sha2-256/512` (PKCS #1 v1.5, at least 1024-bit moduli as OpenSSH requires).
package enum SSHSignatureVerifier {
    /// Whether `signature` (`string algorithm, string blob`) is `publicKey`'s (an SSH public key
    /// blob) over `data`.
    package static func check(signature: [UInt8], data: [UInt8], publicKey: [UInt8]) -> SSHSignatureCheck {
        defer { ERR_clear_error() }
        var signatureReader = SSHWireReader(signature)
        var keyReader = SSHWireReader(publicKey)
        guard let algorithm = try? signatureReader.text(), let raw = try? signatureReader.string(), signatureReader.isAtEnd,
              let keyType = try? keyReader.text() else { return .invalid }
        switch (algorithm, keyType) {
        case ("ssh-ed25519", "ssh-ed25519"):
            guard let point = try? keyReader.string(), point.count == 32, keyReader.isAtEnd, raw.count == 64 else { return .invalid }
            guard let key = point.withUnsafeBufferPointer({
                EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, $0.baseAddress, $0.count)
            }) else { return .invalid }
            defer { EVP_PKEY_free(key) }
            return verify(key: key, digest: nil, signature: raw, data: data)
        case (let name, let type) where name.hasPrefix("ecdsa-sha2-") && name == type:
            guard let curve = try? keyReader.string(), let point = try? keyReader.string(), keyReader.isAtEnd,
                  let group = ecdsaGroups[name], String(decoding: curve, as: UTF8.self) == name.dropFirst("ecdsa-sha2-".count),
                  let key = ecKey(group: group.name, point: point) else { return .invalid }
            defer { EVP_PKEY_free(key) }
            guard let der = ecdsaDER(raw) else { return .invalid }
            return verify(key: key, digest: group.digest(), signature: der, data: data)
        case ("rsa-sha2-256", "ssh-rsa"), ("rsa-sha2-512", "ssh-rsa"):
            guard let exponent = try? keyReader.string(), let modulus = try? keyReader.string(), keyReader.isAtEnd else { return .invalid }
            let n = Array(modulus.drop { $0 == 0 }), e = Array(exponent.drop { $0 == 0 })
            guard n.count >= 128, !e.isEmpty, let key = OpenSSLRS256Verifier.makeKey(modulus: n, exponent: e) else { return .invalid }
            defer { EVP_PKEY_free(key) }
            return verify(key: key, digest: algorithm == "rsa-sha2-256" ? EVP_sha256() : EVP_sha512(), signature: raw, data: data)
        default:
            return .disallowed(algorithm)
        }
    }

    /// The EC group of each ECDSA algorithm and its hash.
    private static let ecdsaGroups: [String: (name: String, digest: @Sendable () -> OpaquePointer?)] = [
        "ecdsa-sha2-nistp256": ("P-256", { EVP_sha256() }),
        "ecdsa-sha2-nistp384": ("P-384", { EVP_sha384() }),
        "ecdsa-sha2-nistp521": ("P-521", { EVP_sha512() }),
    ]

    private static func verify(key: OpaquePointer, digest: OpaquePointer?, signature: [UInt8], data: [UInt8]) -> SSHSignatureCheck {
        guard let context = EVP_MD_CTX_new() else { return .invalid }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, digest, nil, key) == 1 else { return .invalid }
        let result = signature.withUnsafeBufferPointer { sig in
            data.withUnsafeBufferPointer { message in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, message.baseAddress, message.count)
            }
        }
        return result == 1 ? .valid : .invalid
    }

    /// An EC public key on `group` from its uncompressed point.
    private static func ecKey(group: String, point: [UInt8]) -> OpaquePointer? {
        guard let groupKey = strdup("group"), let pubKey = strdup("pub"), let groupName = strdup(group) else { return nil }
        defer {
            free(groupKey)
            free(pubKey)
            free(groupName)
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_fromdata_init(context) == 1 else { return nil }
        var key: OpaquePointer?
        var bytes = point
        let ok = bytes.withUnsafeMutableBufferPointer { pointBytes in
            var params = [
                OSSL_PARAM_construct_utf8_string(groupKey, groupName, 0),
                OSSL_PARAM_construct_octet_string(pubKey, pointBytes.baseAddress, pointBytes.count),
                OSSL_PARAM_construct_end(),
            ]
            return params.withUnsafeMutableBufferPointer { p in
                EVP_PKEY_fromdata(context, &key, CCFShim_EVP_PKEY_PUBLIC_KEY(), p.baseAddress)
            }
        }
        return ok == 1 ? key : nil
    }

    /// SSH's ECDSA signature blob (`mpint r, mpint s`) as the DER `SEQUENCE { INTEGER r, INTEGER s }`
    /// OpenSSL verifies.
    private static func ecdsaDER(_ blob: [UInt8]) -> [UInt8]? {
        var reader = SSHWireReader(blob)
        guard let r = try? reader.string(), let s = try? reader.string(), reader.isAtEnd, r.count <= 67, s.count <= 67 else { return nil }
        func integer(_ magnitude: [UInt8]) -> [UInt8] {
            var bytes = Array(magnitude.drop { $0 == 0 })
            if bytes.isEmpty { bytes = [0] }
            if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
            return [0x02] + length(bytes.count) + bytes
        }
        func length(_ count: Int) -> [UInt8] { count < 0x80 ? [UInt8(count)] : [0x81, UInt8(count)] }
        let body = integer(r) + integer(s)
        return [0x30] + length(body.count) + body
    }
}
