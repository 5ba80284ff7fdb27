import FoundationEssentials

/// The rules of Access short-lived SSH certificates (PROTOCOL.md §4, `cloudflared access
/// ssh-gen`): file names, when to ask for a new certificate, and the `cert_sign` exchange.
package enum ShortLivedCertificateRules {
    /// The path of the signing endpoint under the token's issuer.
    package static let signPath = "/cdn-cgi/access/cert_sign"
    /// A certificate with less than this left is renewed (seconds): it must still be valid
    /// when ssh presents it, a moment after `ssh-gen` ran.
    package static let renewalMargin: TimeInterval = 60

    /// `<host><escaped path>-cf_key` with every `/` made `-`, as cloudflared names the key pair
    /// in `~/.cloudflared/` (the path "/" of a bare hostname counts as none).
    package static func keyFileName(for origin: OriginURL) -> String {
        let path = origin.path == "/" ? "" : origin.path
        return (origin.host + path + "-cf_key").replacing("/", with: "-")
    }

    /// The public key beside the private one.
    package static func publicKeyFileName(for origin: OriginURL) -> String { keyFileName(for: origin) + ".pub" }

    /// The certificate beside the key pair.
    package static func certificateFileName(for origin: OriginURL) -> String { keyFileName(for: origin) + "-cert.pub" }

    /// Why a new certificate is needed, or nil when the one on disk will do.
    package enum RenewalReason: Sendable, Equatable, CustomStringConvertible {
        /// There is no certificate yet.
        case missing
        /// The file does not hold a certificate we can read.
        case unreadable(String)
        /// It certifies another key (the key pair was made anew).
        case otherKey
        /// It is a host certificate, not a user certificate.
        case notAUserCertificate
        /// Its validity has not begun (a clock step, or a CA clock ahead of ours).
        case notYetValid
        /// It has expired.
        case expired
        /// It expires within the renewal margin.
        case expiresSoon(seconds: Int)

        /// A phrase for the log.
        package var description: String {
            switch self {
            case .missing: return "there is no certificate yet"
            case .unreadable(let reason): return "the certificate file cannot be read (\(reason))"
            case .otherKey: return "the certificate is for another key"
            case .notAUserCertificate: return "the certificate is not a user certificate"
            case .notYetValid: return "the certificate is not valid yet"
            case .expired: return "the certificate has expired"
            case .expiresSoon(let seconds): return "the certificate expires in \(seconds) s"
            }
        }
    }

    /// Whether the certificate text `certificate` (nil: no file) for `publicKey` must be
    /// renewed at `now`.
    package static func renewalReason(certificate: String?, publicKey: OpenSSHPublicKey, now: Date,
                                      margin: TimeInterval = renewalMargin) -> RenewalReason? {
        guard let certificate, !certificate.isEmpty else { return .missing }
        let parsed: OpenSSHCertificate
        do {
            parsed = try OpenSSHCertificate.parse(certificate)
        } catch {
            return .unreadable(error.reason)
        }
        guard parsed.publicKey == publicKey else { return .otherKey }
        guard parsed.certificateType == OpenSSHCertificate.userCertificate else { return .notAUserCertificate }
        let seconds = now.timeIntervalSince1970
        if Double(parsed.validAfter) > seconds { return .notYetValid }
        guard let expiry = parsed.expiresAt else { return nil }
        let left = expiry.timeIntervalSince1970 - seconds
        if left <= 0 { return .expired }
        if left < margin { return .expiresSoon(seconds: Int(left)) }
        return nil
    }

    /// The signing URL for an app token issued by `issuer`, which must be the application's
    /// team domain (`https://<auth domain>`): the token is sent there, so never to anyone else.
    package static func signURL(issuer: String?, authDomain: String) throws(ConfigurationError) -> String {
        let expected = "https://" + authDomain.asciiLowercased
        guard let issuer else {
            throw ConfigurationError("the Access token names no issuer, so there is nowhere to ask for a certificate")
        }
        var trimmed = issuer.asciiLowercased
        while trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard trimmed == expected else {
            throw ConfigurationError("the Access token was issued by \(Display.quoted(Redaction.url(issuer), limit: 100)), "
                                     + "not by the application's team domain \(authDomain): refusing to send it there")
        }
        return expected + signPath
    }

    /// The JSON body of `POST …/cdn-cgi/access/cert_sign`: `{"public_key","jwt","issuer"}`.
    package static func signRequestBody(publicKeyLine: String, token: String, issuer: String) throws -> [UInt8] {
        let object = ["public_key": publicKeyLine, "jwt": token, "issuer": issuer]
        // Only strings, so JSONEncoder does not throw here; the caller still says so if it did.
        // Sorted keys and escaped slashes, as JSONSerialization wrote it.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(object))
    }

    /// What the signing service answered.
    package enum SignAnswer: Sendable, Equatable {
        /// 200 with `{"id","certificate","expires_at"}`: the certificate line.
        case certificate(String)
        /// An error `{"status","message"}` (or a body that is not one): a phrase for the user.
        case refused(status: Int, message: String)
    }

    /// Reads the answer of `cert_sign`: HTTP status and body.
    package static func signAnswer(status: Int, body: [UInt8]) -> SignAnswer {
        let object = JSONValue.object(body)
        if status == 200 {
            guard let certificate = object?["certificate"]?.stringValue, !certificate.isEmpty else {
                return .refused(status: status, message: "the answer holds no certificate")
            }
            return .certificate(certificate.trimmingWhitespace)
        }
        var message = object?["message"]?.stringValue.map { Display.oneLine($0) } ?? ""
        if message.isEmpty {
            message = body.isEmpty ? "no message" : Display.oneLine(String(decoding: body.prefix(200), as: UTF8.self))
        }
        let code = object?["status"]?.exactInt ?? status
        return .refused(status: code, message: Redaction.scrub(String(message.prefix(300))))
    }
}
