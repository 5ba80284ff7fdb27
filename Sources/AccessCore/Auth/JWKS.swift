import FoundationEssentials

/// One RSA public key of a JWKS (RFC 7517): its `kid` and big-endian modulus and exponent.
package struct RSAPublicJWK: Sendable, Equatable {
    /// `kid`.
    package let keyID: String
    /// `n`, big-endian bytes.
    package let modulus: [UInt8]
    /// `e`, big-endian bytes.
    package let exponent: [UInt8]

    /// Creates a key.
    package init(keyID: String, modulus: [UInt8], exponent: [UInt8]) {
        self.keyID = keyID
        self.modulus = modulus
        self.exponent = exponent
    }
}

/// A JSON Web Key Set: the RSA keys of `https://<auth_domain>/cdn-cgi/access/certs`.
package struct JWKS: Sendable, Equatable {
    /// The RSA keys that have a `kid`, `n` and `e`; other keys are skipped.
    package let keys: [RSAPublicJWK]

    /// Parses `{"keys":[{"kid":…,"kty":"RSA","n":…,"e":…},…]}`. Keys of another `kty`,
    /// or without `kid`/`n`/`e`, are skipped; a body that is not such an object is refused.
    package static func parse(_ bytes: [UInt8]) throws(JWTFormatError) -> JWKS {
        guard let object = JSONValue.object(bytes), let rawKeys = object["keys"]?.arrayValue else {
            throw JWTFormatError("the key set is not a JSON object with a \"keys\" array")
        }
        var keys: [RSAPublicJWK] = []
        for case .object(let key) in rawKeys {
            guard key["kty"]?.stringValue == "RSA",
                  let kid = key["kid"]?.stringValue,
                  let n = key["n"]?.stringValue.flatMap({ Base64.decode($0, alphabet: .url) }),
                  let e = key["e"]?.stringValue.flatMap({ Base64.decode($0, alphabet: .url) }),
                  !n.isEmpty, !e.isEmpty else { continue }
            keys.append(RSAPublicJWK(keyID: kid, modulus: n, exponent: e))
        }
        return JWKS(keys: keys)
    }

    /// The key with `kid`, if any.
    package func key(id: String) -> RSAPublicJWK? { keys.first { $0.keyID == id } }
}

/// When to use the on-disk JWKS and when to fetch it again (PROTOCOL.md §2).
package enum JWKSCachePolicy {
    /// A cached key set is fresh for 24 h.
    package static let maximumAge: TimeInterval = 24 * 60 * 60
    /// An unknown `kid` refetches at most once a minute.
    package static let refetchInterval: TimeInterval = 60

    /// What to do about the key set.
    package enum Decision: Sendable, Equatable {
        /// Use the cached set (it has the key, or a refetch would come too soon).
        case useCached
        /// Fetch the set from the auth domain.
        case fetch
    }

    /// - Parameters:
    ///   - cachedAt: when the cached set was fetched (nil: no cached set).
    ///   - hasKey: whether the cached set holds the wanted `kid`.
    ///   - lastFetchedByUs: when this process last fetched the set (nil: not yet).
    ///   - now: the current time.
    /// A missing or older-than-24-h set is fetched; a fresh set with the key is used; a
    /// fresh set without it is fetched again unless this process fetched it less than a minute
    /// ago (a key rotated since another process cached the set is found at once).
    package static func decide(cachedAt: Date?, hasKey: Bool, lastFetchedByUs: Date?, now: Date) -> Decision {
        guard let cachedAt else { return .fetch }
        let age = now.timeIntervalSince(cachedAt)
        if age >= maximumAge || age < -maximumAge { return .fetch }
        if hasKey { return .useCached }
        guard let lastFetchedByUs else { return .fetch }
        let since = now.timeIntervalSince(lastFetchedByUs)
        return since >= refetchInterval || since < 0 ? .fetch : .useCached
    }
}
