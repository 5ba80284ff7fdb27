import FoundationEssentials

/// Why a compact JWT could not be read. The reason names the problem, never the token.
package struct JWTFormatError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, e.g. "it does not have three parts".
    package let reason: String
    /// The reason.
    package var description: String { reason }
    init(_ reason: String) { self.reason = reason }
}

/// The claims of a JWT this client looks at. Unknown claims are ignored.
package struct JWTClaims: Sendable, Equatable {
    /// `aud`: given as a string or an array of strings; always an array here.
    package var audience: [String] = []
    /// `exp`, if present.
    package var expiresAt: Date?
    /// `iat`, if present.
    package var issuedAt: Date?
    /// `iss`, if present.
    package var issuer: String?
    /// `type` (Access metadata: `"match"`).
    package var type: String?
    /// `hostname` (Access metadata).
    package var hostname: String?
    /// `auth_domain` (Access metadata).
    package var authDomain: String?
    /// `app_hostname` (Access metadata; may hold wildcards).
    package var appHostname: String?

    /// Empty claims; tests fill in what they need.
    package init() {}
}

/// A decoded (not verified) compact JWS: header fields, claims, and the bytes a signature
/// check needs. Its descriptions never show the token or its signature.
package struct JWT: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Header `alg`, e.g. `RS256`.
    package let algorithm: String
    /// Header `kid`, if present.
    package let keyID: String?
    /// The payload's claims.
    package let claims: JWTClaims
    /// `base64url(header) "." base64url(payload)` as bytes: what the signature covers.
    package let signingInput: [UInt8]
    /// The decoded signature.
    package let signature: [UInt8]

    /// `JWT(alg: RS256, kid: k1)`: no claims, no signature.
    package var description: String { "JWT(alg: \(algorithm), kid: \(keyID ?? "none"))" }
    /// Same as `description`.
    package var debugDescription: String { description }
    /// Shows only `description`, so `dump` cannot print the token.
    package var customMirror: Mirror { Mirror(self, children: ["description": description]) }

    /// Decodes a compact JWS `header.payload.signature` (base64url without padding, as
    /// RFC 7515 says; padding is tolerated). Surrounding white space is ignored.
    ///
    /// - `aud` may be a string or an array of strings; numbers are refused there.
    /// - `exp` and `iat` may be integers or decimals (seconds since 1970).
    package static func decode(_ compact: String) throws(JWTFormatError) -> JWT {
        let trimmed = compact.trimmingWhitespace
        let parts = trimmed.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 3 else { throw JWTFormatError("it does not have three dot-separated parts") }
        guard let headerBytes = Base64.decode(parts[0], alphabet: .url) else {
            throw JWTFormatError("its header is not base64url")
        }
        guard let payloadBytes = Base64.decode(parts[1], alphabet: .url) else {
            throw JWTFormatError("its payload is not base64url")
        }
        guard let signature = Base64.decode(parts[2], alphabet: .url) else {
            throw JWTFormatError("its signature is not base64url")
        }
        guard let header = jsonObject(headerBytes) else { throw JWTFormatError("its header is not a JSON object") }
        guard let payload = jsonObject(payloadBytes) else { throw JWTFormatError("its payload is not a JSON object") }
        guard let algorithm = header["alg"]?.stringValue else { throw JWTFormatError("its header has no \"alg\"") }
        var keyID: String?
        if let raw = header["kid"] {
            guard let kid = raw.stringValue else { throw JWTFormatError("its header \"kid\" is not a string") }
            keyID = kid
        }
        let claims = try parseClaims(payload)
        return JWT(algorithm: algorithm, keyID: keyID, claims: claims,
                   signingInput: Array((parts[0] + "." + parts[1]).utf8), signature: signature)
    }

    private static func jsonObject(_ bytes: [UInt8]) -> [String: JSONValue]? {
        JSONValue.object(bytes)
    }

    private static func parseClaims(_ payload: [String: JSONValue]) throws(JWTFormatError) -> JWTClaims {
        var claims = JWTClaims()
        switch payload["aud"] {
        case nil:
            break
        case .string(let single):
            claims.audience = [single]
        case .array(let many):
            var values: [String] = []
            for item in many {
                guard let value = item.stringValue else { throw JWTFormatError("its \"aud\" array holds a non-string") }
                values.append(value)
            }
            claims.audience = values
        default:
            throw JWTFormatError("its \"aud\" is neither a string nor an array of strings")
        }
        claims.expiresAt = try date(payload, "exp")
        claims.issuedAt = try date(payload, "iat")
        claims.issuer = try string(payload, "iss")
        claims.type = try string(payload, "type")
        claims.hostname = try string(payload, "hostname")
        claims.authDomain = try string(payload, "auth_domain")
        claims.appHostname = try string(payload, "app_hostname")
        return claims
    }

    private static func date(_ payload: [String: JSONValue], _ name: String) throws(JWTFormatError) -> Date? {
        guard let raw = payload[name] else { return nil }
        // A JSON boolean is not a number (`doubleValue` is nil for it): refuse it.
        guard let seconds = raw.doubleValue else {
            throw JWTFormatError("its \"\(name)\" is not a number")
        }
        guard seconds.isFinite else { throw JWTFormatError("its \"\(name)\" is not a finite number") }
        return Date(timeIntervalSince1970: seconds)
    }

    private static func string(_ payload: [String: JSONValue], _ name: String) throws(JWTFormatError) -> String? {
        guard let raw = payload[name] else { return nil }
        guard let value = raw.stringValue else { throw JWTFormatError("its \"\(name)\" is not a string") }
        return value
    }
}
