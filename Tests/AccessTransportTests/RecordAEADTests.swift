@testable import AccessTransport
import Testing

/// `RecordAEAD`, BoringSSL's AEAD as the records after the upgrade use it, against published
/// answers: the GCM specification's test cases 4 (AES-128) and 16 (AES-256) (McGrew and Viega,
/// "The Galois/Counter Mode of Operation", 2005) and RFC 8439 §2.8.2 (ChaCha20-Poly1305). Each
/// plaintext's last byte goes in as the `extra` byte, the way a record's inner content type does.
/// The records themselves are checked against OpenSSL's record layer in `TLSRecordsTests`.
@Suite("RecordAEAD against published test vectors")
struct RecordAEADTests {
    struct Vector: Sendable, CustomStringConvertible {
        let name: String
        let algorithm: RecordAEAD.Algorithm
        let key: String
        let nonce: String
        let ad: String
        let plaintext: [UInt8]
        let sealed: String

        var description: String { name }
    }

    private static let gcmPlaintext = bytes(
        "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39")

    static let vectors: [Vector] = [
        Vector(name: "AES-128-GCM, test case 4", algorithm: .aes128GCM,
               key: "feffe9928665731c6d6a8f9467308308", nonce: "cafebabefacedbaddecaf888",
               ad: "feedfacedeadbeeffeedfacedeadbeefabaddad2", plaintext: gcmPlaintext,
               sealed: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091"
                   + "5bc94fbc3221a5db94fae95ae7121a47"),
        Vector(name: "AES-256-GCM, test case 16", algorithm: .aes256GCM,
               key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", nonce: "cafebabefacedbaddecaf888",
               ad: "feedfacedeadbeeffeedfacedeadbeefabaddad2", plaintext: gcmPlaintext,
               sealed: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
                   + "76fc6ece0f4e1768cddf8853bb2d551b"),
        Vector(name: "ChaCha20-Poly1305, RFC 8439 2.8.2", algorithm: .chacha20Poly1305,
               key: "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", nonce: "070000004041424344454647",
               ad: "50515253c0c1c2c3c4c5c6c7",
               plaintext: Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8),
               sealed: "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b"
                   + "67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116"
                   + "1ae10b594f09e26a7e902ecbd0600691"),
    ]

    static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }

    private func key(_ vector: Vector) throws -> RecordAEAD {
        try #require(Self.bytes(vector.key).withUnsafeBytes { RecordAEAD(vector.algorithm, key: $0) })
    }

    /// Seals the vector's plaintext (all but its last byte, then that byte as `extra`) from
    /// `input` to `output`, which may be the same array.
    private func seal(_ vector: Vector, with aead: RecordAEAD, inPlace: Bool) -> [UInt8]? {
        let nonce = Self.bytes(vector.nonce)
        let ad = Self.bytes(vector.ad)
        let count = vector.plaintext.count - 1
        var output = [UInt8](repeating: 0xEE, count: count + 1 + RecordAEAD.tagLength)
        let ok: Bool
        if inPlace {
            output.replaceSubrange(0..<count, with: vector.plaintext[0..<count])
            ok = output.withUnsafeMutableBytes { out in
                aead.seal(nonce: nonce, input: out.baseAddress!, count: count, extra: vector.plaintext[count],
                          ad: ad, adLength: ad.count, output: out.baseAddress!)
            }
        } else {
            ok = output.withUnsafeMutableBytes { out in
                vector.plaintext.withUnsafeBytes { input in
                    aead.seal(nonce: nonce, input: input.baseAddress!, count: count, extra: vector.plaintext[count],
                              ad: ad, adLength: ad.count, output: out.baseAddress!)
                }
            }
        }
        return ok ? output : nil
    }

    @Test("sealing gives the published ciphertext and tag, in place or into another buffer", arguments: vectors)
    func seals(vector: Vector) throws {
        let aead = try key(vector)
        #expect(seal(vector, with: aead, inPlace: false) == Self.bytes(vector.sealed))
        #expect(seal(vector, with: aead, inPlace: true) == Self.bytes(vector.sealed))
    }

    @Test("opening the published ciphertext gives the plaintext in place", arguments: vectors)
    func opens(vector: Vector) throws {
        let aead = try key(vector)
        var bytes = Self.bytes(vector.sealed)
        let ad = Self.bytes(vector.ad)
        let opened = bytes.withUnsafeMutableBytes {
            aead.open(nonce: Self.bytes(vector.nonce), bytes: $0.baseAddress!, count: $0.count, ad: ad, adLength: ad.count)
        }
        #expect(opened)
        #expect(Array(bytes[0..<vector.plaintext.count]) == vector.plaintext)
    }

    @Test("a changed ciphertext, tag, nonce or associated data does not open", arguments: vectors)
    func refusesChanges(vector: Vector) throws {
        let aead = try key(vector)
        let sealed = Self.bytes(vector.sealed)
        let nonce = Self.bytes(vector.nonce)
        let ad = Self.bytes(vector.ad)
        func opens(_ bytes: [UInt8], nonce: [UInt8], ad: [UInt8]) -> Bool {
            var copy = bytes
            return copy.withUnsafeMutableBytes {
                aead.open(nonce: nonce, bytes: $0.baseAddress!, count: $0.count, ad: ad, adLength: ad.count)
            }
        }
        #expect(opens(sealed, nonce: nonce, ad: ad))
        for index in [0, sealed.count / 2, sealed.count - RecordAEAD.tagLength - 1, sealed.count - 1] {
            var changed = sealed
            changed[index] ^= 0x01
            #expect(!opens(changed, nonce: nonce, ad: ad), "byte \(index) flipped")
        }
        var otherNonce = nonce
        otherNonce[11] ^= 0x01
        #expect(!opens(sealed, nonce: otherNonce, ad: ad))
        var otherAD = ad
        otherAD[0] ^= 0x80
        #expect(!opens(sealed, nonce: nonce, ad: otherAD))
        #expect(!opens(Array(sealed[0..<(RecordAEAD.tagLength - 1)]), nonce: nonce, ad: ad), "shorter than a tag")
    }

    @Test("a key of the wrong length is refused")
    func keyLengths() {
        for (algorithm, wrong) in [(RecordAEAD.Algorithm.aes128GCM, 32), (.aes256GCM, 16), (.chacha20Poly1305, 16), (.aes128GCM, 0)] {
            let key = [UInt8](repeating: 7, count: wrong)
            #expect(key.withUnsafeBytes { RecordAEAD(algorithm, key: $0) } == nil, "\(algorithm) with \(wrong) bytes")
        }
    }
}
