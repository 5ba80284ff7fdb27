import Foundation
import NIOHTTP1

/// How the HTTP handler answers a request.
enum EdgeReply {
    /// Send this response, then close.
    case response(EdgeResponse)
    /// Send nothing; the connection stays open until the client closes it
    /// (`--transfer-mode hang`).
    case noAnswer
    /// Hold the request (a long poll): ask `check` again every 100 ms until it has a response,
    /// or send `otherwise` after `seconds`.
    case held(seconds: Int, otherwise: EdgeResponse, check: @Sendable () -> EdgeResponse?)
    /// Work that blocks (running `ssh-keygen`): done off the event loop, then its response sent.
    case deferred(@Sendable () -> EdgeResponse)
}

/// Cloudflare's side of the login protocol and the emulator's admin API, routed by `Host`
/// and path (reference/EMULATOR.md lists every endpoint):
///
/// - any host, path under `/cdn-cgi/edge/admin/`: the admin API (POST);
/// - any host with `cf-access-metadata-request: true`: app discovery (`cf-access-metadata`);
/// - `<team>.cloudflareaccess.com`: `/cdn-cgi/access/certs` (JWKS), `/cdn-cgi/access/login/<app host>`,
///   `/cdn-cgi/access/cert_sign` (short-lived SSH certificates);
/// - `login.cloudflareaccess.org` (and `login.fed.…`): `/transfer/<client public key>`;
/// - any other host is the application: `/cdn-cgi/access/cli`, `/cdn-cgi/access/authorized`,
///   `?cloudflared_token_check=true`, and every other path as an Access-protected page.
struct AuthRoutes: Sendable {
    /// Path prefix of the admin API.
    static let adminPrefix = "/cdn-cgi/edge/admin/"
    /// The cookie holding a token.
    static let tokenCookie = "CF_Authorization"
    /// The one-shot session cookie between the login endpoint and `/cdn-cgi/access/authorized`.
    static let sessionCookie = "CF_AppSession"

    let policy: AccessPolicy
    let stats: EdgeStats
    let log: EdgeLog
    /// The open tunnels, for `drop-tunnels`.
    let tunnels: OpenTunnels

    private var authority: AccessAuthority { policy.authority }
    private var settings: AuthSettings { policy.authority.settings }

    /// Answers one request that is not a WebSocket upgrade; `body` is what it carried.
    func reply(to head: HTTPRequestHead, body: [UInt8] = []) -> EdgeReply {
        let request = EdgeRequest(head)
        do {
            return try route(request, head: head, body: body)
        } catch {
            log.error("\(request.method) \(request.path) failed: \(error)")
            return .response(.text(.internalServerError, "emulator error: \(error)"))
        }
    }

    private func route(_ request: EdgeRequest, head: HTTPRequestHead, body: [UInt8]) throws -> EdgeReply {
        if request.path.hasPrefix(Self.adminPrefix) {
            if request.path == Self.adminPrefix + "ssh-ca" && request.method == .POST {
                let ca = authority.sshCA
                return .deferred {
                    do {
                        return EdgeResponse(status: .ok, headers: [("Content-Type", "text/plain")], body: try ca.publicKeyLine())
                    } catch {
                        return .text(.internalServerError, "\(error)")
                    }
                }
            }
            return .response(try admin(request))
        }
        if request.headers.first(name: "cf-access-metadata-request")?.lowercased() == "true" {
            return .response(try metadata(request))
        }
        if request.host == settings.authDomain {
            if request.path == "/cdn-cgi/access/certs" {
                guard request.method == .GET || request.method == .HEAD else { return .response(Self.onlyGET) }
                stats.record(.jwksRequest)
                return .response(EdgeResponse(status: .ok, headers: [("Content-Type", "application/json")],
                                              body: authority.jwksJSON()))
            }
            if request.path.hasPrefix("/cdn-cgi/access/login/") {
                return .response(login(request))
            }
            if request.path == "/cdn-cgi/access/cert_sign" {
                return certSign(request, body: body)
            }
            return .response(.text(.notFound, "not found"))
        }
        if AuthSettings.transferHosts.contains(request.host) {
            guard request.path.hasPrefix("/transfer/") else { return .response(.text(.notFound, "not found")) }
            guard request.method == .GET else { return .response(Self.onlyGET) }
            return transfer(request)
        }
        switch request.path {
        case "/cdn-cgi/access/cli":
            return .response(try cliPage(request))
        case "/cdn-cgi/access/authorized":
            return .response(try authorized(request))
        default:
            break
        }
        let signedIn = policy.isAuthorized(request.headers)
        if request.query["cloudflared_token_check"] == "true" {
            stats.record(.tokenCheck)
            log.info("token check on \(request.host): \(signedIn ? "valid" : "invalid")")
            return .response(signedIn ? .text(.ok, "token ok") : policy.loginRedirect(for: head))
        }
        guard signedIn else { return .response(policy.loginRedirect(for: head)) }
        return .response(.html(.ok, "Access application \(request.host)",
                               "You are signed in to this emulated Access application."))
    }

