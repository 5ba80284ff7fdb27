import FoundationEssentials

/// The Access application behind an origin, from its verified metadata JWT (PROTOCOL.md §2).
public struct AppInfo: Sendable, Equatable, CustomStringConvertible {
    /// The team's Access domain, lower-cased, e.g. `team.cloudflareaccess.com`.
    public let authDomain: String
    /// The application's audience tag (AUD).
    public let appAUD: String
    /// The application's host name as Access knows it (may hold `*` wildcards or a path).
    public let appHostname: String

    /// Creates an AppInfo; `MetadataRules.appInfo` is the checked way.
    public init(authDomain: String, appAUD: String, appHostname: String) {
        self.authDomain = authDomain
        self.appAUD = appAUD
        self.appHostname = appHostname
    }

    /// `app <appHostname> at <authDomain>`.
    public var description: String { "app \(appHostname) at \(authDomain)" }
}

/// Why a metadata JWT was refused: one case per claim check of PROTOCOL.md §2.
package enum MetadataProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// `type` is not `"match"` (or missing).
    case wrongType(String?)
    /// `hostname` differs from the requested host (case-insensitively) or is missing.
    case hostnameMismatch(claimed: String?, requested: String)
    /// `auth_domain` is missing, not a plain host name, or outside `.cloudflareaccess.com`.
    case authDomainNotAccess(String?)
    /// `aud` is missing or empty.
    case audienceEmpty
    /// `iat` is missing.
    case issuedAtMissing
    /// `iat` is more than 24 h in the past.
    case issuedTooLongAgo(Date)
    /// `iat` is more than 5 min in the future.
    case issuedInTheFuture(Date)

    /// A short phrase for messages (no token content).
    package var description: String {
        switch self {
        case .wrongType(let type):
            return "its type is \(Display.quoted(type ?? "", limit: 20)) instead of \"match\""
        case .hostnameMismatch(let claimed, let requested):
            return "it is for host \(Display.quoted(claimed ?? "", limit: 80)), not \(requested)"
        case .authDomainNotAccess(let domain):
            return "its auth_domain \(Display.quoted(domain ?? "", limit: 80)) is not a *.cloudflareaccess.com domain"
        case .audienceEmpty:
            return "it names no application audience (aud)"
        case .issuedAtMissing:
            return "it has no issue time (iat)"
        case .issuedTooLongAgo:
            return "it was issued more than 24 hours ago (check the system clock)"
        case .issuedInTheFuture:
            return "it was issued more than 5 minutes in the future (check the system clock)"
        }
    }
}

/// The claim checks on the `cf-access-metadata` JWT (PROTOCOL.md §2). Pure: the caller
/// passes `now` and has verified the signature.
package enum MetadataRules {
    /// The domain every Access team domain ends in.
    package static let accessDomainSuffix = ".cloudflareaccess.com"
    /// How old `iat` may be.
    package static let maximumAge: TimeInterval = 24 * 60 * 60
    /// How far in the future `iat` may be.
    package static let maximumFutureSkew: TimeInterval = 5 * 60

    /// Checks every claim and returns the application, or the first problem found.
    ///
    /// - `type` must be `"match"`;
    /// - `hostname` must equal `requestedHost` ignoring ASCII case (one trailing dot ignored);
    /// - `auth_domain`, lower-cased, must be a host name (letters, digits, `-`, `.`) ending in
    ///   `.cloudflareaccess.com` — so that `https://<auth_domain>/…` cannot point elsewhere;
    /// - `aud` must hold a non-empty value (the first is the AppAUD);
    /// - `iat` must be present, at most 24 h old and at most 5 min in the future;
    /// - `app_hostname` falls back to `hostname` when missing or empty.
    package static func appInfo(claims: JWTClaims, requestedHost: String, now: Date) -> Result<AppInfo, MetadataProblem> {
        guard claims.type == "match" else { return .failure(.wrongType(claims.type)) }
        guard let hostname = claims.hostname, sameHost(hostname, requestedHost) else {
            return .failure(.hostnameMismatch(claimed: claims.hostname, requested: requestedHost))
        }
        guard let rawDomain = claims.authDomain, isAccessDomain(rawDomain) else {
            return .failure(.authDomainNotAccess(claims.authDomain))
        }
        guard let aud = claims.audience.first(where: { !$0.isEmpty }) else { return .failure(.audienceEmpty) }
        guard let issuedAt = claims.issuedAt else { return .failure(.issuedAtMissing) }
        if issuedAt < now.addingTimeInterval(-maximumAge) { return .failure(.issuedTooLongAgo(issuedAt)) }
        if issuedAt > now.addingTimeInterval(maximumFutureSkew) { return .failure(.issuedInTheFuture(issuedAt)) }
        let appHostname = (claims.appHostname?.isEmpty ?? true) ? hostname : claims.appHostname!
        return .success(AppInfo(authDomain: rawDomain.asciiLowercased, appAUD: aud, appHostname: appHostname))
    }

    /// Whether `domain`, lower-cased, is a plain host name under `.cloudflareaccess.com`.
    package static func isAccessDomain(_ domain: String) -> Bool {
        let lowered = domain.asciiLowercased
        guard lowered.hasSuffix(accessDomainSuffix), lowered.count > accessDomainSuffix.count else { return false }
        let labels = lowered.split(separator: ".", omittingEmptySubsequences: false)
        return labels.allSatisfy { label in
            !label.isEmpty && label.count <= 63 && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.unicodeScalars.allSatisfy { $0.isASCIILetter || $0.isASCIIDigit || $0 == "-" }
        }
    }

    private static func sameHost(_ a: String, _ b: String) -> Bool {
        func normal(_ s: String) -> String {
            var s = s.asciiLowercased
            if s.hasSuffix(".") { s.removeLast() }
            return s
        }
        return normal(a) == normal(b)
    }
}
