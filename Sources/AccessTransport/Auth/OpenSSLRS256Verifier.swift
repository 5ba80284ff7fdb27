internal import CCFOpenSSL
internal import CCFShim
import AccessCore
import FoundationEssentials

/// RS256 (RSASSA-PKCS1-v1_5 with SHA-256) verification with OpenSSL 3: the public key is
/// built from the JWK's `n` and `e` through `EVP_PKEY_fromdata`.
package struct OpenSSLRS256Verifier: SignatureVerifier {
    /// The smallest modulus accepted, in bytes (2048 bits).
    package static let minimumModulusBytes = 256

    /// Creates a verifier.
    package init() {}

    /// Whether `signature` is `key`'s RS256 signature of `message`. A modulus under 2048
    /// bits, an empty exponent or any OpenSSL failure gives false.
    package func verifyRS256(message: [UInt8], signature: [UInt8], key: RSAPublicJWK) -> Bool {
        defer { ERR_clear_error() }
        let modulus = Array(key.modulus.drop { $0 == 0 })
        let exponent = Array(key.exponent.drop { $0 == 0 })
        guard modulus.count >= Self.minimumModulusBytes, !exponent.isEmpty, !signature.isEmpty else { return false }
        guard let publicKey = Self.makeKey(modulus: modulus, exponent: exponent) else { return false }
        defer { EVP_PKEY_free(publicKey) }
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, publicKey) == 1 else { return false }
        let result = signature.withUnsafeBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestVerify(context, sig.baseAddress, sig.count, msg.baseAddress, msg.count)
            }
        }
        return result == 1
    }

    /// An RSA public key from big-endian `n` and `e`.
    static func makeKey(modulus: [UInt8], exponent: [UInt8]) -> OpaquePointer? {
        // OSSL_PARAM_construct_BN takes native-endian (little-endian here) magnitudes, and
        // keeps pointers to the names: give it C strings that outlive the call.
        var n = Array(modulus.reversed())
        var e = Array(exponent.reversed())
        guard let nName = strdup("n"), let eName = strdup("e") else { return nil }
        defer {
            free(nName)
            free(eName)
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else { return nil }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_fromdata_init(context) == 1 else { return nil }
        var key: OpaquePointer?
        let ok = n.withUnsafeMutableBufferPointer { nBytes in
            e.withUnsafeMutableBufferPointer { eBytes in
                var params = [
                    OSSL_PARAM_construct_BN(nName, nBytes.baseAddress, nBytes.count),
                    OSSL_PARAM_construct_BN(eName, eBytes.baseAddress, eBytes.count),
                    OSSL_PARAM_construct_end(),
                ]
                return params.withUnsafeMutableBufferPointer { p in
                    EVP_PKEY_fromdata(context, &key, CCFShim_EVP_PKEY_PUBLIC_KEY(), p.baseAddress)
                }
            }
        }
        guard ok == 1 else { return nil }
        return key
    }
}