    // MARK: Endpoints

    /// App discovery: `cf-access-metadata: <JWT>`, no redirect, no body.
    private func metadata(_ request: EdgeRequest) throws -> EdgeResponse {
        stats.record(.metadataRequest)
        guard let token = try authority.metadataToken(host: request.host) else {
            log.info("metadata for \(request.host): header left out (--metadata-mode missing)")
            return .text(.ok, "no Access application here")
        }
        log.info("metadata for \(request.host) (\(settings.metadataMode.rawValue))")
        return EdgeResponse(status: .ok, headers: [("cf-access-metadata", token)], body: "")
    }

    /// `/cdn-cgi/access/cli`: "the browser opened the login page".
    private func cliPage(_ request: EdgeRequest) throws -> EdgeResponse {
        stats.record(.cliPageRequest)
        guard request.method == .GET || request.method == .HEAD else { return Self.onlyGET }
        guard let key = request.query["token"], AccessAuthority.clientPublicKey(key) != nil else {
            return .text(.badRequest, "token must be the client's 32-byte public key, base64 URL alphabet with padding")
        }
        guard request.query["aud"] == settings.audience else {
            return .text(.badRequest, "aud does not name this application")
        }
        guard request.query["edge_token_transfer"] == "true" else {
            return .text(.badRequest, "only the edge token transfer is emulated: send edge_token_transfer=true")
        }
        guard let redirect = request.query["redirect_url"], !redirect.isEmpty else {
            return .text(.badRequest, "redirect_url is missing")
        }
        let sendOrgToken = request.query["send_org_token"] == "true"
        switch try authority.openLogin(publicKey: key, sendOrgToken: sendOrgToken) {
        case .completed:
            log.info("login page on \(request.host): completed")
            return .html(.ok, "Login complete", "You may close this window.")
        case .waitingForApproval:
            log.info("login page on \(request.host): waiting for the admin call")
            return .html(.ok, "Waiting for approval",
                         "This login will be finished from another device. You may close this window.")
        }
    }

    /// The transfer service: 404 until completed, then one 200 with the sealed tokens.
    private func transfer(_ request: EdgeRequest) -> EdgeReply {
        stats.record(.transferPoll)
        let key = EdgeRequest.percentDecoded(String(request.path.dropFirst("/transfer/".count)), plusIsSpace: false)
        guard AccessAuthority.clientPublicKey(key) != nil else {
            return .response(.text(.badRequest, "not a client public key"))
        }
        let notYet = EdgeResponse.text(.notFound, "login not completed yet")
        switch authority.poll(publicKey: key) {
        case .notYet:
            // Like Cloudflare's transfer service, a poll for a login not finished yet is held
            // open (up to --transfer-hold seconds) and answered as soon as the login completes.
            let hold = settings.transferHoldSeconds
            guard hold > 0 else { return .response(notYet) }
            let authority = self.authority
            let log = self.log
            let mode = settings.transferMode
            return .held(seconds: hold, otherwise: notYet) {
                guard case .delivered(let body, let servicePublicKey) = authority.poll(publicKey: key) else { return nil }
                log.info("transfer delivered on a held poll (\(mode.rawValue))")
                return Self.delivery(body: body, servicePublicKey: servicePublicKey)
            }
        case .serviceError:
            return .response(.text(.internalServerError, "transfer service error (emulated)"))
        case .hang:
            log.info("transfer poll left unanswered (--transfer-mode hang)")
            return .noAnswer
        case .delivered(let body, let servicePublicKey):
            log.info("transfer delivered (\(settings.transferMode.rawValue))")
            return .response(Self.delivery(body: body, servicePublicKey: servicePublicKey))
        }
    }

    /// The transfer service's 200: the sealed tokens and the sender's key.
    private static func delivery(body: String, servicePublicKey: String) -> EdgeResponse {
        EdgeResponse(status: .ok, headers: [("Content-Type", "text/plain"), ("service-public-key", servicePublicKey)],
                     body: body)
    }

