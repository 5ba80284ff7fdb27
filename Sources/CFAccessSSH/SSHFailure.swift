/// Why an SSH operation failed: a kind to act on and a plain one-line message for people.
public struct SSHFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public enum Kind: Sendable, Equatable {
        /// The server did not answer within the session's timeout.
        case timedOut
        /// The connection (the tunnel, or the SSH transport over it) ended or broke.
        case connectionLost
        /// The server refused the credential, or no method was left to try.
        case authenticationFailed
        /// The server's host key is not the one known_hosts names, or was not accepted.
        case hostKeyRejected
        /// The server broke the SSH protocol or refused a request (channel, pty, exec).
        case protocolError
        /// A local file (key, known_hosts) could not be read or written.
        case localIO
        /// Something given by the caller is unusable (empty user, a bad key path).
        case configuration
    }

    /// What kind of failure this is.
    public let kind: Kind
    /// One plain line for people; never carries a secret.
    public let message: String
    /// The SSH library's result code, when it gave one (0 otherwise).
    public let code: Int32

    /// Creates a failure.
    public init(_ kind: Kind, _ message: String, code: Int32 = 0) {
        self.kind = kind
        self.message = message
        self.code = code
    }

    /// The message.
    public var description: String { message }
}
