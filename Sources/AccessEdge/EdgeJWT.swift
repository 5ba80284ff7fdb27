import Foundation

/// The emulator's compact JWTs: `base64url(header).base64url(claims).base64url(RS256 signature)`.
enum EdgeJWT {
    /// A JWT split and decoded, signature not yet checked.
    struct Parsed {
        /// The JOSE header object.
        var header: [String: Any]
        /// The claims object.
        var claims: [String: Any]
        /// `header.claims` as sent: the bytes the signature covers.
        var signingInput: [UInt8]
        /// The raw signature.
        var signature: [UInt8]

        /// `kid` of the header, if a string.
        var kid: String? { header["kid"] as? String }
    }

    /// Signs `claims` with `key`; the header is `{"alg":"RS256","kid":<kid>,"typ":"JWT"}`, with
    /// `kid` overridable for the emulator's "unknown kid" fault.
    static func sign(claims: [String: Any], key: RSASigningKey, kid: String? = nil) throws -> String {
        let header: [String: Any] = ["alg": "RS256", "kid": kid ?? key.kid, "typ": "JWT"]
        let input = Base64Text.url(try json(header), padded: false) + "."
            + Base64Text.url(try json(claims), padded: false)
        let signature = try key.sign(Array(input.utf8))
        return input + "." + Base64Text.url(signature, padded: false)
    }

    /// Compact JSON, keys sorted, `/` not escaped.
    static func json(_ object: [String: Any]) throws -> [UInt8] {
        [UInt8](try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    /// Splits and decodes a compact JWT; nil when it is not three base64url segments holding
    /// two JSON objects.
    static func parse(_ token: String) -> Parsed? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
              let headerBytes = Base64Text.decodeURL(String(parts[0])),
              let claimBytes = Base64Text.decodeURL(String(parts[1])),
              let signature = Base64Text.decodeURL(String(parts[2])),
              let header = (try? JSONSerialization.jsonObject(with: Data(headerBytes))) as? [String: Any],
              let claims = (try? JSONSerialization.jsonObject(with: Data(claimBytes))) as? [String: Any]
        else { return nil }
        return Parsed(header: header, claims: claims,
                      signingInput: Array(parts[0].utf8) + [UInt8(ascii: ".")] + Array(parts[1].utf8),
                      signature: signature)
    }

    /// `aud` as a list: a string is a list of one; anything else is empty.
    static func audiences(_ claims: [String: Any]) -> [String] {
        if let one = claims["aud"] as? String { return [one] }
        return (claims["aud"] as? [Any])?.compactMap { $0 as? String } ?? []
    }
}