    /// `<team>.cloudflareaccess.com/cdn-cgi/access/login/<app host>`: with a valid org token
    /// cookie, a 302 to the app's `/cdn-cgi/access/authorized` setting `CF_AppSession`;
    /// otherwise the login page (200).
    private func login(_ request: EdgeRequest) -> EdgeResponse {
        let appHost = EdgeRequest.percentDecoded(String(request.path.dropFirst("/cdn-cgi/access/login/".count)),
                                                 plusIsSpace: false).lowercased()
        guard !appHost.isEmpty, !appHost.contains("/") else { return .text(.badRequest, "no application host") }
        guard let orgToken = request.cookies[Self.tokenCookie], let email = authority.orgTokenEmail(orgToken) else {
            log.info("login page for \(appHost): no valid org token, showing the sign-in page")
            return .html(.ok, "Sign in to \(settings.team)", "Sign in with your identity provider to reach \(appHost).")
        }
        var redirect = request.query["redirect_url"] ?? "/"
        if !redirect.hasPrefix("/") { redirect = "/" }
        let session = authority.startAppSession(email: email, host: appHost, redirectPath: redirect)
        var location = "https://\(appHost)\(request.portSuffix)/cdn-cgi/access/authorized?redirect_url="
            + AccessPolicy.percentEncoded(redirect)
        log.info("login for \(appHost): org token accepted, on to /cdn-cgi/access/authorized")
        switch settings.appSessionLayout {
        case .app:
            // The session cookie is the app host's own (set on its login redirect); the way
            // back carries a one-time code instead.
            location += "&code=" + session
            return EdgeResponse(status: .found, headers: [("Location", location)], body: "")
        case .team:
            return EdgeResponse(status: .found,
                                headers: [("Location", location),
                                          ("Set-Cookie", Self.cookie(Self.sessionCookie, session))],
                                body: "")
        }
    }

    /// `/cdn-cgi/access/authorized`: spends `CF_AppSession`, sets `CF_Authorization=<app token>`
    /// and redirects to the original path; 403 without a valid session.
    private func authorized(_ request: EdgeRequest) throws -> EdgeResponse {
        let code: String?
        switch settings.appSessionLayout {
        case .app:
            // The app's own CF_AppSession must come back, with the team domain's code.
            guard let cookie = request.cookies[Self.sessionCookie],
                  authority.spendPendingAppSession(cookie, host: request.host) else {
                log.info("authorized on \(request.host): no CF_AppSession that this app set")
                return .text(.forbidden, "no valid CF_AppSession cookie")
            }
            code = request.query["code"]
        case .team:
            code = request.cookies[Self.sessionCookie]
        }
        guard let session = code,
              let (token, path) = try authority.finishAppSession(session, host: request.host) else {
            log.info("authorized on \(request.host): no valid CF_AppSession")
            return .text(.forbidden, "no valid CF_AppSession cookie")
        }
        stats.record(.orgExchange)
        log.info("authorized on \(request.host): app token set")
        // As Cloudflare sets it: with an Expires attribute (whose date holds a comma).
        let expires = Self.cookieDate(Date().addingTimeInterval(TimeInterval(settings.appTokenTTL)))
        return EdgeResponse(status: .found,
                            headers: [("Location", request.origin + path),
                                      ("Set-Cookie", "\(Self.tokenCookie)=\(token); Path=/; Expires=\(expires); "
                                        + "Secure; HttpOnly; SameSite=None")],
                            body: "")
    }

