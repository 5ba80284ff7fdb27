/// Who logs in where: the user and the host and port a saved password and the prompts are keyed
/// to (`user@host:port`).
public struct SSHAccount: Sendable, Hashable, CustomStringConvertible {
    /// The user to log in as.
    public var user: String
    /// The host (lower-cased), in the embedded mode the Access hostname.
    public var host: String
    /// The SSH port the account is keyed to.
    public var port: Int

    /// The account `user@host:port` (port 22 by default); the host is lower-cased.
    public init(user: String, host: String, port: Int = 22) {
        self.user = user
        self.host = host.lowercased()
        self.port = port
    }

    /// `user@host:port`.
    public var description: String { "\(user)@\(host):\(port)" }
}

/// Where ``SSHOrderedAuthentication`` reaches the person: the questions it asks and the notices it
/// shows, supplied by the app (a terminal, a window), as swift-nio-ssh's client example supplies
/// its password prompt. Each question may take as long as the person needs.
public protocol SSHAuthenticationPrompts: Sendable {
    /// Whether a person can be asked at all. Without one, encrypted keys, keyboard-interactive
    /// and typed passwords are skipped (a saved password is still used).
    var canAsk: Bool { get }

    /// The passphrase of the encrypted key at `keyPath`; nil to skip the key.
    func passphrase(forKey keyPath: String) async -> String?

    /// A password for `account` (OpenSSH asks `user@host's password: `); nil to stop asking.
    func password(for account: SSHAccount) async -> String?

    /// The answers to one round of keyboard-interactive questions, one per question (shown
    /// with ``SSHKeyboardPrompt/Question/echo`` honoured); nil when no one answers.
    func respond(to round: SSHKeyboardPrompt) async -> [String]?

    /// Whether to save the password that just worked for `account` in the password store.
    func confirmSavingPassword(for account: SSHAccount) async -> Bool

    /// Shows `notice` (its ``SSHAuthenticationNotice/message`` is a plain line).
    func show(_ notice: SSHAuthenticationNotice) async
}

/// Something the authentication tells the person on the way, in ``message``.
public enum SSHAuthenticationNotice: Sendable, Equatable {
    /// The passphrase did not decrypt the key at the path.
    /// The server's pre-login banner (visible-safe), shown as it came, as ssh shows it.
    case banner(String)
    /// A wrong passphrase (or a key that cannot be read with it).
    case badPassphrase(keyPath: String)
    /// The key file at the path could not be read or is not a key this client reads.
    case unreadableKey(keyPath: String)
    /// The server refused the keyboard-interactive answers.
    case keyboardInteractiveRefused
    /// The saved password of the account was refused.
    case savedPasswordRefused(SSHAccount)
    /// A typed password was refused; `retrying` when it will be asked again.
    case passwordRefused(retrying: Bool)
    /// The server accepts passwords, but no one can be asked for one.
    case noOneToAskForPassword
    /// The password that worked cannot be saved: the store is unavailable, for this reason.
    case passwordNotSavable(reason: String)
    /// The password was saved for the account.
    case passwordSaved(SSHAccount)
    /// The password store did not answer or failed when the saved password was looked up; the
    /// person is asked instead.
    case passwordStoreUnavailable(reason: String)
    /// The server refused an RSA key (a key file's path, or "the agent's key") because of the
    /// linked engine's RSA signatures (SHA-1 only): `reason` says why and what to do.
    case rsaKeyRefused(key: String, reason: String)
    /// Saving the password failed, for this reason.
    case passwordNotSaved(reason: String)

    /// The notice as one plain line (OpenSSH's words where it has some).
    public var message: String {
        switch self {
        case .banner(let text): return text
        case .badPassphrase(let path): return "Bad passphrase for key '\(path)'"
        case .unreadableKey(let path): return "Load key \"\(path)\": invalid or unsupported format"
        case .keyboardInteractiveRefused: return "Authentication failed"
        case .savedPasswordRefused(let account): return "The saved password for \(account) was not accepted."
        case .passwordRefused(let retrying): return retrying ? "Authentication failed, please try again." : "Authentication failed"
        case .noOneToAskForPassword: return "no one to ask for a password"
        case .passwordNotSavable(let reason): return "the password cannot be saved: \(reason)"
        case .passwordSaved(let account): return "Password saved for \(account)."
        case .passwordStoreUnavailable(let reason): return "the saved password cannot be looked up: \(reason)"
        case .rsaKeyRefused(let key, let reason): return "The server refused the RSA key \(key): \(reason)"
        case .passwordNotSaved(let reason): return "the password was not saved: \(reason)"
        }
    }
}

/// Why a password store cannot be used or failed, in one line for people (never the password).
public struct SSHPasswordStoreFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The reason, e.g. "libsecret-1.so.0 is not installed".
    public let reason: String
    /// Whether the store did not answer in time (it may still be hanging).
    public let timedOut: Bool

    /// A failure for `reason`; `timedOut` when the store did not answer in time.
    public init(reason: String, timedOut: Bool = false) {
        self.reason = reason
        self.timedOut = timedOut
    }

    /// The reason.
    public var description: String { reason }
}

/// Saved passwords, keyed to an ``SSHAccount``: pluggable, so an app can keep them where it keeps
/// secrets. ``SecretServiceStore`` (the system keyring) is the ready one.
public protocol SSHPasswordStore: Sendable {
    /// The saved password for `account`, or nil; throws when the store cannot be used.
    func password(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> String?
    /// Saves `password` for `account`, replacing any saved one.
    func save(_ password: String, for account: SSHAccount) async throws(SSHPasswordStoreFailure)
    /// Removes the saved password for `account`; returns whether one was there.
    func remove(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> Bool
}
