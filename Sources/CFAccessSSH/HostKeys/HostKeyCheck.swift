/// OpenSSH's known_hosts rules as a decision without I/O: what known_hosts says about the key,
/// and later the person's answer, go in; what to do comes out. ``KnownHostsVerifier`` performs
/// the actions (reads and appends the file, asks, shows).
package struct HostKeyCheck: Sendable, Equatable {
    /// What to do next.
    package enum Action: Sendable, Equatable {
        /// The key is the known one: go on.
        case trust
        /// Show ``SSHHostKeyNotice/unknown(_:)`` and ask about the key; the answer goes to
        /// ``answered(_:)``.
        case ask(SSHUnknownHostKey)
        /// Append the key to known_hosts, then show `notice`; the key is trusted.
        case record(notice: SSHHostKeyNotice)
        /// Show `notices`, then end the connection with `failure`.
        case refuse(notices: [SSHHostKeyNotice], failure: SSHFailure)
    }

    /// The mode for unknown keys.
    package let checking: SSHHostKeyChecking
    /// The host as known_hosts names it.
    package let entryName: String
    /// The known_hosts file, for the changed-key warning.
    package let knownHostsPath: String
    /// The key the server presented.
    package let key: SSHHostKey

    /// A check of `key` for the host `entryName` in the file at `knownHostsPath`.
    package init(checking: SSHHostKeyChecking, entryName: String, knownHostsPath: String, key: SSHHostKey) {
        self.checking = checking
        self.entryName = entryName
        self.knownHostsPath = knownHostsPath
        self.key = key
    }

    /// The failure every refusal ends with, in OpenSSH's words.
    package static let failed = SSHFailure(.hostKeyRejected, "Host key verification failed.")

    /// The first decision, from the file's verdict and the plain entries `known` for the host: a
    /// match is trusted; a changed key (one of another type included: the host is known) and a
    /// revoked key are refused in every mode; an unknown key is refused, added or asked about
    /// by the mode.
    package func decide(_ verdict: KnownHosts.Verdict, known: [KnownHosts.Entry] = []) -> Action {
        switch verdict {
        case .match:
            return .trust
        case .mismatch:
            let changed = SSHChangedHostKey(entryName: entryName, key: key, knownHostsPath: knownHostsPath,
                                            known: known.filter { $0.marker == nil })
            return .refuse(notices: [.changed(changed)], failure: Self.failed)
        case .revoked:
            return .refuse(notices: [.revoked(entryName: entryName, key: key)], failure: Self.failed)
        case .unknown:
            let unknown = SSHUnknownHostKey(entryName: entryName, key: key)
            switch checking {
            case .strict: return .refuse(notices: [.unknownRefused(unknown)], failure: Self.failed)
            case .acceptNew: return .record(notice: .added(entryName: entryName, key: key))
            case .ask: return .ask(unknown)
            }
        }
    }

    /// The decision after the person answered `.ask`: yes adds the key; no, or no one to ask,
    /// refuses it.
    package func answered(_ answer: Bool?) -> Action {
        answer == true ? .record(notice: .added(entryName: entryName, key: key)) : .refuse(notices: [], failure: Self.failed)
    }
}
