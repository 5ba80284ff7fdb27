import Foundation
import NIOHTTP1
import NIOPosix

/// A service token pair accepted via `Cf-Access-Client-Id` / `Cf-Access-Client-Secret`.
struct ServiceToken: Sendable, Equatable {
    let id: String
    let secret: String

    /// Parses `ID:SECRET` (split at the first colon; both parts non-empty).
    init?(parsing text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let id = String(text[..<colon])
        let secret = String(text[text.index(after: colon)...])
        guard !id.isEmpty, !secret.isEmpty else { return nil }
        self.id = id
        self.secret = secret
    }
}

/// Who may open a tunnel, and to where: the Access side of the emulator.
struct AccessPolicy: Sendable {
    /// Fixed TCP target; when `nil`, `Cf-Access-Jump-Destination` picks it.
    var fixedTarget: HostPort?
    var serviceTokens: [ServiceToken]
    /// Fixed `Cf-Access-Token` strings accepted as they are (`--app-token`).
    var appTokens: Set<String>
    /// Issues and checks the JWTs; its team and AUD shape the login redirect.
    var authority: AccessAuthority
    /// When set, every upgrade is answered with this status.
    var forcedStatus: HTTPResponseStatus?
    /// Without a fixed target (a bastion), the `Cf-Access-Jump-Destination`s it may reach
    /// (`--allow-destination`); any other is refused.
    var allowedDestinations: [HostPort] = []
}

/// A complete, small HTTP answer (used for every refusal and for the non-upgrade endpoints).
struct EdgeResponse: Sendable {
    var status: HTTPResponseStatus
    var headers: [(String, String)] = []
    var body: String = ""

    static func text(_ status: HTTPResponseStatus, _ message: String) -> EdgeResponse {
        EdgeResponse(status: status,
                     headers: [("Content-Type", "text/plain; charset=utf-8")],
                     body: message + "\n")
    }
}

/// What to do with one WebSocket upgrade request.
enum UpgradeDecision: Sendable {
    /// Credentials are good: dial `target`, then answer 101 (or 502 when the dial fails).
    case accept(target: HostPort)
    /// Answer with this response and do not upgrade.
    case reject(EdgeResponse)
}

extension AccessPolicy {
    /// Decides an upgrade request: forced status first, then credentials, then the target.
    func decide(_ head: HTTPRequestHead) -> UpgradeDecision {
        if let forced = forcedStatus {
            if (300..<400).contains(forced.code) {
                // A forced redirect is the login redirect, with the forced code.
                var redirect = loginRedirect(for: head)
                redirect.status = forced
                return .reject(redirect)
            }
            return .reject(.text(forced, "forced status \(forced.code) \(forced.reasonPhrase)"))
        }
        guard isAuthorized(head.headers) else {
            return .reject(loginRedirect(for: head))
        }
        if let fixedTarget {
            // A fixed service ignores the jump destination, as a non-bastion ingress rule does.
            return .accept(target: fixedTarget)
        }
        // A bastion (cloudflared's `bastion` service): the client names the destination. When
        // the origin cannot proxy, Cloudflare answers 502; so does the emulator.
        guard let value = head.headers.first(name: "Cf-Access-Jump-Destination") else {
            return .reject(.text(.badGateway, "Bad Gateway: no Cf-Access-Jump-Destination header: this hostname is a "
                                     + "bastion, the client must name the destination (cloudflared's --destination)"))
        }
        guard let target = Self.jumpDestination(value) else {
            return .reject(.text(.badGateway, "Bad Gateway: invalid Cf-Access-Jump-Destination header (want host:port)"))
        }
        guard allowedDestinations.contains(where: { $0.host.lowercased() == target.host.lowercased() && $0.port == target.port })
        else {
            return .reject(.text(.badGateway, "Bad Gateway: the bastion may not reach \(target) (not in --allow-destination)"))
        }
        return .accept(target: target)
    }

    /// The `host:port` of a jump destination header, as cloudflared's bastion reads it: a
    /// scheme (`tcp://`) and a path are dropped.
    static func jumpDestination(_ value: String) -> HostPort? {
        var text = Substring(value.trimmingCharacters(in: .whitespaces))
        if let scheme = text.range(of: "://") { text = text[scheme.upperBound...] }
        if let slash = text.firstIndex(of: "/") { text = text[..<slash] }
        return HostPort(parsing: String(text))
    }

    /// True when the request carries a configured service token pair, a fixed app token, or
    /// an app token JWT the authority issued and still accepts (as `Cf-Access-Token` or as
    /// the `CF_Authorization` cookie).
    func isAuthorized(_ headers: HTTPHeaders) -> Bool {
        if let id = headers.first(name: "Cf-Access-Client-Id"),
           let secret = headers.first(name: "Cf-Access-Client-Secret"),
           serviceTokens.contains(where: { $0.id == id && $0.secret == secret }) {
            return true
        }
        if let token = headers.first(name: "Cf-Access-Token"),
           appTokens.contains(token) || authority.isValidAppToken(token) {
            return true
        }
        if let cookie = EdgeRequest.cookies(in: headers)["CF_Authorization"], authority.isValidAppToken(cookie) {
            return true
        }
        return false
    }

    /// The `302` Access answers when it wants a login:
    /// `https://<team>.cloudflareaccess.com[:port]/cdn-cgi/access/login/<host>?kid=<aud>&redirect_url=<uri>`,
    /// the port being the one in the request's `Host` (none when it has none).
    func loginRedirect(for head: HTTPRequestHead) -> EdgeResponse {
        let request = EdgeRequest(head)
        let settings = authority.settings
        let location = "https://\(settings.authDomain)\(request.portSuffix)/cdn-cgi/access/login/\(request.host)"
            + "?kid=\(settings.audience)"
            + "&redirect_url=\(Self.percentEncoded(head.uri))"
        var headers = [("Location", location)]
        if settings.appSessionLayout == .app {
            // Cloudflare's app host starts the session here; the client brings it back to
            // /cdn-cgi/access/authorized after the team domain.
            let session = authority.newPendingAppSession(host: request.host)
            headers.append(("Set-Cookie", "CF_AppSession=\(session); Path=/; Secure; HttpOnly; SameSite=None"))
        }
        return EdgeResponse(status: .found, headers: headers, body: "")
    }

    /// The `502` for a target that could not be reached.
    static func badGateway(target: HostPort, error: any Error) -> EdgeResponse {
        .text(.badGateway, "Bad Gateway: cannot connect to \(target): \(briefReason(error))")
    }

    /// The most telling part of a dial error (NIO's own description lists every attempt).
    static func briefReason(_ error: any Error) -> String {
        if let failure = error as? NIOConnectionError {
            if let dns = failure.dnsAError ?? failure.dnsAAAAError {
                return "name resolution failed: \(dns)"
            }
            if let first = failure.connectionErrors.first {
                return "\(first.error)"
            }
        }
        return "\(error)"
    }

    /// Percent-encodes everything except RFC 3986 unreserved characters.
    static func percentEncoded(_ text: String) -> String {
        let unreserved = CharacterSet(charactersIn:
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }
}
