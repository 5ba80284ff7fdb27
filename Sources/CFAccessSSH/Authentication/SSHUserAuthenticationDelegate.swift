/// Picks the next way to log in from what the server accepts, as swift-nio-ssh's
/// `NIOSSHClientUserAuthenticationDelegate`: ``SSHSession/authenticate(user:delegate:)`` asks it
/// for an offer, tries the offer, and asks again with the failure until one is accepted, the
/// delegate returns nil, or it throws.
///
/// ``SSHOrderedAuthentication`` is the ready implementation (OpenSSH's order with prompts the app
/// supplies). A delegate that only knows a key:
///
/// ```swift
/// struct KeyOnly: SSHUserAuthenticationDelegate {
///     let path: String
///     func nextAuthenticationOffer(availableMethods: SSHAuthenticationMethods,
///                                  lastFailure: SSHFailure?) async throws(SSHFailure) -> SSHAuthenticationOffer? {
///         lastFailure == nil && availableMethods.contains(.publicKey) ? .privateKey(path: path) : nil
///     }
/// }
/// ```
public protocol SSHUserAuthenticationDelegate: Sendable {
    /// The next offer to try, given the methods the server accepts; `lastFailure` is why the
    /// previous offer of this authentication failed (nil for the first call of a connection).
    /// nil ends the authentication as failed; a thrown failure ends it with that failure.
    func nextAuthenticationOffer(availableMethods: SSHAuthenticationMethods,
                                 lastFailure: SSHFailure?) async throws(SSHFailure) -> SSHAuthenticationOffer?

    /// The answers to one round of keyboard-interactive questions, one per question, while an
    /// ``SSHAuthenticationOffer/keyboardInteractive`` offer runs; nil when no one can answer.
    /// The default answers nothing.
    func respond(to round: SSHKeyboardPrompt) async -> [String]?

    /// Called once the server accepted `offer` (to remember it for a reconnect, or to offer to
    /// save a password). The default does nothing.
    func authenticationSucceeded(with offer: SSHAuthenticationOffer) async

    /// The server's pre-login banner (`SSH_MSG_USERAUTH_BANNER`: legal notices), made
    /// visible-safe, before the first offer. Shown where the session's library passes it on
    /// (libssh; libssh2 1.10 has no way to). The default does nothing.
    func showBanner(_ text: String) async
}

extension SSHUserAuthenticationDelegate {
    /// Answers nothing: a keyboard-interactive offer fails.
    public func respond(to round: SSHKeyboardPrompt) async -> [String]? { nil }

    /// Does nothing.
    public func authenticationSucceeded(with offer: SSHAuthenticationOffer) async {}

    /// Does nothing.
    public func showBanner(_ text: String) async {}
}

/// The authentication methods a server accepts (its `SSH_MSG_USERAUTH_FAILURE` list), as a set of
/// the methods this client knows. Names it does not know are left out, so a server's text never
/// reaches a message as it came.
public struct SSHAuthenticationMethods: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The bits of the set.
    public let rawValue: UInt8

    /// A set from its bits.
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `publickey`: keys, from files or an ssh-agent.
    public static let publicKey = SSHAuthenticationMethods(rawValue: 1 << 0)
    /// `keyboard-interactive`: questions from the server (PAM, one-time codes).
    public static let keyboardInteractive = SSHAuthenticationMethods(rawValue: 1 << 1)
    /// `password`.
    public static let password = SSHAuthenticationMethods(rawValue: 1 << 2)
    /// `hostbased` (not offered by this client).
    public static let hostBased = SSHAuthenticationMethods(rawValue: 1 << 3)
    /// `gssapi-with-mic`, Kerberos (not offered by this client).
    public static let gssapi = SSHAuthenticationMethods(rawValue: 1 << 4)

    private static let named: [(String, SSHAuthenticationMethods)] = [
        ("publickey", .publicKey), ("keyboard-interactive", .keyboardInteractive), ("password", .password),
        ("hostbased", .hostBased), ("gssapi-with-mic", .gssapi),
    ]

    /// The set of the known names among `names` (the server's comma-separated list, split).
    public init<Names: Sequence>(names: Names) where Names.Element: StringProtocol {
        self = []
        for name in names {
            if let method = Self.named.first(where: { $0.0 == name })?.1 { insert(method) }
        }
    }

    /// The protocol names of the methods in the set, in OpenSSH's order of preference.
    public var names: [String] { Self.named.filter { contains($0.1) }.map(\.0) }

    /// The names, comma-separated (`publickey,password`), as OpenSSH prints them.
    public var description: String { names.joined(separator: ",") }
}

/// One way to log in, tried once by ``SSHSession/authenticate(user:offer:answering:)``.
///
/// Its description never shows a password or passphrase.
public enum SSHAuthenticationOffer: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible,
                                    CustomReflectable {
    /// Each identity of the ssh-agent at `socketPath` (nil: `SSH_AUTH_SOCK`), in the agent's order.
    case agent(socketPath: String?)
    /// The one identity of the ssh-agent at `socketPath` (nil: `SSH_AUTH_SOCK`) whose public key
    /// blob is `publicKey` (see ``SSHAgentIdentity``).
    case agentKey(socketPath: String?, publicKey: [UInt8])
    /// A private key file (OpenSSH or PEM; the public key is derived from it), with the
    /// passphrase of an encrypted key.
    case privateKey(path: String, passphrase: String? = nil)
    /// A password.
    case password(String)
    /// Keyboard-interactive: the server's questions go to the delegate's
    /// ``SSHUserAuthenticationDelegate/respond(to:)`` (or the `answering` closure).
    case keyboardInteractive

    /// The method this offer uses.
    public var method: SSHAuthenticationMethods {
        switch self {
        case .agent, .agentKey, .privateKey: return .publicKey
        case .password: return .password
        case .keyboardInteractive: return .keyboardInteractive
        }
    }

    /// The offer without its secret: `agent`, `agentKey(SHA256:…)`, `privateKey(PATH)`,
    /// `password`, `keyboardInteractive`.
    public var description: String {
        switch self {
        case .agent(let socket): return socket.map { "agent(\($0))" } ?? "agent"
        case .agentKey(_, let key): return "agentKey(\(SSHPublicKeyBlob.fingerprint(key)))"
        case .privateKey(let path, let passphrase): return "privateKey(\(path)\(passphrase == nil ? "" : ", passphrase"))"
        case .password: return "password"
        case .keyboardInteractive: return "keyboardInteractive"
        }
    }

    /// The same as ``description``: no secret.
    public var debugDescription: String { description }

    /// A mirror without the secret, for `dump` and debuggers.
    public var customMirror: Mirror { Mirror(self, children: ["offer": description]) }
}
