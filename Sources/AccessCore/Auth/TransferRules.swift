import FoundationEssentials

/// What one answer of the transfer service means (PROTOCOL.md §3 step 4).
package enum TransferPollOutcome: Sendable, Equatable {
    /// Not yet (any non-200 below 500): poll again.
    case notYet
    /// The service failed (≥ 500); `detail` is the body, scrubbed and shortened.
    case serviceError(status: Int, detail: String)
    /// A 200 whose body or key could not be decoded; the reason says what.
    case malformed(String)
    /// A 200: `nonce(24) ‖ box` and the sender's public key, both decoded.
    case sealed(box: [UInt8], senderPublicKey: [UInt8])
}

/// The decisions of the transfer flow, pure.
package enum TransferRules {
    /// The production transfer service.
    package static let defaultBaseURL = "https://login.cloudflareaccess.org"
    /// The FedRAMP transfer service.
    package static let fedRAMPBaseURL = "https://login.fed.cloudflareaccess.org"
    /// The response header with the service's box public key.
    package static let servicePublicKeyHeader = "service-public-key"

    /// `<base>/transfer/<publicKey>`; the key (base64 URL with padding) is escaped for a path.
    package static func pollURL(base: String, publicKey: String) -> String {
        var base = base
        while base.hasSuffix("/") { base.removeLast() }
        let escaped = String(scalars: publicKey.unicodeScalars.flatMap { scalar -> [Unicode.Scalar] in
            scalar == "=" ? Array("%3D".unicodeScalars) : [scalar]
        })
        return base + "/transfer/" + escaped
    }

    /// Interprets one poll answer: ≥500 → error with the body; other non-200 → not yet;
    /// 200 → the body is standard base64 (white space trimmed) and the header
    /// `service-public-key` is base64 URL (padding optional).
    package static func interpret(status: Int, servicePublicKey: String?, body: [UInt8]) -> TransferPollOutcome {
        if status >= 500 {
            let text = String(decoding: body.prefix(512), as: UTF8.self)
            var detail = Redaction.scrub(text)
            if detail.count > 200 { detail = String(detail.prefix(200)) + "…" }
            return .serviceError(status: status, detail: detail)
        }
        guard status == 200 else { return .notYet }
        guard let rawKey = servicePublicKey?.trimmingWhitespace, !rawKey.isEmpty else {
            return .malformed("the answer has no service-public-key header")
        }
        guard let key = Base64.decode(rawKey, alphabet: .url) ?? Base64.decode(rawKey, alphabet: .standard) else {
            return .malformed("the service-public-key header is not base64")
        }
        let text = String(decoding: body, as: UTF8.self).trimmingWhitespace
        guard let sealed = Base64.decode(text, alphabet: .standard) else {
            return .malformed("the body is not base64")
        }
        return .sealed(box: sealed, senderPublicKey: key)
    }

    /// The two tokens of an opened transfer. Never printed.
    package struct Tokens: Sendable, CustomStringConvertible {
        /// `app_token`.
        package let appToken: String
        /// `org_token` (may be empty when the service sends none).
        package let orgToken: String
        /// `Tokens([redacted])`.
        package var description: String { "Tokens([redacted])" }
    }

    /// Parses the opened JSON `{"app_token": "...", "org_token": "..."}`; `app_token` is required.
    package static func tokens(fromOpened bytes: [UInt8]) -> Tokens? {
        guard let object = JSONValue.object(bytes),
              let app = object["app_token"]?.stringValue, !app.trimmingWhitespace.isEmpty else { return nil }
        let org = object["org_token"]?.stringValue ?? ""
        return Tokens(appToken: app.trimmingWhitespace, orgToken: org.trimmingWhitespace)
    }
}
