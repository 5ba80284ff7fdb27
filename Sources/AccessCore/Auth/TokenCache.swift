import FoundationEssentials

/// The names of cloudflared's cache files in `~/.cloudflared/` (PROTOCOL.md §3), so that a
/// token one client saved is found by the other.
package enum TokenCacheNaming {
    /// `<AppHostname>-<AppAUD>-token`, every `/` and `*` replaced by `-`.
    package static func appTokenFileName(for app: AppInfo) -> String {
        replacing(app.appHostname + "-" + app.appAUD + "-token", ["/", "*"])
    }

    /// `<AuthDomain>-org-token`, every `/` replaced by `-`.
    package static func orgTokenFileName(authDomain: String) -> String {
        replacing(authDomain + "-org-token", ["/"])
    }

    /// `<auth_domain>-jwks`: the cached key set of an auth domain.
    package static func jwksFileName(authDomain: String) -> String {
        replacing(authDomain + "-jwks", ["/"])
    }

    /// `<name>.lock`: the lock taken while a login for that token runs.
    package static func lockFileName(for tokenFileName: String) -> String { tokenFileName + ".lock" }

    /// `<name>.url`: the login URL the lock's holder is waiting on.
    package static func urlFileName(for tokenFileName: String) -> String { tokenFileName + ".url" }

    /// The application AUD in the name of an app token file of exactly `host` (an application
    /// whose hostname is `host`, without path or wildcard): `<host>-<AUD>-token` gives `AUD`.
    /// nil for any other file (another host, an org token, a path or wildcard application).
    /// It lets a tunnel offer the cached token before any discovery request.
    package static func audience(ofAppTokenFile name: String, host: String) -> String? {
        let prefix = host + "-", suffix = "-token"
        guard !host.isEmpty, name.hasPrefix(prefix), name.hasSuffix(suffix),
              name.count > prefix.count + suffix.count else { return nil }
        let audience = name.dropFirst(prefix.count).dropLast(suffix.count)
        // An AUD is a hex tag: a dash would mean a longer hostname ("<host>-x-<AUD>"), "org" an org token.
        guard audience.allSatisfy({ $0.isHexDigit }) else { return nil }
        return String(audience)
    }

    /// Whether `name` is one of our token files (app or org token), for `logout`.
    package static func isTokenFileName(_ name: String) -> Bool {
        name.hasSuffix("-token") && !name.hasPrefix(".")
    }

    private static func replacing(_ name: String, _ characters: Set<Unicode.Scalar>) -> String {
        String(scalars: name.unicodeScalars.map { characters.contains($0) ? "-" : $0 })
    }
}

/// Why a cached token file is not used; the file is then deleted.
package enum CachedTokenProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file does not hold a readable JWT (the reason says why).
    case malformed(String)
    /// The payload has no `exp`.
    case noExpiry
    /// `exp` is not in the future.
    case expired(Date)
    /// `aud` does not contain the application's AUD.
    case foreignAudience

    /// A short phrase, e.g. "it expired at 2026-01-01T00:00:00Z".
    package var description: String {
        switch self {
        case .malformed(let reason): return "it is not a valid token (\(reason))"
        case .noExpiry: return "it has no expiry time (exp)"
        case .expired(let date): return "it expired at \(Date.ISO8601FormatStyle().format(date))"
        case .foreignAudience: return "it belongs to another application (aud)"
        }
    }
}

/// Whether a cached token may be used (PROTOCOL.md §3).
package enum TokenCacheRules {
    /// Valid with its expiry time, or a problem meaning "delete the file and go on".
    ///
    /// A token is used only if it decodes as a JWT, has `exp` in the future (strictly after
    /// `now`), and — when `requiredAudience` is given (app tokens) — its `aud` contains it.
    package static func check(token: String, requiredAudience: String?, now: Date) -> Result<Date, CachedTokenProblem> {
        let jwt: JWT
        do {
            jwt = try JWT.decode(token)
        } catch {
            return .failure(.malformed(error.reason))
        }
        guard let expiresAt = jwt.claims.expiresAt else { return .failure(.noExpiry) }
        guard expiresAt > now else { return .failure(.expired(expiresAt)) }
        if let requiredAudience, !jwt.claims.audience.contains(requiredAudience) {
            return .failure(.foreignAudience)
        }
        return .success(expiresAt)
    }
}
