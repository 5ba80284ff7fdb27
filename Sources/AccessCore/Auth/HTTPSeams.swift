import Foundation

/// One HTTP request of the login flows. Never prints header or cookie values.
public struct HTTPRequest: Sendable, CustomStringConvertible {
    /// `GET`, `HEAD`, …
    public var method: String
    /// The absolute `https://` URL.
    public var url: String
    /// Request headers, in order (names as given).
    public var headers: [(name: String, value: String)]
    /// Cookies to send in one `Cookie` header.
    public var cookies: [(name: String, value: String)]
    /// Seconds allowed for the whole exchange.
    public var timeoutSeconds: Int

    /// Creates a request; redirects are never followed by the client.
    public init(method: String, url: String, headers: [(name: String, value: String)] = [],
                cookies: [(name: String, value: String)] = [], timeoutSeconds: Int) {
        self.method = method
        self.url = url
        self.headers = headers
        self.cookies = cookies
        self.timeoutSeconds = timeoutSeconds
    }

    /// `GET https://host/path` (no query, no header values).
    public var description: String { method + " " + Redaction.url(url) }
}

/// An HTTP response: status, every header line (repeats kept, e.g. each `Set-Cookie`), body.
public struct HTTPResponse: Sendable, CustomStringConvertible {
    /// The status code.
    public var status: Int
    /// Header lines in order, names as received.
    public var headers: [(name: String, value: String)]
    /// The body (capped by the client).
    public var body: [UInt8]

    /// Creates a response.
    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Every value of header `name` (case-insensitive), in order.
    public func values(of name: String) -> [String] {
        let lowered = name.asciiLowercased
        return headers.filter { $0.name.asciiLowercased == lowered }.map(\.value)
    }

    /// The first value of header `name` (case-insensitive).
    public func value(of name: String) -> String? { values(of: name).first }

    /// `HTTP 302` — no headers, no body.
    public var description: String { "HTTP \(status)" }
}

/// Sends one HTTP request without following redirects (the seam over libcurl).
public protocol HTTPClient: Sendable {
    /// Sends `request`; a 3xx is returned as it is. Transport problems (DNS, TCP, TLS,
    /// timeout, a body over the cap) throw.
    func send(_ request: HTTPRequest) async throws(TunnelFailure) -> HTTPResponse
}

/// Verifies RS256 signatures (the seam over OpenSSL).
public protocol SignatureVerifier: Sendable {
    /// Whether `signature` is a valid RSASSA-PKCS1-v1_5 SHA-256 signature of `message` by `key`.
    func verifyRS256(message: [UInt8], signature: [UInt8], key: RSAPublicJWK) -> Bool
}

/// An ephemeral NaCl box key pair; its secret key never leaves the object and is never printed.
public protocol EphemeralBoxKey: Sendable {
    /// The 32-byte public key.
    var publicKey: [UInt8] { get }
}

/// Why a sealed box could not be opened.
public enum BoxOpenProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// The sender's public key is not 32 bytes.
    case badSenderKey
    /// Shorter than a 24-byte nonce plus the 16-byte authenticator.
    case truncated
    /// Authentication failed: wrong key or tampered data.
    case rejected

    /// A short phrase.
    public var description: String {
        switch self {
        case .badSenderKey: return "the service public key is not a 32-byte key"
        case .truncated: return "the sealed data is shorter than a nonce and an authenticator"
        case .rejected: return "it does not open with our key (wrong key or altered data)"
        }
    }
}

/// NaCl `crypto_box` (X25519 + XSalsa20-Poly1305): key pairs and opening (the seam over libsodium).
public protocol BoxOpener: Sendable {
    /// A fresh key pair; never reused, never persisted.
    func makeEphemeralKey() -> any EphemeralBoxKey
    /// Opens `nonce(24) ‖ box` sent by `senderPublicKey` to `key`.
    func open(_ sealed: [UInt8], senderPublicKey: [UInt8], key: any EphemeralBoxKey) throws(BoxOpenProblem) -> [UInt8]
}

/// What reading a cache file found.
public enum TokenFileRead: Sendable, Equatable {
    /// No such file.
    case missing
    /// The file exists but must not be trusted (e.g. readable by others); it is left alone.
    case untrusted(String)
    /// Its text (white space trimmed) and modification time.
    case content(String, modifiedAt: Date)
}

/// The token cache directory (the seam over `~/.cloudflared/`). File names come from
/// `TokenCacheNaming`; files are written 0600 in a 0700 directory.
public protocol TokenStore: Sendable {
    /// Reads `name`.
    func read(_ name: String) -> TokenFileRead
    /// Writes `text` to `name` atomically, 0600.
    func write(_ name: String, text: String) throws(TunnelFailure)
    /// Removes `name` if present.
    func delete(_ name: String)
    /// The names of the files in the directory.
    func fileNames() -> [String]
    /// The full path of `name`, for messages.
    func path(of name: String) -> String
}

/// A taken login lock; `release` removes it (idempotent).
public protocol LoginLockHandle: Sendable {
    /// Removes the lock file.
    func release()
}

/// The result of one attempt to take a login lock.
public enum LoginLockAttempt: Sendable {
    /// We hold it now.
    case acquired(any LoginLockHandle)
    /// A live process holds it.
    case held(pid: Int32)
}

/// The cross-process login lock (the seam over `<token path>.lock`).
public protocol LoginLock: Sendable {
    /// Tries once to take the lock for token file `tokenFileName`, removing a stale lock first.
    func tryAcquire(tokenFileName: String) throws(TunnelFailure) -> LoginLockAttempt
}

/// Opens a URL in the user's browser.
public protocol BrowserOpener: Sendable {
    /// Whether a browser was started for `url`; false means "show it for another device".
    func open(_ url: String) async -> Bool
}

/// The wall clock and sleeping (the seam that makes waits testable).
public protocol WallClock: Sendable {
    /// The current time.
    func now() -> Date
    /// Sleeps for `duration`; returns false (at once) if the task was cancelled.
    func sleep(for duration: Duration) async -> Bool
}
