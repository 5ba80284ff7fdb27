import FoundationEssentials

/// The SSH libraries a session can run on: libssh, or libssh2 for a session that opens a
/// terminal while the linked libssh cannot send terminal modes (see ``SSHSession``).
package enum SSHEngineKind: String, Sendable, Equatable, CaseIterable {
    case libssh
    case libssh2

    /// The engine for a session of `configuration`, knowing nothing of the host or the keys
    /// (``SSHEngineChoice/decide(chosen:opensTerminal:knownHostKeyAlgorithms:keyAlgorithms:libssh:libssh2:)``).
    package static func choice(for configuration: SSHSession.Configuration) -> SSHEngineKind {
        SSHEngineChoice.decide(chosen: configuration.engine, opensTerminal: configuration.opensTerminal,
                               forwardsAgent: configuration.agentForwarding != nil).kind
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
    /// Whether the server's `auth-agent@openssh.com` channels can be accepted (agent forwarding).
    package var acceptsAgentChannels: Bool
    /// Whether the server's pre-login banner reaches us (libssh2 1.10 drops it).
    package var passesBanner: Bool

    /// Features of an engine.
    package init(version: String, rsaSHA2: Bool, sendsTerminalModes: Bool = true, acceptsAgentChannels: Bool = true,
                 passesBanner: Bool = true) {
        self.version = version
        self.rsaSHA2 = rsaSHA2
        self.sendsTerminalModes = sendsTerminalModes
        self.acceptsAgentChannels = acceptsAgentChannels
        self.passesBanner = passesBanner
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

/// Which engine runs a session, and why: one pure function of what is known before the login.
package struct SSHEngineChoice: Sendable, Equatable {
    /// Why a session runs on its engine.
    package enum Reason: Sendable, Equatable {
        /// The caller named the engine.
        case chosen
        /// No terminal: libssh runs every session without one.
        case noTerminal
        /// The linked libssh sends terminal modes (0.11 and later): it runs terminals too.
        case libsshSendsModes
        /// A terminal, whose modes only libssh2 sends.
        case terminalModes
        /// A terminal, but the host's known keys are RSA keys, which libssh2 cannot verify.
        case rsaHostKey
        /// A terminal, but a key to offer is an RSA key, which libssh2 cannot sign with.
        case rsaKey
        /// A terminal, but the server turned out to need RSA (see ``SSHFailure/engineLimitation``).
        case rsaServer
        /// A terminal, but the agent is forwarded, whose channels libssh2 cannot accept.
        case agentForwarding
    }

    /// The engine.
    package var kind: SSHEngineKind
    /// Why.
    package var reason: Reason

    /// A choice.
    package init(_ kind: SSHEngineKind, _ reason: Reason) {
        self.kind = kind
        self.reason = reason
    }

    /// The engine for a session: `chosen` if given; libssh without a terminal, or when it sends
    /// terminal modes; otherwise libssh2, which sends them, unless the session will need RSA
    /// where libssh2 has no rsa-sha2: the host's known keys (`knownHostKeyAlgorithms`) are all
    /// RSA, or a key to offer (`keyAlgorithms`, e.g. `ssh-rsa`, `ssh-ed25519`) is RSA. Then
    /// libssh, without the modes: decided before the login, so no key is offered twice. A
    /// session that forwards the agent (`forwardsAgent`) runs on libssh when libssh2 cannot
    /// accept the agent's channels: the agent over the modes, since the user asked for it by name.
    package static func decide(chosen: SSHEngineKind? = nil, opensTerminal: Bool, forwardsAgent: Bool = false,
                               knownHostKeyAlgorithms: [String]? = nil, keyAlgorithms: [String] = [],
                               libssh: SSHEngineFeatures = .libssh, libssh2: SSHEngineFeatures = .libssh2) -> SSHEngineChoice {
        if let chosen { return SSHEngineChoice(chosen, .chosen) }
        guard opensTerminal else { return SSHEngineChoice(.libssh, .noTerminal) }
        if libssh.sendsTerminalModes { return SSHEngineChoice(.libssh, .libsshSendsModes) }
        if forwardsAgent && !libssh2.acceptsAgentChannels { return SSHEngineChoice(.libssh, .agentForwarding) }
        if !libssh2.rsaSHA2 {
            let rsa: (String) -> Bool = { $0 == "ssh-rsa" || $0.hasPrefix("rsa-sha2-") }
            if let known = knownHostKeyAlgorithms, !known.isEmpty, known.allSatisfy(rsa) {
                return SSHEngineChoice(.libssh, .rsaHostKey)
            }
            if keyAlgorithms.contains(where: rsa) { return SSHEngineChoice(.libssh, .rsaKey) }
        }
        return SSHEngineChoice(.libssh2, .terminalModes)
    }

    /// The choice for a session of `configuration` that `authentication` logs in: the host's
    /// known key types from the host-key delegate, the keys from the authentication order.
    package static func forSession(configuration: SSHSession.Configuration,
                                   authentication: SSHOrderedAuthentication?) async -> SSHEngineChoice {
        let forwardsAgent = configuration.agentForwarding != nil
        let quick = decide(chosen: configuration.engine, opensTerminal: configuration.opensTerminal, forwardsAgent: forwardsAgent)
        guard quick.kind == .libssh2, quick.reason != .chosen else { return quick }
        let known = await configuration.hostKeyDelegate.preferredHostKeyAlgorithms()
        let keys = await authentication?.keyAlgorithms() ?? []
        return decide(chosen: configuration.engine, opensTerminal: configuration.opensTerminal, forwardsAgent: forwardsAgent,
                      knownHostKeyAlgorithms: known, keyAlgorithms: keys)
    }

    /// What to log: the engine and why, in words.
    package var explanation: String {
        let version = kind.features.version
        switch reason {
        case .chosen: return "\(version), as chosen"
        case .noTerminal: return "\(version): no terminal"
        case .libsshSendsModes: return "\(version): it sends terminal modes"
        case .terminalModes: return "\(version): it sends the terminal's modes, which \(SSHEngineFeatures.libssh.version) cannot"
        case .rsaHostKey: return "\(version): the host's known key is an RSA key, which \(SSHEngineFeatures.libssh2.version) cannot verify"
        case .rsaKey: return "\(version): a key to offer is an RSA key, which \(SSHEngineFeatures.libssh2.version) cannot sign with"
        case .rsaServer: return "\(version): the server needs RSA, which \(SSHEngineFeatures.libssh2.version) cannot do"
        case .agentForwarding:
            return "\(version): the agent is forwarded, whose channels \(SSHEngineFeatures.libssh2.version) cannot accept"
        }
    }
}
