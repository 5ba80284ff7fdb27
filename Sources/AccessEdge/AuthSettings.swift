import ArgumentParser

/// How `cf-access-metadata` is produced: `ok`, or one fault for client tests.
enum MetadataMode: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// A correct JWT.
    case ok
    /// No `cf-access-metadata` header at all (200 without it).
    case missing
    /// A correct JWT whose signature has one byte flipped.
    case badSignature = "bad-signature"
    /// Signed by the current key, but the header names a `kid` the JWKS does not list.
    case unknownKid = "unknown-kid"
    /// `type` is `"nomatch"` instead of `"match"`.
    case wrongType = "wrong-type"
    /// `hostname` is `wrong-<host>`, not the requested host.
    case wrongHostname = "wrong-hostname"
    /// `aud` is the empty string.
    case wrongAudEmpty = "wrong-aud-empty"
    /// `iat` is 25 hours ago.
    case staleIat = "stale-iat"
    /// `iat` is 10 minutes ahead.
    case futureIat = "future-iat"
    /// `auth_domain` is `<team>.evilcloudflareaccess.com` (ends in `cloudflareaccess.com`
    /// but not in `.cloudflareaccess.com`).
    case foreignAuthDomain = "foreign-auth-domain"
    /// The header value is three segments that are not base64url (`*` characters).
    case badBase64 = "bad-base64"
}

/// How the transfer service answers polls: `ok`, or one fault for client tests.
enum TransferMode: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// 404 until the login is completed, then one 200 with the sealed tokens.
    case ok
    /// Every poll: 500 with a plain-text body.
    case error500
    /// Every poll: 404 "not yet", even after the login is completed.
    case never
    /// Polls are never answered (the connection stays open until the client gives up).
    case hang
    /// The box is sealed with a server key other than the one in `service-public-key`.
    case wrongKey = "wrong-key"
    /// The body is base64 of only the first 10 bytes of the nonce.
    case truncated
    /// The body is not base64.
    case badBase64 = "bad-base64"
}

/// Where the org-token exchange's `CF_AppSession` cookie comes from.
enum AppSessionLayout: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Cloudflare's: the app host sets it on its own first answer (the login redirect); the team
    /// domain sends the client back to `/cdn-cgi/access/authorized` with a one-time code.
    case app
    /// The emulator's earlier layout: the team domain's redirect sets it.
    case team
}

/// How `/cdn-cgi/access/cert_sign` answers: signs, or refuses as for an application without
/// short-lived certificates.
enum CertSignMode: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Sign the key with the SSH user CA.
    case ok
    /// `403 {"status":403,"message":"short-lived certificates are not enabled for this application (emulated)"}`.
    case refuse
}

/// Who completes a login opened on the `/cdn-cgi/access/cli` page.
enum LoginMode: String, CaseIterable, Sendable, ExpressibleByArgument {
    /// Opening the page completes the login at once (a browser where the user is signed in).
    case auto
    /// Only the admin call `POST /cdn-cgi/edge/admin/complete` completes it ("from another device").
    case manual
}

/// The login side of the emulator: team, application, issuance and fault knobs.
struct AuthSettings: Sendable {
    /// A fixed, made-up application AUD: the default of `--aud`.
    static let defaultAudience = "4b1d6c0e8f2a93d57e6c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a098f7e6d5"

    /// Access team: the auth domain is `<team>.cloudflareaccess.com`.
    var team: String
    /// The application AUD (metadata `aud`, login-redirect `kid`, app token `aud`).
    var audience: String = Self.defaultAudience
    /// Metadata `app_hostname` ("" → clients use `hostname`).
    var appHostname: String = ""
    var metadataMode: MetadataMode = .ok
    var transferMode: TransferMode = .ok
    /// Seconds a transfer poll for an unfinished login is held open (0 = answered at once).
    var transferHoldSeconds: Int = 20
    /// Which response sets `CF_AppSession` in the org-token exchange.
    var appSessionLayout: AppSessionLayout = .app
    var loginMode: LoginMode = .auto
    /// Rotate the signing key after this many metadata JWTs signed with it (0 = never).
    var rotateKidAfter: Int = 0
    /// App token lifetime in seconds.
    var appTokenTTL: Int = 3600
    /// Org token lifetime in seconds.
    var orgTokenTTL: Int = 86_400
    /// The `email` of the emulated signed-in user.
    var email: String = "user@example.test"
    /// The SSH user CA's private key (`--ssh-ca-key`); nil: one made at the first use.
    var sshCAKeyPath: String?
    /// Lifetime of a short-lived SSH certificate, in seconds (`--ssh-cert-ttl`).
    var sshCertificateTTL: Int = 180
    /// How `cert_sign` answers (`--cert-sign-mode`).
    var certSignMode: CertSignMode = .ok

    /// `<team>.cloudflareaccess.com`.
    var authDomain: String { "\(team).cloudflareaccess.com" }
    /// Token issuer: `https://<team>.cloudflareaccess.com`.
    var issuer: String { "https://\(authDomain)" }
    /// The transfer service hosts the emulator answers for.
    static let transferHosts: Set<String> = ["login.cloudflareaccess.org", "login.fed.cloudflareaccess.org"]
}
