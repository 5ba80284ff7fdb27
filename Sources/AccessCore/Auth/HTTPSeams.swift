import FoundationEssentials

/// One HTTP request of the login flows. Never prints header or cookie values, nor the body.
package struct HTTPRequest: Sendable, CustomStringConvertible {
    /// `GET`, `HEAD`, …
    package var method: String
    /// The absolute `https://` URL.
    package var url: String
    /// Request headers, in order (names as given).
    package var headers: [(name: String, value: String)]
    /// Cookies to send in one `Cookie` header.
    package var cookies: [(name: String, value: String)]
    /// Seconds allowed for the whole exchange.
    package var timeoutSeconds: Int
    /// The request body (a `POST`'s), or nil for none. Never printed.
    package var body: [UInt8]?

    /// Creates a request; redirects are never followed by the client.
    package init(method: String, url: String, headers: [(name: String, value: String)] = [],
                cookies: [(name: String, value: String)] = [], timeoutSeconds: Int, body: [UInt8]? = nil) {
        self.method = method
        self.url = url
        self.headers = headers
        self.cookies = cookies
        self.timeoutSeconds = timeoutSeconds
        self.body = body
    }

    /// `GET https://host/path` (no query, no header values, no body).
    package var description: String { method + " " + Redaction.url(url) }
}

/// An HTTP response: status, every header line (repeats kept, e.g. each `Set-Cookie`), body.
package struct HTTPResponse: Sendable, CustomStringConvertible {
    /// The status code.
    package var status: Int
    /// Header lines in order, names as received.
    package var headers: [(name: String, value: String)]
    /// The body (capped by the client).
    package var body: [UInt8]

    /// Creates a response.
    package init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Every value of header `name` (case-insensitive), in order.
    package func values(of name: String) -> [String] {
        let lowered = name.asciiLowercased
        return headers.filter { $0.name.asciiLowercased == lowered }.map(\.value)
    }

    /// The first value of header `name` (case-insensitive).
    package func value(of name: String) -> String? { values(of: name).first }

    /// `HTTP 302` — no headers, no body.
    package var description: String { "HTTP \(status)" }
}

/// Sends one HTTP request without following redirects (the seam over libcurl).
package protocol HTTPClient: Sendable {
    /// Sends `request`; a 3xx is returned as it is. Transport problems (DNS, TCP, TLS,
    /// timeout, a body over the cap) throw.
    func send(_ request: HTTPRequest) async throws(TunnelFailure) -> HTTPResponse
}

/// Verifies RS256 signatures (the seam over OpenSSL).
package protocol SignatureVerifier: Sendable {
    /// Whether `signature` is a valid RSASSA-PKCS1-v1_5 SHA-256 signature of `message` by `key`.
    func verifyRS256(message: [UInt8], signature: [UInt8], key: RSAPublicJWK) -> Bool
}

/// An ephemeral NaCl box key pair; its secret key never leaves the object and is never printed.
package protocol EphemeralBoxKey: Sendable {
    /// The 32-byte public key.
    var publicKey: [UInt8] { get }
}

/// Why a sealed box could not be opened.
package enum BoxOpenProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The sender's public key is not 32 bytes.
    case badSenderKey
    /// Shorter than a 24-byte nonce plus the 16-byte authenticator.
    case truncated
    /// Authentication failed: wrong key or tampered data.
    case rejected

    /// A short phrase.
    package var description: String {
        switch self {
        case .badSenderKey: return "the service public key is not a 32-byte key"
        case .truncated: return "the sealed data is shorter than a nonce and an authenticator"
        case .rejected: return "it does not open with our key (wrong key or altered data)"
        }
    }
}

/// NaCl `crypto_box` (X25519 + XSalsa20-Poly1305): key pairs and opening (the seam over libsodium).
package protocol BoxOpener: Sendable {
    /// A fresh key pair; never reused, never persisted.
    func makeEphemeralKey() -> any EphemeralBoxKey
    /// Opens `nonce(24) ‖ box` sent by `senderPublicKey` to `key`.
    func open(_ sealed: [UInt8], senderPublicKey: [UInt8], key: any EphemeralBoxKey) throws(BoxOpenProblem) -> [UInt8]
}