    /// `POST /cdn-cgi/access/cert_sign` on the team domain: `{"public_key","jwt","issuer"}` →
    /// `{"id","certificate","expires_at"}`, the key signed by the team's SSH user CA for the
    /// principal that is the local part of the token's email; errors are `{"status","message"}`.
    private func certSign(_ request: EdgeRequest, body: [UInt8]) -> EdgeReply {
        stats.record(.certSignRequest)
        guard request.method == .POST else {
            return .response(Self.jsonError(.methodNotAllowed, "use POST"))
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
              let publicKey = object["public_key"] as? String, let token = object["jwt"] as? String,
              let issuer = object["issuer"] as? String else {
            return .response(Self.jsonError(.badRequest, "the body must be JSON with public_key, jwt and issuer"))
        }
        guard issuer == settings.issuer else {
            log.info("cert_sign: issuer \(issuer) is not \(settings.issuer)")
            return .response(Self.jsonError(.badRequest, "issuer does not match this team"))
        }
        guard let email = authority.appTokenEmail(token) else {
            log.info("cert_sign: no valid app token")
            return .response(Self.jsonError(.unauthorized, "invalid or expired token"))
        }
        if settings.certSignMode == .refuse {
            log.info("cert_sign: refused (--cert-sign-mode refuse)")
            return .response(Self.jsonError(.forbidden, "short-lived certificates are not enabled for this application (emulated)"))
        }
        let principal = String(email.prefix { $0 != "@" })
        let ca = authority.sshCA
        let stats = self.stats
        let log = self.log
        return .deferred {
            do {
                let signed = try ca.sign(publicKeyLine: publicKey, principal: principal)
                stats.record(.sshCertificateSigned)
                log.info("cert_sign: signed a certificate for \(principal), valid \(ca.validitySeconds) s")
                let formatter = ISO8601DateFormatter()
                let answer: [String: Any] = ["id": signed.keyID, "certificate": signed.certificate,
                                             "expires_at": formatter.string(from: signed.expiresAt)]
                let json = (try? JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys])) ?? Data()
                return EdgeResponse(status: .ok, headers: [("Content-Type", "application/json")],
                                    body: String(decoding: json, as: UTF8.self))
            } catch {
                log.info("cert_sign: \(error)")
                return Self.jsonError(.badRequest, "\(error)")
            }
        }
    }

    /// An error as Access's API gives it: `{"status":N,"message":"…"}`.
    static func jsonError(_ status: HTTPResponseStatus, _ message: String) -> EdgeResponse {
        EdgeResponse(status: status, headers: [("Content-Type", "application/json")],
                     body: "{\"status\":\(status.code),\"message\":\(JSONText.quoted(message))}")
    }

    /// An HTTP date (RFC 9110 IMF-fixdate), e.g. `Tue, 24 Nov 2026 13:00:00 GMT`.
    static func cookieDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }

    // MARK: Admin API

    private func admin(_ request: EdgeRequest) throws -> EdgeResponse {
        let action = String(request.path.dropFirst(Self.adminPrefix.count))
        guard ["complete", "revoke", "rotate-key", "issue", "drop-tunnels", "ssh-ca"].contains(action) else {
            return .text(.notFound,
                         "unknown admin action '\(action)': complete, revoke, rotate-key, issue, drop-tunnels, ssh-ca")
        }
        guard request.method == .POST else {
            return EdgeResponse(status: .methodNotAllowed, headers: [("Allow", "POST")], body: "use POST\n")
        }
        switch action {
        case "complete":
            guard let key = request.query["token"], AccessAuthority.clientPublicKey(key) != nil else {
                return .text(.badRequest, "token must be the client's 32-byte public key, base64 URL alphabet with padding")
            }
            let fresh = try authority.completeLogin(publicKey: key, email: request.query["email"])
            log.info("admin: login \(fresh ? "completed" : "was already completed")")
            return .text(.ok, fresh ? "completed" : "already completed")
        case "revoke":
            let count = authority.revokeAllAppTokens()
            log.info("admin: revoked \(count) app tokens")
            return .text(.ok, "revoked \(count) app tokens")
        case "drop-tunnels":
            let count = tunnels.dropAll()
            log.info("admin: reset \(count) open tunnels")
            return .text(.ok, "dropped \(count) tunnels")
        case "rotate-key":
            let kid = try authority.rotateKey()
            log.info("admin: signing key rotated")
            return EdgeResponse(status: .ok, headers: [("Content-Type", "text/plain")], body: kid)
        default:
            let kind: TokenKind
            switch request.query["kind"] ?? "app" {
            case "app": kind = .app
            case "org": kind = .org
            default: return .text(.badRequest, "kind must be app or org")
            }
            var ttl: Int?
            if let text = request.query["ttl"] {
                guard let value = Int(text) else { return .text(.badRequest, "ttl must be whole seconds (may be negative)") }
                ttl = value
            }
            let token = try authority.issue(kind: kind, audience: request.query["aud"], ttl: ttl,
                                            email: request.query["email"])
            log.info("admin: issued an \(kind.rawValue) token")
            return EdgeResponse(status: .ok, headers: [("Content-Type", "application/jwt")], body: token)
        }
    }

    // MARK: Helpers

    private static let onlyGET = EdgeResponse(status: .methodNotAllowed, headers: [("Allow", "GET, HEAD")],
                                              body: "use GET\n")

    /// `name=value; Path=/; Secure; HttpOnly; SameSite=None`.
    private static func cookie(_ name: String, _ value: String) -> String {
        "\(name)=\(value); Path=/; Secure; HttpOnly; SameSite=None"
    }
}

extension EdgeResponse {
    /// A tiny HTML page.
    static func html(_ status: HTTPResponseStatus, _ title: String, _ message: String) -> EdgeResponse {
        let body = "<!doctype html><html><head><title>\(escaped(title))</title></head>"
            + "<body><h1>\(escaped(title))</h1><p>\(escaped(message))</p></body></html>\n"
        return EdgeResponse(status: status, headers: [("Content-Type", "text/html; charset=utf-8")], body: body)
    }

    private static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}
