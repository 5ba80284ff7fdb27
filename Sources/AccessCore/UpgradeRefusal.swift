/// What an answer other than `101 Switching Protocols` to the WebSocket upgrade means.
package enum UpgradeRefusal: Sendable, Equatable {
    /// `302` with a `Location` whose path starts with `/cdn-cgi/access/login`: Access wants
    /// a login (or rejected the credential offered). `loginURL` is the `Location` as sent; it
    /// may hold a query, so show it only through `TunnelFailure` or `Redaction`.
    case accessLoginRequired(loginURL: String)
    /// Any other redirect (3xx).
    case redirect(status: Int, location: String?)
    /// `401 Unauthorized`.
    case unauthorized
    /// `403 Forbidden`.
    case forbidden
    /// `404 Not Found`.
    case notFound
    /// `5xx`: 502, 503, 504, Cloudflare's 530 and the rest.
    case badGateway(status: Int)
    /// Anything else: 200, 400, 429, even 101 passed by mistake.
    case unexpectedStatus(Int)

    /// The path every Access login redirect points to.
    package static let accessLoginPath = "/cdn-cgi/access/login"

    /// Classifies a refused upgrade from its status code and `Location` header.
    ///
    /// Only a `302` whose `Location` *path* starts with `/cdn-cgi/access/login` (absolute
    /// URL, scheme-relative `//host/…` or absolute path) is `accessLoginRequired`; the same
    /// text in a query, another path, or another 3xx status is `redirect`.
    package static func classify(status: Int, location: String?) -> UpgradeRefusal {
        switch status {
        case 302:
            if let location, isAccessLoginLocation(location) {
                return .accessLoginRequired(loginURL: location)
            }
            return .redirect(status: status, location: location)
        case 300...399:
            return .redirect(status: status, location: location)
        case 401:
            return .unauthorized
        case 403:
            return .forbidden
        case 404:
            return .notFound
        case 500...599:
            return .badGateway(status: status)
        default:
            return .unexpectedStatus(status)
        }
    }

    /// Whether a `Location` value's path starts with `/cdn-cgi/access/login`.
    package static func isAccessLoginLocation(_ location: String) -> Bool {
        locationPath(location).hasPrefix(accessLoginPath)
    }

    /// The path of a `Location` value: absolute URL, scheme-relative or relative reference.
    /// Query and fragment excluded.
    static func locationPath(_ location: String) -> String {
        var scalars = location.scalarArray.trimming { $0.properties.isWhitespace }
        if let schemeEnd = scalars.firstIndex(ofSequence: "://"),
           !scalars[..<schemeEnd].contains(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            scalars = Array(scalars[(schemeEnd + 3)...])
            let authorityEnd = scalars.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? scalars.count
            scalars = Array(scalars[authorityEnd...])
        } else if scalars.starts(with: ["/", "/"]) {
            scalars = Array(scalars.dropFirst(2))
            let authorityEnd = scalars.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? scalars.count
            scalars = Array(scalars[authorityEnd...])
        }
        let pathEnd = scalars.firstIndex { $0 == "?" || $0 == "#" } ?? scalars.count
        return String(scalars: scalars[..<pathEnd])
    }
}
