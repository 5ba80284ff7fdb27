internal import CCFSodium
import AccessCore

/// `sodium_init`, once per process.
private let sodiumReady: Bool = sodium_init() >= 0

/// An ephemeral libsodium box key pair. The secret key stays inside, is wiped on release
/// and is never printed.
package final class SodiumBoxKey: EphemeralBoxKey, @unchecked Sendable, CustomStringConvertible {
    package let publicKey: [UInt8]
    fileprivate var secretKey: [UInt8]

    package init(publicKey: [UInt8], secretKey: [UInt8]) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    deinit {
        secretKey.withUnsafeMutableBytes { sodium_memzero($0.baseAddress, $0.count) }
    }

    package var description: String { "SodiumBoxKey([redacted])" }
}

/// NaCl `crypto_box` with libsodium: a fresh key pair per login and `crypto_box_open_easy`
/// for `nonce(24) ‖ box` (PROTOCOL.md §3).
package struct SodiumBox: BoxOpener {
    /// Public and secret key size.
    package static let keyBytes = 32
    /// Nonce size.
    package static let nonceBytes = 24
    /// Authenticator size.
    package static let macBytes = 16

    /// Creates the opener (initialising libsodium once).
    package init() {
        precondition(sodiumReady, "libsodium could not be initialised")
    }

    /// A fresh X25519 key pair from `crypto_box_keypair`.
    package func makeEphemeralKey() -> any EphemeralBoxKey {
        var publicKey = [UInt8](repeating: 0, count: Self.keyBytes)
        var secretKey = [UInt8](repeating: 0, count: Self.keyBytes)
        let result = publicKey.withUnsafeMutableBufferPointer { p in
            secretKey.withUnsafeMutableBufferPointer { s in crypto_box_keypair(p.baseAddress!, s.baseAddress!) }
        }
        precondition(result == 0, "crypto_box_keypair failed")
        return SodiumBoxKey(publicKey: publicKey, secretKey: secretKey)
    }

    /// Opens `nonce(24) ‖ box` from `senderPublicKey` with `key`'s secret key.
    package func open(_ sealed: [UInt8], senderPublicKey: [UInt8], key: any EphemeralBoxKey) throws(BoxOpenProblem) -> [UInt8] {
        guard senderPublicKey.count == Self.keyBytes else { throw .badSenderKey }
        guard sealed.count >= Self.nonceBytes + Self.macBytes else { throw .truncated }
        guard let key = key as? SodiumBoxKey else { throw .rejected }
        let nonce = Array(sealed[..<Self.nonceBytes])
        let box = Array(sealed[Self.nonceBytes...])
        let length = box.count - Self.macBytes
        // One spare byte so the buffer has an address even for an empty message.
        var message = [UInt8](repeating: 0, count: length + 1)
        let result = message.withUnsafeMutableBufferPointer { m in
            box.withUnsafeBufferPointer { c in
                nonce.withUnsafeBufferPointer { n in
                    senderPublicKey.withUnsafeBufferPointer { pk in
                        key.secretKey.withUnsafeBufferPointer { sk in
                            crypto_box_open_easy(m.baseAddress!, c.baseAddress!, UInt64(c.count),
                                                 n.baseAddress!, pk.baseAddress!, sk.baseAddress!)
                        }
                    }
                }
            }
        }
        guard result == 0 else { throw .rejected }
        return Array(message[..<length])
    }
}
