import FoundationEssentials

/// The SSH libraries a session can run on: libssh, or libssh2 for a session that opens a
/// terminal while the linked libssh cannot send terminal modes (see ``SSHSession``).
package enum SSHEngineKind: String, Sendable, Equatable, CaseIterable {
    case libssh
    case libssh2

    /// The engine for a session of `configuration`: its ``SSHSession/Configuration/engine`` if
    /// set; otherwise libssh, unless the session opens a terminal and libssh cannot send its
    /// modes.
    package static func choice(for configuration: SSHSession.Configuration) -> SSHEngineKind {
        if let engine = configuration.engine { return engine }
        return configuration.opensTerminal && !SSHEngineKind.libssh.sendsTerminalModes ? .libssh2 : .libssh
    }

    /// The engine for a session that opens a terminal, with the reason when it is libssh although
    /// libssh cannot send the terminal's modes: libssh2 sends them, but where it cannot do RSA
    /// (before 1.11), a session that will need RSA runs on libssh. RSA is foreseen when the only
    /// host keys known for the host are RSA keys, or the first key `authentication` offers is an
    /// RSA key. A server found to have only an RSA host key, or an RSA key refused later in the
    /// order, is the caller's to retry on libssh (``failedForRSA(_:)``).
    package static func forTerminal(configuration: SSHSession.Configuration,
                                    authentication: SSHOrderedAuthentication?) async -> (SSHEngineKind, reason: String?) {
        var terminal = configuration
        terminal.opensTerminal = true
        let kind = choice(for: terminal)
        guard kind == .libssh2, configuration.engine == nil, SSHEngineKind.libssh2.features.rsaLimitation != nil else {
            return (kind, nil)
        }
        if let known = await configuration.hostKeyDelegate.preferredHostKeyAlgorithms(), !known.isEmpty,
           known.allSatisfy({ $0.hasPrefix("rsa-sha2-") || $0 == "ssh-rsa" }) {
            return (.libssh, "the host's known key is an RSA key, which \(SSHEngineKind.libssh2.features.version) cannot verify")
        }
        if await authentication?.firstKeyIsRSA() == true {
            return (.libssh, "the first key to offer is an RSA key, which \(SSHEngineKind.libssh2.features.version) cannot sign with")
        }
        return (kind, nil)
    }

    /// Whether `failure`, from a session on this engine, is the engine's RSA limitation (an
    /// RSA-only server, or an RSA key refused): libssh would get past it.
    package func failedForRSA(_ failure: SSHFailure) -> Bool {
        guard let limitation = features.rsaLimitation else { return false }
        return failure.message.contains(limitation)
    }

    /// What this engine, as linked, can do.
    package var features: SSHEngineFeatures {
        switch self {
        case .libssh: SSHEngineFeatures.libssh
        case .libssh2: SSHEngineFeatures.libssh2
        }
    }

    /// Whether a terminal request carries the terminal's modes: libssh 0.11 and later, and
    /// libssh2; libssh 0.10 (Debian 12) always sends an empty list, and the server keeps its
    /// defaults.
    package var sendsTerminalModes: Bool { features.sendsTerminalModes }
}

/// What an SSH engine, as linked, can do.
package struct SSHEngineFeatures: Sendable, Equatable {
    /// The engine and its version, e.g. `libssh 0.10.6`.
    package var version: String
    /// Whether RSA keys sign and verify with `rsa-sha2-256/512`; without it only with `ssh-rsa`
    /// (SHA-1), which OpenSSH ≥ 8.8 refuses by default.
    package var rsaSHA2: Bool
    /// Whether a terminal request carries the terminal's modes.
    package var sendsTerminalModes: Bool

    /// Features of an engine.
    package init(version: String, rsaSHA2: Bool, sendsTerminalModes: Bool = true) {
        self.version = version
        self.rsaSHA2 = rsaSHA2
        self.sendsTerminalModes = sendsTerminalModes
    }

    /// The engine of most sessions: libssh signs and verifies with rsa-sha2.
    package static let linked = SSHEngineFeatures.libssh

    /// Why RSA keys fail with this engine, naming the way out (nil when they do not).
    package var rsaLimitation: String? {
        guard !rsaSHA2 else { return nil }
        return "RSA keys need rsa-sha2-256/512 signatures, which \(version) cannot make (it signs and verifies RSA only as "
            + "ssh-rsa, SHA-1, which OpenSSH ≥ 8.8 refuses); use an ed25519 or ECDSA key, or ssh with ProxyCommand"
    }
}
