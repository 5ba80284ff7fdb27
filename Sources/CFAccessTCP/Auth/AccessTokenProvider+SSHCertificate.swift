import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// A short-lived SSH certificate and its key pair on disk, ready for ssh's `IdentityFile` and
/// `CertificateFile` (PROTOCOL.md §4).
public struct ShortLivedCertificate: Sendable, Equatable {
    /// The ECDSA P-256 private key (`<token directory>/<host>-cf_key`, 0600).
    public var privateKeyPath: String
    /// The public key beside it (`…-cf_key.pub`).
    public var publicKeyPath: String
    /// The certificate (`…-cf_key-cert.pub`).
    public var certificatePath: String
    /// The user names the certificate is valid for (its principals).
    public var principals: [String]
    /// When the certificate stops being valid (nil: never).
    public var expiresAt: Date?
    /// Whether Access signed it just now (false: the one on disk was still good).
    public var renewed: Bool
}

/// Short-lived SSH certificates (`cloudflared access ssh-gen`): an ECDSA P-256 key pair beside
/// the tokens, reused while it is good, and a certificate signed by the team's SSH CA through
/// `POST https://<team domain>/cdn-cgi/access/cert_sign` with the app token.
extension AccessTokenProvider {
    /// A certificate for `origin` that is valid for at least the renewal margin: the one on disk,
    /// or a new one signed by Access (logging in first, as a connection would, when there is no
    /// valid app token). The key pair on disk is reused; a missing or unusable one is made anew.
    public func shortLivedCertificate(for origin: OriginURL) async throws(TunnelFailure) -> ShortLivedCertificate {
        let keyName = ShortLivedCertificateRules.keyFileName(for: origin)
        let publicName = ShortLivedCertificateRules.publicKeyFileName(for: origin)
        let certificateName = ShortLivedCertificateRules.certificateFileName(for: origin)
        let key = try keyPair(name: keyName, publicName: publicName)

        var existing: String?
        if case .content(let text, _) = store.read(certificateName) { existing = text }
        let reason = ShortLivedCertificateRules.renewalReason(certificate: existing, publicKey: key.publicKey,
                                                               now: clock.now())
        if reason == nil, let existing, let certificate = try? OpenSSHCertificate.parse(existing) {
            logger.debug("the SSH certificate on disk is still valid", metadata: ["path": "\(store.path(of: certificateName))"])
            return ShortLivedCertificate(privateKeyPath: store.path(of: keyName), publicKeyPath: store.path(of: publicName),
                                         certificatePath: store.path(of: certificateName),
                                         principals: certificate.principals, expiresAt: certificate.expiresAt,
                                         renewed: false)
        }
        logger.debug("asking Access for an SSH certificate", metadata: ["host": "\(origin.host)", "reason": "\(reason.map { "\($0)" } ?? "")"])
        // Only now the network: a good certificate on disk needs none (ssh runs this before every connection).
        let app = try await discover(origin)

        var line: String?
        for attempt in 1...2 {
            let token = try await appToken(for: origin, interactive: true, startedSince: attempt == 1 ? 0 : cacheGeneration)
            switch try await signCertificate(publicKey: key.publicKey, token: token, authDomain: app.authDomain, host: origin.host) {
            case .certificate(let signed):
                line = signed
            case .refused(let status, _) where status == 401 && attempt == 1:
                // A token Access no longer takes (revoked, or its session ended): once more with a new one.
                logger.debug("Access refused the app token for the SSH certificate; logging in again")
                await invalidate(for: origin)
            case .refused(let status, let message):
                throw .certificateRefused(host: origin.host, status: status, message: message)
            }
            if line != nil { break }
        }
        guard let line else { throw .certificateRefused(host: origin.host, status: 401, message: "the app token was refused twice") }
        let certificate: OpenSSHCertificate
        do {
            certificate = try OpenSSHCertificate.parse(line)
        } catch {
            throw .protocolViolation("Access answered the certificate request of \(origin.host) with something that is not an OpenSSH certificate (\(error.reason))")
        }
        guard certificate.publicKey == key.publicKey else {
            throw .protocolViolation("Access answered the certificate request of \(origin.host) with a certificate for another key")
        }
        try store.write(certificateName, text: line + "\n")
        logger.debug("wrote a new SSH certificate", metadata: [
            "path": "\(store.path(of: certificateName))", "principals": "\(certificate.principals.joined(separator: ","))",
            "expires": "\(certificate.expiresAt.map { Date.ISO8601FormatStyle().format($0) } ?? "never")",
        ])
        return ShortLivedCertificate(privateKeyPath: store.path(of: keyName), publicKeyPath: store.path(of: publicName),
                                     certificatePath: store.path(of: certificateName),
                                     principals: certificate.principals, expiresAt: certificate.expiresAt, renewed: true)
    }

    /// The key pair `name` (+ `publicName`): reused when it is an ECDSA P-256 key of ours, else
    /// made anew. The `.pub` file is rewritten when it does not match the private key.
    private func keyPair(name: String, publicName: String) throws(TunnelFailure) -> ECDSAKeyPair {
        var key: ECDSAKeyPair?
        switch store.read(name) {
        case .content(let pem, _):
            key = ECDSAKeyPair.load(pem: pem)
            if key == nil {
                logger.info("the key file is not an unencrypted ECDSA P-256 key; making a new key pair",
                            metadata: ["path": "\(store.path(of: name))"])
            }
        case .untrusted(let reason):
            logger.warning("not using the key file; making a new key pair", metadata: ["path": "\(store.path(of: name))", "reason": "\(reason)"])
        case .missing:
            break
        }
        let pair: ECDSAKeyPair
        if let key {
            pair = key
        } else {
            pair = try ECDSAKeyPair.generate()
            try store.write(name, text: pair.privateKeyPEM)
            logger.debug("made a new ECDSA P-256 key pair for SSH certificates", metadata: ["path": "\(store.path(of: name))"])
        }
        var publicMatches = false
        if case .content(let text, _) = store.read(publicName), let parsed = try? OpenSSHPublicKey.parse(text) {
            publicMatches = parsed == pair.publicKey
        }
        if !publicMatches {
            try store.write(publicName, text: pair.publicKey.line(comment: "") + "\n")
        }
        return pair
    }

    /// `POST <issuer>/cdn-cgi/access/cert_sign` for `publicKey` with `token`.
    private func signCertificate(publicKey: OpenSSHPublicKey, token: String, authDomain: String,
                                 host: String) async throws(TunnelFailure) -> ShortLivedCertificateRules.SignAnswer {
        let issuer: String?
        do {
            issuer = try JWT.decode(token).claims.issuer
        } catch {
            throw .loginFailed(host: host, reason: "the cached app token cannot be read (\(error.reason))")
        }
        let url: String
        do {
            url = try ShortLivedCertificateRules.signURL(issuer: issuer, authDomain: authDomain)
        } catch {
            throw TunnelFailure(category: .authentication, isRetryable: false, message: error.message + " (\(host))",
                                kind: .certificateRefused)
        }
        let body: [UInt8]
        do {
            body = try ShortLivedCertificateRules.signRequestBody(publicKeyLine: publicKey.line(comment: ""), token: token,
                                                                  issuer: issuer ?? "")
        } catch {
            throw .internalError("the certificate request for \(host) could not be encoded: \(error)")
        }
        let response = try await http.send(HTTPRequest(method: "POST", url: url,
                                                       headers: [("Content-Type", "application/json"),
                                                                 ("Accept", "application/json")],
                                                       timeoutSeconds: 10, body: body))
        return ShortLivedCertificateRules.signAnswer(status: response.status, body: response.body)
    }
}
