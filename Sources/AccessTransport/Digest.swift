internal import CCFOpenSSL
import AccessCore

/// Hashes computed by OpenSSL.
package enum Digest {
    /// SHA-256 of `bytes` as 64 lower-case hex characters.
    package static func sha256Hex(_ bytes: UnsafeRawBufferPointer) -> String {
        var out = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        var size: UInt32 = 0
        let ok = out.withUnsafeMutableBufferPointer { o in
            EVP_Digest(bytes.baseAddress, bytes.count, o.baseAddress, &size, EVP_sha256(), nil)
        }
        precondition(ok == 1 && size == 32, "EVP_Digest(SHA-256) failed")
        return hex(out)
    }

    /// SHA-256 of `bytes` as 64 lower-case hex characters.
    package static func sha256Hex(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { sha256Hex($0) }
    }

    /// SHA-256 of `bytes` (32 bytes).
    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        var size: UInt32 = 0
        let ok = bytes.withUnsafeBytes { b in
            out.withUnsafeMutableBufferPointer { o in EVP_Digest(b.baseAddress, b.count, o.baseAddress, &size, EVP_sha256(), nil) }
        }
        precondition(ok == 1 && size == 32, "EVP_Digest(SHA-256) failed")
        return out
    }

    /// HMAC-SHA1 of `message` under `key` (20 bytes): what OpenSSH's hashed known_hosts names
    /// are (`|1|salt|hash`).
    package static func hmacSHA1(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 20)
        var size: UInt32 = 0
        let done = key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                out.withUnsafeMutableBufferPointer { o in
                    HMAC(EVP_sha1(), k.baseAddress, Int32(k.count), m.baseAddress?.assumingMemoryBound(to: UInt8.self),
                         m.count, o.baseAddress, &size)
                }
            }
        }
        precondition(done != nil && size == 20, "HMAC(SHA-1) failed")
        return out
    }

    /// Lower-case hex, two digits a byte.
    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { byte in
            let digits = String(byte, radix: 16)
            return digits.count == 1 ? "0" + digits : digits
        }.joined()
    }

    /// An incremental SHA-256, for streams too large to keep in memory.
    package final class SHA256Stream {
        private let ctx: OpaquePointer

        /// Starts an empty digest.
        package init() {
            guard let c = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
            ctx = c
            precondition(EVP_DigestInit_ex(ctx, EVP_sha256(), nil) == 1, "EVP_DigestInit_ex failed")
        }

        deinit { EVP_MD_CTX_free(ctx) }

        /// Adds bytes to the digest.
        package func update(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count > 0 else { return }
            precondition(EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) == 1, "EVP_DigestUpdate failed")
        }

        /// Finishes and returns the hex digest; the stream must not be used afterwards.
        package func finalizeHex() -> String {
            var out = [UInt8](repeating: 0, count: 32)
            var size: UInt32 = 0
            out.withUnsafeMutableBufferPointer { o in
                precondition(EVP_DigestFinal_ex(ctx, o.baseAddress, &size) == 1, "EVP_DigestFinal_ex failed")
            }
            return Digest.hex(out)
        }
    }
}

extension Digest {
    /// SHA-1, fetched from OpenSSL's provider once (an implicit fetch on every digest costs a
    /// lookup each time, on every new connection).
    /// Immutable once made; OpenSSL's digest objects may be used from any thread.
    nonisolated(unsafe) private static let sha1: OpaquePointer? = EVP_MD_fetch(nil, "SHA1", nil) ?? EVP_sha1()

    /// The `Sec-WebSocket-Accept` value an edge must answer to `Sec-WebSocket-Key: key` (RFC 6455
    /// §4.2.2): base64 of the SHA-1 of the key followed by the protocol's GUID.
    static func webSocketAccept(key: String) -> String {
        let input = Array((key + WebSocketUpgrade.acceptGUID).utf8)
        var out = [UInt8](repeating: 0, count: Int(SHA_DIGEST_LENGTH))
        var size: UInt32 = 0
        let ok = input.withUnsafeBytes { i in
            out.withUnsafeMutableBufferPointer { o in
                EVP_Digest(i.baseAddress, i.count, o.baseAddress, &size, sha1, nil)
            }
        }
        precondition(ok == 1 && size == 20, "EVP_Digest(SHA-1) failed")
        return Base64.encode(out, alphabet: .standard, padded: true)
    }
}
