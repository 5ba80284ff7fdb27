import AccessCore
import FoundationEssentials

/// Decides whether a server's host key is trusted: the check every ``SSHSession`` runs after
/// the key exchange and before any credential is sent (see ``SSHSession/handshake()``), as
/// swift-nio-ssh's `NIOSSHClientServerAuthenticationDelegate`. Required: a session cannot be
/// made without one.
///
/// ``KnownHostsVerifier`` is the ready implementation (OpenSSH's known_hosts rules). An app
/// that pins a key writes its own:
///
/// ```swift
/// struct PinnedKey: SSHHostKeyDelegate {
///     let fingerprint: String
///     func validateHostKey(_ hostKey: SSHHostKey) async throws(SSHFailure) {
///         guard hostKey.fingerprint == fingerprint else {
///             throw SSHFailure(.hostKeyRejected, "Host key verification failed.")
///         }
///     }
/// }
/// ```
public protocol SSHHostKeyDelegate: Sendable {
    /// Returns if `hostKey` is the server's true key; throws (kind
    /// ``SSHFailure/Kind/hostKeyRejected``, or ``SSHFailure/Kind/localIO`` if a file could not
    /// be read) to end the connection before any credential is sent.
    func validateHostKey(_ hostKey: SSHHostKey) async throws(SSHFailure)

    /// The host-key algorithms to ask the server for first (`ssh-ed25519`,
    /// `ecdsa-sha2-nistp256`, `rsa-sha2-512`, …), before the key exchange: those of the keys
    /// already known for the host, as OpenSSH orders them, so a server with several host keys
    /// presents the known one. nil (the default) keeps the session's own order. Names the
    /// linked engine does not support are dropped; the remaining algorithms follow.
    func preferredHostKeyAlgorithms() async -> [String]?
}

extension SSHHostKeyDelegate {
    /// No preference: the session's own order.
    public func preferredHostKeyAlgorithms() async -> [String]? { nil }
}

/// How a key that known_hosts does not name is treated: OpenSSH's `StrictHostKeyChecking`. A
/// key that differs from a known one is refused in every mode.
public enum SSHHostKeyChecking: Sendable, Equatable {
    /// Refuse it (`StrictHostKeyChecking=yes`).
    case strict
    /// Add it to known_hosts without asking (`accept-new`).
    case acceptNew
    /// Ask the person through ``SSHHostKeyPrompt/confirm(_:)`` (`ask`, OpenSSH's default);
    /// refused when no one can be asked.
    case ask
}

/// Where the host-key check reaches a person: the question about an unknown key and the
/// notices (a key added, a changed key's warning). Supplied by the app — a terminal, a window.
public protocol SSHHostKeyPrompt: Sendable {
    /// Asks whether to trust the unknown key in `question` (OpenSSH asks
    /// ``SSHUnknownHostKey/question`` and reads the answer with
    /// ``SSHUnknownHostKey/interpret(_:)``). Returns nil when no one can be asked.
    func confirm(_ question: SSHUnknownHostKey) async -> Bool?
    /// Shows `notice` to the person (its ``SSHHostKeyNotice/text`` is OpenSSH's wording).
    func show(_ notice: SSHHostKeyNotice) async
}

/// A host key that known_hosts does not name, for the question whether to trust it.
public struct SSHUnknownHostKey: Sendable, Equatable {
    /// The host as known_hosts names it: `host`, or `[host]:port` when the port is not 22.
    public let entryName: String
    /// The key the server presented.
    public let key: SSHHostKey

    /// The unknown `key` of the host named `entryName`.
    public init(entryName: String, key: SSHHostKey) {
        self.entryName = entryName
        self.key = key
    }

    /// OpenSSH's two lines before the question: the host, and the key's type and fingerprint.
    public var text: String {
        "The authenticity of host '\(entryName)' can't be established.\n"
            + "\(key.displayType) key fingerprint is \(key.fingerprint)."
    }

    /// OpenSSH's question.
    public var question: String { "Are you sure you want to continue connecting (yes/no/[fingerprint])? " }

    /// What to say after an answer ``interpret(_:)`` did not understand.
    public var retryQuestion: String { "Please type 'yes', 'no' or the fingerprint: " }

