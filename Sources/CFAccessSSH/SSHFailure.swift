/// Why an SSH operation failed: a kind to act on and a plain one-line message for people.
///
/// Like swift-nio-ssh's `NIOSSHError`, the kind is an extensible struct: new kinds may come in a
/// minor release, so a `switch` over it needs a `default`. No library result code is part of it:
/// which SSH library ran the session is an implementation detail.
public struct SSHFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let name: String
        private init(_ name: String) { self.name = name }

        /// The server did not answer within the session's timeout.
        public static let timedOut = Kind("timed out")
        /// The connection (the tunnel, or the SSH transport over it) ended or broke.
        public static let connectionLost = Kind("connection lost")
        /// The server refused the credential, or no method was left to try.
        public static let authenticationFailed = Kind("authentication failed")
        /// The server's host key is not the one known_hosts names, or was not accepted.
        public static let hostKeyRejected = Kind("host key rejected")
        /// The server broke the SSH protocol or refused a request (channel, pty, exec).
        public static let protocolError = Kind("protocol error")
        /// A local file (key, known_hosts) could not be read or written.
        public static let localIO = Kind("local I/O")
        /// Something given by the caller is unusable (empty user, a bad key path).
        public static let configuration = Kind("configuration")

        /// The kind's name, e.g. `connection lost`.
        public var description: String { name }
    }

    /// What kind of failure this is.
    public let kind: Kind
    /// One plain line for people; never carries a secret.
    public let message: String
    /// When the SSH library running the session, not the server, is what stopped it (an RSA key
    /// or host key with a library that has no rsa-sha2): the limitation and the way out. Another
    /// engine would get past it.
    package var engineLimitation: String?
    /// The server accepts the key offered without its passphrase (probed with the public half,
    /// as OpenSSH does): ask for the passphrase now.
    package var needsPassphrase = false

    /// Creates a failure.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message.
    public var description: String { message }
}
