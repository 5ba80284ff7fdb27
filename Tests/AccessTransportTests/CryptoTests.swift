@testable import AccessTransport
import AccessTestSupport
import AccessCore
import Foundation
import Testing

/// RS256 and NaCl box against vectors made by python (`cryptography`, PyNaCl).
@Suite("Auth crypto")
struct CryptoTests {
    static let key = try! JWKS.parse(Array(AuthVectors.jwks.utf8)).key(id: "k1")!

    @Test func rs256AcceptsTheGoodSignature() throws {
        let jwt = try JWT.decode(AuthVectors.metadata)
        #expect(OpenSSLRS256Verifier().verifyRS256(message: jwt.signingInput, signature: jwt.signature, key: Self.key))
        let token = try JWT.decode(AuthVectors.appToken)
        #expect(OpenSSLRS256Verifier().verifyRS256(message: token.signingInput, signature: token.signature, key: Self.key))
    }

    @Test func rs256RefusesOtherKeyTamperingAndJunk() throws {
        let verifier = OpenSSLRS256Verifier()
        let other = try JWT.decode(AuthVectors.metadataSignedByOtherKey)
        #expect(!verifier.verifyRS256(message: other.signingInput, signature: other.signature, key: Self.key))
        let tampered = try JWT.decode(AuthVectors.metadataTampered)
        #expect(!verifier.verifyRS256(message: tampered.signingInput, signature: tampered.signature, key: Self.key))
        let good = try JWT.decode(AuthVectors.metadata)
        #expect(!verifier.verifyRS256(message: good.signingInput, signature: Array(good.signature.dropLast()), key: Self.key))
        #expect(!verifier.verifyRS256(message: good.signingInput, signature: [], key: Self.key))
        let small = RSAPublicJWK(keyID: "s", modulus: Array(Self.key.modulus.prefix(64)), exponent: [1, 0, 1])
        #expect(!verifier.verifyRS256(message: good.signingInput, signature: good.signature, key: small))
    }

    @Test func boxOpensPythonSealedTransfer() throws {
        let sender = try #require(Base64.decode(AuthVectors.servicePublicKeyURL, alphabet: .url))
        let senderUnpadded = try #require(Base64.decode(AuthVectors.servicePublicKeyURLUnpadded, alphabet: .url))
        #expect(sender == senderUnpadded)
        let sealed = try #require(Base64.decode(AuthVectors.sealedStandardBase64, alphabet: .standard))
        let opened = try SodiumBox().open(sealed, senderPublicKey: sender, key: vectorClientKey())
        let tokens = try #require(TransferRules.tokens(fromOpened: opened))
        #expect(tokens.appToken == AuthVectors.appToken)
        #expect(tokens.orgToken == AuthVectors.orgToken)
        #expect(!"\(tokens)".contains("eyJ"))
    }

    @Test func boxRefusesWrongKeyTruncationAndTampering() throws {
        let sender = try #require(Base64.decode(AuthVectors.servicePublicKeyURL, alphabet: .url))
        let sealed = try #require(Base64.decode(AuthVectors.sealedStandardBase64, alphabet: .standard))
        let box = SodiumBox()
        let wrongSecret = try #require(Base64.decode(AuthVectors.otherClientSecretKey, alphabet: .url))
        let wrong = SodiumBoxKey(publicKey: vectorClientKey().publicKey, secretKey: wrongSecret)
        #expect(throws: BoxOpenProblem.rejected) { try box.open(sealed, senderPublicKey: sender, key: wrong) }
        #expect(throws: BoxOpenProblem.truncated) { try box.open(Array(sealed.prefix(30)), senderPublicKey: sender, key: vectorClientKey()) }
        #expect(throws: BoxOpenProblem.rejected) { try box.open(Array(sealed.dropFirst()), senderPublicKey: sender, key: vectorClientKey()) }
        var flipped = sealed
        flipped[flipped.count - 1] ^= 1
        #expect(throws: BoxOpenProblem.rejected) { try box.open(flipped, senderPublicKey: sender, key: vectorClientKey()) }
        #expect(throws: BoxOpenProblem.badSenderKey) { try box.open(sealed, senderPublicKey: Array(sender.prefix(31)), key: vectorClientKey()) }
    }

    @Test func ephemeralKeysAreFreshAndNeverPrinted() {
        let box = SodiumBox()
        let a = box.makeEphemeralKey()
        let b = box.makeEphemeralKey()
        #expect(a.publicKey.count == 32 && a.publicKey != b.publicKey)
        #expect("\(a)" == "SodiumBoxKey([redacted])")
        #expect(Base64.encode(a.publicKey, alphabet: .url, padded: true).hasSuffix("="))
    }
}
