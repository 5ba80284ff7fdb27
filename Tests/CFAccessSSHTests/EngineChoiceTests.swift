import AccessTestSupport
import CFAccessSSH
import Foundation
import Testing

/// A host-key delegate that knows `algorithms` for the host (what known_hosts would say).
private struct KnownAlgorithms: SSHHostKeyDelegate {
    let algorithms: [String]?
    func validateHostKey(_ hostKey: SSHHostKey) async throws(SSHFailure) {}
    func preferredHostKeyAlgorithms() async -> [String]? { algorithms }
}

/// Which SSH library runs a session (issue 16 point 15, issue 25): libssh, or libssh2 for a
/// terminal while libssh cannot send terminal modes, unless RSA will be needed (libssh2 1.10 has
/// no rsa-sha2). One pure function, decided before the login.
@Suite("which engine runs a session")
struct EngineChoiceTests {
    private let account = SSHAccount(user: "me", host: "ssh.example.com")
    /// Debian 12's pair: libssh 0.10 (no terminal modes), libssh2 1.10 (no rsa-sha2).
    private let oldLibssh = SSHEngineFeatures(version: "libssh 0.10.6", rsaSHA2: true, sendsTerminalModes: false)
    private let oldLibssh2 = SSHEngineFeatures(version: "libssh2 1.10.0", rsaSHA2: false, acceptsAgentChannels: false)

    private func decide(chosen: SSHEngineKind? = nil, terminal: Bool = true, agent: Bool = false, known: [String]? = nil,
                        keys: [String] = [], libssh: SSHEngineFeatures? = nil, libssh2: SSHEngineFeatures? = nil) -> SSHEngineChoice {
        SSHEngineChoice.decide(chosen: chosen, opensTerminal: terminal, forwardsAgent: agent, knownHostKeyAlgorithms: known,
                               keyAlgorithms: keys, libssh: libssh ?? oldLibssh, libssh2: libssh2 ?? oldLibssh2)
    }

    @Test("agent forwarding: a terminal that forwards the agent runs on libssh (libssh2 cannot accept the agent's channels), which the linked libssh2 says of itself; a libssh2 that could would keep it")
    func agentForwarding() {
        #expect(decide(agent: true) == SSHEngineChoice(.libssh, .agentForwarding))
        #expect(decide(terminal: false, agent: true) == SSHEngineChoice(.libssh, .noTerminal))
        #expect(decide(chosen: .libssh2, agent: true) == SSHEngineChoice(.libssh2, .chosen))
        let accepting = SSHEngineFeatures(version: "libssh2 9.9", rsaSHA2: true, acceptsAgentChannels: true)
        #expect(decide(agent: true, libssh2: accepting) == SSHEngineChoice(.libssh2, .terminalModes))
        #expect(!SSHEngineFeatures.libssh2.acceptsAgentChannels && SSHEngineFeatures.libssh.acceptsAgentChannels)
        // The banner: libssh passes it on; libssh2 from 1.11 (libssh2_userauth_banner, looked up at run time).
        #expect(SSHEngineFeatures.libssh.passesBanner)
        #expect(SSHEngineFeatures.libssh2.passesBanner == (SSHEngineFeatures.libssh2.version >= "libssh2 1.11"))
        #expect(SSHEngineChoice(.libssh, .agentForwarding).explanation.contains("the agent is forwarded"))
    }

    @Test("the rule: a chosen engine wins; no terminal, libssh; a terminal, libssh2 for its modes unless RSA is foreseen (RSA-only known host keys, any RSA key to offer); a libssh that sends modes or a libssh2 with rsa-sha2 changes the answer")
    func rule() {
        #expect(decide(chosen: .libssh2, terminal: false) == SSHEngineChoice(.libssh2, .chosen))
        #expect(decide(chosen: .libssh, keys: ["ssh-ed25519"]) == SSHEngineChoice(.libssh, .chosen))
        #expect(decide(terminal: false, keys: ["ssh-rsa"]) == SSHEngineChoice(.libssh, .noTerminal))
        #expect(decide() == SSHEngineChoice(.libssh2, .terminalModes))
        #expect(decide(known: ["ssh-ed25519", "rsa-sha2-512"], keys: ["ssh-ed25519"]) == SSHEngineChoice(.libssh2, .terminalModes))
        #expect(decide(known: ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]) == SSHEngineChoice(.libssh, .rsaHostKey))
        #expect(decide(known: [], keys: []) == SSHEngineChoice(.libssh2, .terminalModes), "nothing known is not RSA-only")
        #expect(decide(keys: ["ssh-ed25519", "ssh-rsa"]) == SSHEngineChoice(.libssh, .rsaKey), "RSA anywhere in the list: no reconnect later")
        let sendsModes = SSHEngineFeatures(version: "libssh 0.11.1", rsaSHA2: true, sendsTerminalModes: true)
        #expect(decide(libssh: sendsModes) == SSHEngineChoice(.libssh, .libsshSendsModes))
        let newer2 = SSHEngineFeatures(version: "libssh2 1.11.0", rsaSHA2: true)
        #expect(decide(known: ["rsa-sha2-512"], keys: ["ssh-rsa"], libssh2: newer2) == SSHEngineChoice(.libssh2, .terminalModes))
        #expect(decide(keys: ["ssh-rsa"]).explanation.contains("cannot sign with"))
        #expect(SSHEngineChoice(.libssh2, .terminalModes).explanation.hasPrefix(SSHEngineFeatures.libssh2.version))
    }

