/// A cookie from a `Set-Cookie` header: only its name and value (attributes are ignored).
package struct SetCookie: Sendable, Equatable {
    /// The cookie name.
    package let name: String
    /// The cookie value, surrounding double quotes removed.
    package let value: String

    /// A cookie `name=value`.
    package init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Parses `name=value; Attr…`; nil when there is no `=` or the name is empty.
    package static func parse(_ header: String) -> SetCookie? {
        let pair = String(header.prefix { $0 != ";" })
        guard let equals = pair.firstIndex(of: "=") else { return nil }
        let name = String(pair[..<equals]).trimmingWhitespace
        var value = String(pair[pair.index(after: equals)...]).trimmingWhitespace
        if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
            value = String(value.dropFirst().dropLast())
        }
        guard !name.isEmpty else { return nil }
        return SetCookie(name: name, value: value)
    }
}

/// An absolute `scheme://authority/path?query` URL split into its parts, for redirect walks.
struct SplitURL: Equatable {
    var scheme: String
    var authority: String
    /// The path, "/" when empty.
    var path: String
    /// The query with its "?", or "".
    var query: String

    init?(_ text: String) {
        guard let schemeEnd = text.firstRange(of: "://") else { return nil }
        scheme = String(text[..<schemeEnd.lowerBound]).asciiLowercased
        guard scheme == "https" || scheme == "http" else { return nil }
        var rest = Substring(text[schemeEnd.upperBound...])
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        authority = String(rest[..<authorityEnd])
        guard !authority.isEmpty else { return nil }
        let pathAndQuery = rest[authorityEnd...]
        if let question = pathAndQuery.firstIndex(of: "?") {
            path = String(pathAndQuery[..<question])
            query = String(pathAndQuery[question...])
        } else {
            path = String(pathAndQuery)
            query = ""
        }
        if path.isEmpty { path = "/" }
    }

    var text: String { scheme + "://" + authority + path + query }

    /// Resolves a `Location` against this URL: absolute, scheme-relative (`//h/p`),
    /// path-absolute (`/p`) or relative to the current directory.
    func resolving(_ location: String) -> SplitURL? {
        let location = location.trimmingWhitespace
        if location.contains("://") { return SplitURL(location) }
        if location.hasPrefix("//") { return SplitURL(scheme + ":" + location) }
        if location.hasPrefix("/") { return SplitURL(scheme + "://" + authority + location) }
        if location.hasPrefix("?") { return SplitURL(scheme + "://" + authority + path + location) }
        // `path` starts with "/" (see init): its directory is everything up to its last "/".
        let directory = String(path.reversed().drop { $0 != "/" }.reversed())
        return SplitURL(scheme + "://" + authority + directory + location)
    }
}

/// The org-token exchange as a state machine (PROTOCOL.md §3): `HEAD <app URL>` and its
/// redirects followed by hand, cookies added by path, stopping after `/cdn-cgi/access/authorized`.
/// The shell sends each `.send` request and feeds the answer back. Never prints the token.
package struct OrgTokenExchange: Sendable, CustomStringConvertible {
    /// The Access login path: requests to it carry `CF_Authorization=<org token>`.
    package static let loginPath = "/cdn-cgi/access/login"
    /// The Access authorized path: requests to it carry `CF_AppSession`; its answer sets the app token.
    package static let authorizedPath = "/cdn-cgi/access/authorized"
    /// The cookie holding a token.
    package static let tokenCookie = "CF_Authorization"
    /// The session cookie handed from the login answer to the authorized request.
    package static let appSessionCookie = "CF_AppSession"
    /// Redirects followed at most (as Go's client does).
    package static let maximumRedirects = 10
    /// Seconds allowed per request.
    package static let timeoutSeconds = 7

    /// What the shell does next.
    package enum Action: Sendable {
        /// Send this request and call `received`.
        case send(HTTPRequest)
        /// The exchange produced this app token (still to be checked by the cache rules).
        case finished(appToken: String)
        /// The exchange failed; the reason is for an info line (no secret).
        case failed(String)
    }

    private let orgToken: String
    private var current: SplitURL
    private var redirects = 0
    private var appSession: SetCookie?
    private var done = false

    /// `OrgTokenExchange(<app URL path>)`.
    package var description: String { "OrgTokenExchange(\(current.scheme)://\(current.authority)\(current.path))" }

    /// Prepares the exchange for the app at `appURL` with the org token.
    package init?(appURL: String, orgToken: String) {
        guard let url = SplitURL(appURL) else { return nil }
        current = url
        self.orgToken = orgToken
    }

    /// The first request: `HEAD <app URL>`.
    package func start() -> Action { .send(request(for: current)) }

    /// Feeds one answer (status, `Location`, every `Set-Cookie`) and says what follows.
    package mutating func received(status: Int, location: String?, setCookies: [String]) -> Action {
        guard !done else { return .failed("the exchange already ended") }
        let cookies = setCookies.compactMap(SetCookie.parse)
        if let session = cookies.last(where: { $0.name == Self.appSessionCookie }) { appSession = session }
        if current.path.contains(Self.authorizedPath) {
            done = true
            guard let token = cookies.last(where: { $0.name == Self.tokenCookie }), !token.value.isEmpty else {
                return .failed("the authorized answer (HTTP \(status)) set no \(Self.tokenCookie) cookie")
            }
            return .finished(appToken: token.value)
        }
        guard (300...399).contains(status), let location, let next = current.resolving(location) else {
            done = true
            return .failed("the app answered HTTP \(status) without reaching \(Self.authorizedPath)")
        }
        redirects += 1
        guard redirects <= Self.maximumRedirects else {
            done = true
            return .failed("more than \(Self.maximumRedirects) redirects")
        }
        guard next.scheme == "https" else {
            done = true
            return .failed("a redirect leads to a plain-HTTP URL")
        }
        current = next
        return .send(request(for: next))
    }

    private func request(for url: SplitURL) -> HTTPRequest {
        var cookies: [(name: String, value: String)] = []
        if url.path.contains(Self.loginPath) { cookies.append((Self.tokenCookie, orgToken)) }
        if url.path.contains(Self.authorizedPath), let appSession { cookies.append((appSession.name, appSession.value)) }
        return HTTPRequest(method: "HEAD", url: url.text, cookies: cookies, timeoutSeconds: Self.timeoutSeconds)
    }
}
