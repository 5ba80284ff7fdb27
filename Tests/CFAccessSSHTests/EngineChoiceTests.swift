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

/// Which SSH library runs a session (issue 16 point 15): libssh, or libssh2 for a terminal while
/// libssh cannot send terminal modes, unless RSA will be needed (libssh2 1.10 has no rsa-sha2).
@Suite("which engine runs a session")
struct EngineChoiceTests {
    private let account = SSHAccount(user: "me", host: "ssh.example.com")
    /// Whether the linked libssh2 refuses RSA and libssh cannot send modes: the case the rules are for.
    private let split = !SSHEngineKind.libssh.sendsTerminalModes

    @Test("without a terminal libssh; with one libssh2 while libssh cannot send modes; a chosen engine wins")
    func choice() {
        var configuration = SSHSession.Configuration(hostKeyDelegate: KnownAlgorithms(algorithms: nil))
        #expect(SSHEngineKind.choice(for: configuration) == .libssh)
        configuration.opensTerminal = true
        #expect(SSHEngineKind.choice(for: configuration) == (split ? .libssh2 : .libssh))
        configuration.engine = .libssh
        #expect(SSHEngineKind.choice(for: configuration) == .libssh)
        configuration.opensTerminal = false
        configuration.engine = .libssh2
        #expect(SSHEngineKind.choice(for: configuration) == .libssh2)
        #expect(SSHEngineKind.libssh2.sendsTerminalModes)
    }

    @Test("a terminal session that will need RSA runs on libssh, with the reason: RSA-only known host keys, an RSA key offered first (an identity file, the agent's); RSA later in the order or not offered (IdentitiesOnly) leaves it on libssh2")
    func rsaForeseen() async throws {
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
                                     prompts: ScriptedPrompts(), logger: MemoryLog().logger, features: .linked) { _ in agent }
        }
        func engine(known: [String]?, _ authentication: SSHOrderedAuthentication) async -> (SSHEngineKind, String?) {
            let configuration = SSHSession.Configuration(hostKeyDelegate: KnownAlgorithms(algorithms: known))
            let (kind, reason) = await SSHEngineKind.forTerminal(configuration: configuration, authentication: authentication)
            return (kind, reason)
        }
        let ed25519 = AuthenticationOrderTests.blob(4)
        let neutral = login(files: [plainFile], agent: [ed25519])

        let plain = await engine(known: ["ssh-ed25519", "rsa-sha2-512"], neutral)
        #expect(plain.0 == (split ? .libssh2 : .libssh) && plain.1 == nil, "\(plain)")
        let unknownHost = await engine(known: nil, neutral)
        #expect(unknownHost.0 == (split ? .libssh2 : .libssh) && unknownHost.1 == nil)

        let rsaHost = await engine(known: ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"], neutral)
        let rsaFileKey = await engine(known: nil, login(files: [rsaFile], agent: [ed25519]))
        let rsaAgentKey = await engine(known: nil, login(files: [], agent: [rsa, ed25519]))
        // RSA later in the order: libssh2 first (the login ends at the RSA key and the tool connects again).
        let rsaLater = await engine(known: nil, login(files: [plainFile], agent: [ed25519, rsa]))
        let onlyNamed = await engine(known: nil, login(files: [plainFile], agent: [rsa], identitiesOnly: true))
        #expect(rsaHost.0 == .libssh && rsaFileKey.0 == .libssh && rsaAgentKey.0 == .libssh)
        #expect(rsaLater.0 == (split ? .libssh2 : .libssh) && rsaLater.1 == nil, "\(rsaLater)")
        #expect(onlyNamed.0 == (split ? .libssh2 : .libssh) && onlyNamed.1 == nil, "the agent's keys are not offered: \(onlyNamed)")
        if split {
            #expect(rsaHost.1 == "the host's known key is an RSA key, which \(SSHEngineKind.libssh2.features.version) cannot verify")
            #expect(rsaFileKey.1 == "the first key to offer is an RSA key, which \(SSHEngineKind.libssh2.features.version) cannot sign with")
            #expect(rsaAgentKey.1 == rsaFileKey.1)
        } else {
            #expect(rsaHost.1 == nil && rsaFileKey.1 == nil && rsaAgentKey.1 == nil)
        }
    }

    @Test("what each engine says of RSA: libssh signs rsa-sha2; libssh2 1.10 cannot, and the limitation names it and the way out")
    func features() {
        #expect(SSHEngineKind.libssh.features.rsaSHA2 && SSHEngineKind.libssh.features.rsaLimitation == nil)
        #expect(SSHEngineKind.libssh.features.version.hasPrefix("libssh 0."))
        let libssh2 = SSHEngineKind.libssh2.features
        #expect(libssh2.version.hasPrefix("libssh2 1."))
        if libssh2.rsaSHA2 {
            #expect(libssh2.rsaLimitation == nil)
        } else {
            #expect(libssh2.rsaLimitation?.contains("which \(libssh2.version) cannot make") == true)
            #expect(libssh2.rsaLimitation?.hasSuffix("use an ed25519 or ECDSA key, or ssh with ProxyCommand") == true)
            let rsaOnly = SSHFailure(.protocolError, "The SSH server has only an RSA host key (it offers rsa-sha2-512): " + libssh2.rsaLimitation!)
            #expect(SSHEngineKind.libssh2.failedForRSA(rsaOnly))
            #expect(!SSHEngineKind.libssh.failedForRSA(rsaOnly), "libssh has no RSA limitation to fail for")
        }
        #expect(!SSHEngineKind.libssh2.failedForRSA(SSHFailure(.authenticationFailed, "Authentication failed")))
    }
}