    @Test("the linked libraries: a session's default engine follows the same rule")
    func linked() {
        var configuration = SSHSession.Configuration(hostKeyDelegate: KnownAlgorithms(algorithms: nil))
        #expect(SSHEngineKind.choice(for: configuration) == .libssh)
        configuration.opensTerminal = true
        #expect(SSHEngineKind.choice(for: configuration) == (SSHEngineKind.libssh.sendsTerminalModes ? .libssh : .libssh2))
        configuration.engine = .libssh
        #expect(SSHEngineKind.choice(for: configuration) == .libssh)
        #expect(SSHEngineKind.libssh2.sendsTerminalModes)
    }

    @Test("a session's choice reads the host's known key types and the keys the authentication offers (identity files, the agent's, IdentitiesOnly)")
    func forSession() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let rsaFile = directory.path + "/id_rsa", plainFile = directory.path + "/id_plain"
        try PrivateKeyFixtures.openSSH(cipher: "none").write(toFile: rsaFile, atomically: true, encoding: .utf8)
        try PrivateKeyFixtures.openSSH(cipher: "none").write(toFile: plainFile, atomically: true, encoding: .utf8)
        let rsa = AuthenticationOrderTests.blob(3, type: "ssh-rsa")
        try ("ssh-rsa " + Data(rsa).base64EncodedString() + " old\n").write(toFile: rsaFile + ".pub", atomically: true, encoding: .utf8)
        func login(files: [String], agent: [[UInt8]], identitiesOnly: Bool = false) -> SSHOrderedAuthentication {
            SSHOrderedAuthentication(configuration: .init(account: account, agentSocketPath: "/run/agent", identityFiles: files,
                                                          defaultIdentityFiles: [], identitiesOnly: identitiesOnly),
                                     prompts: ScriptedPrompts(), logger: MemoryLog().logger) { _ in agent }
        }
        let rsaAgent = await login(files: [], agent: [rsa]).keyAlgorithms()
        #expect(rsaAgent == ["ssh-rsa"])
        let fileFirst = await login(files: [rsaFile, plainFile], agent: [AuthenticationOrderTests.blob(4)]).keyAlgorithms()
        #expect(fileFirst == ["ssh-rsa", "ssh-ed25519"], "id_plain has no .pub: its type is not known")
        let onlyNamed = await login(files: [plainFile], agent: [rsa], identitiesOnly: true).keyAlgorithms()
        #expect(onlyNamed.isEmpty, "the agent's keys are not offered")

        var configuration = SSHSession.Configuration(hostKeyDelegate: KnownAlgorithms(algorithms: ["rsa-sha2-512", "ssh-rsa"]))
        configuration.opensTerminal = true
        let split = !SSHEngineKind.libssh.sendsTerminalModes && !SSHEngineKind.libssh2.features.rsaSHA2
        let rsaHost = await SSHEngineChoice.forSession(configuration: configuration, authentication: login(files: [], agent: []))
        #expect(rsaHost.kind == .libssh)
        if split { #expect(rsaHost.reason == .rsaHostKey) }
        configuration.hostKeyDelegate = KnownAlgorithms(algorithms: nil)
        let rsaKey = await SSHEngineChoice.forSession(configuration: configuration, authentication: login(files: [], agent: [rsa]))
        #expect(rsaKey.kind == .libssh)
        configuration.opensTerminal = false
        let plain = await SSHEngineChoice.forSession(configuration: configuration, authentication: login(files: [], agent: [rsa]))
        #expect(plain == SSHEngineChoice(.libssh, .noTerminal))
    }

    @Test("what each engine says of RSA: libssh signs rsa-sha2; libssh2 1.10 cannot, and the limitation names it and the way out; an RSA-only server's key exchange failure carries it as a typed limitation")
    func features() {
        #expect(SSHEngineKind.libssh.features.rsaSHA2 && SSHEngineKind.libssh.features.rsaLimitation == nil)
        #expect(SSHEngineKind.libssh.features.version.hasPrefix("libssh 0."))
        #expect(SSHEngineKind.libssh2.features.version.hasPrefix("libssh2 1."))
        let limitation = oldLibssh2.rsaLimitation ?? ""
        #expect(limitation.contains("which libssh2 1.10.0 cannot make"))
        #expect(limitation.hasSuffix("use an ed25519 or ECDSA key, or ssh with ProxyCommand"))
        let rsaOnly = KexInit(kex: ["curve25519-sha256"], hostKey: ["rsa-sha2-512", "rsa-sha2-256"], ciphers: ["aes128-ctr"], macs: ["hmac-sha2-256"])
        let failure = KexDiagnosis.explain(server: rsaOnly, hostKeysOffered: ["ssh-ed25519"], kexOffered: ["curve25519-sha256"],
                                           ciphersOffered: ["aes128-ctr"], macsOffered: ["hmac-sha2-256"], features: oldLibssh2)
        #expect(failure?.engineLimitation == limitation && failure?.message.hasPrefix("The SSH server has only an RSA host key") == true)
        let other = KexDiagnosis.explain(server: rsaOnly, hostKeysOffered: ["rsa-sha2-512"], kexOffered: ["diffie-hellman-group14-sha256"],
                                         ciphersOffered: ["aes128-ctr"], macsOffered: ["hmac-sha2-256"], features: oldLibssh2)
        #expect(other?.engineLimitation == nil && other?.message.hasPrefix("No key-exchange method in common") == true)
    }
}