    /// Reads a typed answer as OpenSSH does: `yes` or the key's exact fingerprint trusts it,
    /// `no` or an empty line refuses it, anything else is nil (ask again).
    public func interpret(_ answer: String) -> Bool? {
        let trimmed = answer.trimmingHorizontalWhitespace
        if trimmed.lowercased() == "yes" || trimmed == key.fingerprint { return true }
        if trimmed.lowercased() == "no" || trimmed.isEmpty { return false }
        return nil
    }
}

/// A host key that differs from every key known_hosts names for the host (of its type or of
/// another): the changed-key warning's facts.
public struct SSHChangedHostKey: Sendable, Equatable {
    /// The host as known_hosts names it.
    public let entryName: String
    /// The key the server presented.
    public let key: SSHHostKey
    /// The known_hosts file.
    public let knownHostsPath: String
    /// The keys the file names for the host (plain lines), with their line numbers.
    public let known: [KnownHosts.Entry]

    /// The facts of a changed key.
    public init(entryName: String, key: SSHHostKey, knownHostsPath: String, known: [KnownHosts.Entry]) {
        self.entryName = entryName
        self.key = key
        self.knownHostsPath = knownHostsPath
        self.known = known
    }
}

/// Something the host-key check tells the person, with OpenSSH's wording in ``text``.
public enum SSHHostKeyNotice: Sendable, Equatable {
    /// The key is unknown; shown before the question (or alone when no one can be asked).
    case unknown(SSHUnknownHostKey)
    /// The key was appended to known_hosts under `entryName`.
    case added(entryName: String, key: SSHHostKey)
    /// The key differs from the ones known_hosts names for the host, whatever their type:
    /// OpenSSH's `REMOTE HOST IDENTIFICATION HAS CHANGED!` warning. The connection is refused.
    case changed(SSHChangedHostKey)
    /// known_hosts marks the key `@revoked` for the host: OpenSSH's `REVOKED HOST KEY
    /// DETECTED!` warning. The connection is refused.
    case revoked(entryName: String, key: SSHHostKey)
    /// The key is unknown and strict checking refuses it.
    case unknownRefused(SSHUnknownHostKey)
    /// The server presented a host certificate from a CA known_hosts trusts for the host, and
    /// the certificate does not hold: OpenSSH's `reason` (`Certificate invalid: expired`, …).
    /// Unless the reason says the connection is refused, the certified key is then checked as a
    /// plain key, as OpenSSH does.
    case certificateRefused(entryName: String, key: SSHHostKey, reason: String)

    /// The notice in OpenSSH's words (one or more lines, no final newline).
    public var text: String {
        let rule = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@"
        switch self {
        case .unknown(let question):
            return question.text
        case .added(let name, let key):
            return "Warning: Permanently added '\(name)' (\(key.displayType)) to the list of known hosts."
        case .changed(let changed):
            let path = changed.knownHostsPath
            var lines = [
                rule,
                "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @",
                rule,
                "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!",
                "Someone could be eavesdropping on you right now (man-in-the-middle attack)!",
                "It is also possible that a host key has just been changed.",
                "The fingerprint for the \(changed.key.displayType) key sent by the remote host is",
                "\(changed.key.fingerprint).",
                "Please contact your system administrator.",
                "Add correct host key in \(path) to get rid of this message.",
            ]
            for entry in changed.known {
                lines.append("Offending \(entry.key.displayType) key in \(entry.path.isEmpty ? path : entry.path):\(entry.line)")
            }
            // As ssh: the file of the first offending line (a system file is the administrator's).
            let offending = changed.known.first.map { $0.path.isEmpty ? path : $0.path } ?? path
            lines.append("  remove with:")
            lines.append("  ssh-keygen -f \"\(offending)\" -R \"\(changed.entryName)\"")
            lines.append("Host key for \(changed.entryName) has changed and you have requested strict checking.")
            return lines.joined(separator: "\n")
        case .revoked(let name, let key):
            return [
                rule,
                "@       WARNING: REVOKED HOST KEY DETECTED!               @",
                rule,
                "The \(key.displayType) host key for \(name) is marked as revoked.",
                "This could mean that a stolen key is being used to",
                "impersonate this host.",
                "\(key.displayType) host key for \(name) was revoked and you have requested strict checking.",
            ].joined(separator: "\n")
        case .unknownRefused(let question):
            return "No \(question.key.displayType) host key is known for \(question.entryName) and you have requested strict checking."
        case .certificateRefused(_, _, let reason):
            return reason
        }
    }
}
