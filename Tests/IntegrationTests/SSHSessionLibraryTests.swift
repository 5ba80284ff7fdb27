import AccessTransport
import CFAccessSSH
import CFAccessTCP
import Foundation
import Logging
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let quietLogger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// A host-key delegate that trusts every key and keeps them, for tests that check the key
/// themselves.
private final class RecordingHostKeys: SSHHostKeyDelegate {
    let seen = LockedBox<[SSHHostKey]>([])

    func validateHostKey(_ hostKey: SSHHostKey) async throws(SSHFailure) {
        seen.withLock { $0.append(hostKey) }
    }
}

/// Prompts that type passwords from a list and accept the save offer, recording what they were
/// asked and told.
private final class TypingPrompts: SSHAuthenticationPrompts {
    private let passwords: LockedBox<[String]>
    let asked = LockedBox<[String]>([])
    let canAsk = true

    init(passwords: [String]) { self.passwords = LockedBox(passwords) }

    func passphrase(forKey keyPath: String) async -> String? { asked.withLock { $0.append("passphrase") }; return nil }
    func password(for account: SSHAccount) async -> String? {
        asked.withLock { $0.append("password") }
        return passwords.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }
    func respond(to round: SSHKeyboardPrompt) async -> [String]? { nil }
    func confirmSavingPassword(for account: SSHAccount) async -> Bool { asked.withLock { $0.append("save?") }; return true }
    func show(_ notice: SSHAuthenticationNotice) async { asked.withLock { $0.append(notice.message) } }
}

/// Saved passwords in memory.
private final class MemoryPasswords: SSHPasswordStore {
    let saved = LockedBox<[SSHAccount: String]>([:])
    func password(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> String? { saved.withLock { $0[account] } }
    func save(_ password: String, for account: SSHAccount) async throws(SSHPasswordStoreFailure) { saved.withLock { $0[account] = password } }
    func remove(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> Bool { saved.withLock { $0.removeValue(forKey: account) != nil } }
}

/// The embedded SSH library (`CFAccessSSH.SSHSession`) over a tunnel stream, against the
/// emulator and a real sshd (issue 10, point 8).
@Suite("SSHSession library over a tunnel stream", .serialized, .ownThreads)
struct SSHSessionLibraryTests {
    private func openSession(_ sshd: SSHDFixture, _ edge: EdgeFixture, hostKeys: any SSHHostKeyDelegate = RecordingHostKeys(),
                             keepalive: SSHKeepalive = SSHKeepalive(), engine: SSHEngineKind = .libssh,
                             opensTerminal: Bool = false) async throws -> (AccessTunnel, SSHSession) {
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: edge.certs.caFile.path, retry: .never)
        let tunnel = AccessTunnel(options: options, logger: quietLogger)
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token))
        var configuration = SSHSession.Configuration(hostKeyDelegate: hostKeys, keepalive: keepalive, opensTerminal: opensTerminal)
        if !opensTerminal { configuration.engine = engine }
        let session = try SSHSession(stream: stream, configuration: configuration)
        #expect(session.engineKind == (opensTerminal ? SSHEngineKind.choice(for: configuration) : engine))
        return (tunnel, session)
    }

    @Test("handshake, known_hosts, password auth (wrong then right), exec with output, stderr, stdin and exit status", arguments: SSHEngineKind.allCases)
    func passwordAndExec(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let recorder = RecordingHostKeys()
        let (tunnel, ssh) = try await openSession(sshd, edge, hostKeys: recorder, engine: engine)
        let key = try await ssh.handshake()
        #expect(recorder.seen.withLock { $0 } == [key], "the delegate was not asked about the host key")
        #expect(ssh.hostKey == key)
        #expect(key.algorithm == "ssh-ed25519")
        #expect(key.fingerprint == (try fingerprint(of: sshd.hostKeyPublicLine)))
        #expect(key.knownHostsText == sshd.hostKeyPublicLine)

        let directory = try makeTempDir("cfat-kh")
        defer { try? FileManager.default.removeItem(at: directory) }
        let knownHosts = KnownHosts(path: directory.appendingPathComponent("known_hosts").path)
        #expect(try knownHosts.check(host: testHost, port: 22, key: key) == .unknown)
        try knownHosts.add(host: testHost, port: 22, key: key)
        #expect(try knownHosts.check(host: testHost, port: 22, key: key) == .match)
        #expect(try knownHosts.check(host: testHost, port: 2222, key: key) == .unknown)
        let forged = SSHHostKey(blob: key.blob.dropLast() + [key.blob.last! ^ 1], sha256: key.sha256)
        #expect(try knownHosts.check(host: testHost, port: 22, key: forged) == .mismatch)

        let methods = try await ssh.authenticationMethods(user: sshd.passwordUser)
        #expect(methods.contains(.password))
        let refused = await #expect(throws: SSHFailure.self) {
            try await ssh.authenticate(user: sshd.passwordUser, offer: .password("wrong"))
        }
        #expect(refused?.kind == .authenticationFailed && refused?.message == "Authentication failed")
        try await ssh.authenticate(user: sshd.passwordUser, offer: .password(sshd.password))
        #expect(await ssh.isAuthenticated)

        let result = try await ssh.exec("printf out; printf err >&2; exit 5")
        #expect(String(decoding: result.standardOutput, as: UTF8.self) == "out")
        #expect(String(decoding: result.standardError, as: UTF8.self) == "err")
        #expect(result.exitStatus == 5)
        let counted = try await ssh.exec("wc -c", input: Data(repeating: 7, count: 123_457))
        #expect(String(decoding: counted.standardOutput, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) == "123457")
        #expect(counted.exitStatus == 0)

        await ssh.disconnect(description: "library test done")
        await tunnel.disconnect()
        let deadline = Date(timeIntervalSinceNow: 60)
        while !sshd.logText.contains("library test done") && Date() < deadline { try await Task.sleep(nanoseconds: 100_000_000) }
        #expect(sshd.logText.contains("library test done"), "sshd did not log the disconnect message")
    }

    @Test("withSSHSession: handshake, login and body, then always a disconnect: after a result, after the body's failure, after a refused login (each seen by sshd)")
    func withSession() async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        struct OnePassword: SSHUserAuthenticationDelegate {
            let password: String
            func nextAuthenticationOffer(availableMethods: SSHAuthenticationMethods,
                                         lastFailure: SSHFailure?) async throws(SSHFailure) -> SSHAuthenticationOffer? {
                lastFailure == nil ? .password(password) : nil
            }
        }
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: edge.certs.caFile.path, retry: .never)
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        let configuration = SSHSession.Configuration(hostKeyDelegate: RecordingHostKeys())
        let kept = LockedBox<SSHSession?>(nil)
        let output = try await withAccessTunnel(options: options, logger: quietLogger) { tunnel in
            let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token))
            return try await withSSHSession(stream: stream, configuration: configuration, user: sshd.passwordUser,
                                            authentication: OnePassword(password: sshd.password)) { ssh throws(SSHFailure) in
                kept.withLock { $0 = ssh }
                return try await ssh.exec("echo inside").standardOutput
            }
        }
        #expect(String(decoding: output, as: UTF8.self) == "inside\n")
        let after = await #expect(throws: SSHFailure.self) { try await kept.withLock { $0 }!.exec("true") }
        #expect(after?.kind == .connectionLost, "the session was disconnected: \(String(describing: after))")

        let thrown = await #expect(throws: SSHFailure.self) {
            try await withAccessTunnel(options: options, logger: quietLogger) { tunnel in
                let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token))
                _ = try await withSSHSession(stream: stream, configuration: configuration, user: sshd.passwordUser,
                                             authentication: OnePassword(password: sshd.password)) { ssh throws(SSHFailure) in
                    kept.withLock { $0 = ssh }
                    throw SSHFailure(.configuration, "the body gave up")
                }
            }
        }
        #expect(thrown?.message == "the body gave up")
        let afterThrow = await #expect(throws: SSHFailure.self) { try await kept.withLock { $0 }!.exec("true") }
        #expect(afterThrow?.kind == .connectionLost)

        let refused = await #expect(throws: SSHFailure.self) {
            try await withAccessTunnel(options: options, logger: quietLogger) { tunnel in
                let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token))
                _ = try await withSSHSession(stream: stream, configuration: configuration, user: sshd.passwordUser,
                                             authentication: OnePassword(password: "wrong")) { _ throws(SSHFailure) in
                    Issue.record("the body ran without a login")
                }
            }
        }
        #expect(refused?.kind == .authenticationFailed, "\(String(describing: refused))")
        let deadline = Date(timeIntervalSinceNow: 60)
        while sshd.logText.components(separatedBy: "disconnected by user").count < 4 && Date() < deadline {
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        #expect(sshd.logText.components(separatedBy: "disconnected by user").count >= 3, "\(sshd.logText)")
    }

    @Test("key file and agent authentication; an interactive channel sees its size, a resize and exits with a status", arguments: SSHEngineKind.allCases)
    func keyAgentAndInteractive(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        do {
            let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
            _ = try await ssh.handshake()
            try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
            let channel = try await ssh.openShell(terminal: SSHTerminal(term: "vt100", columns: 90, rows: 20))
            let output = LockedBox(Data())
            let running = Task { await channel.run { data in output.withLock { $0.append(data) } } }
            // Sleeps with Task.sleep: a blocked thread of the cooperative pool could starve the tunnels.
            func waitForOutput(_ text: String) async throws {
                let deadline = Date(timeIntervalSinceNow: 120)
                while !String(decoding: output.withLock { $0 }, as: UTF8.self).contains(text) {
                    guard Date() < deadline else {
                        throw FixtureError("no \"\(text)\" in: \(String(decoding: output.withLock { $0 }, as: UTF8.self))")
                    }
                    try await Task.sleep(nanoseconds: 50_000_000)
                }
            }
            channel.write(Data("stty size; echo \"t=$TERM\"\n".utf8))
            try await waitForOutput("20 90")
            try await waitForOutput("t=vt100")
            channel.resize(columns: 100, rows: 33)
            channel.write(Data("stty size\n".utf8))
            try await waitForOutput("33 100")
            channel.write(Data("exit 7\n".utf8))
            #expect(await running.value == .exited(7))
            await ssh.disconnect()
            await tunnel.disconnect()
        }
        do {
            let agent = try AgentFixture(key: sshd.clientKeyPath)
            let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
            _ = try await ssh.handshake()
            try await ssh.authenticate(user: sshd.keyUser, offer: .agent(socketPath: agent.socket))
            let result = try await ssh.exec("whoami")
            #expect(String(decoding: result.standardOutput, as: UTF8.self) == "\(sshd.keyUser)\n")
            await ssh.disconnect()
            await tunnel.disconnect()
        }
    }

    @Test("the host-key delegate is required: a key strict known_hosts does not name ends the session before any credential", arguments: SSHEngineKind.allCases)
    func refusedHostKeyStopsEverything(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let directory = try makeTempDir("cfat-strict")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("known_hosts").path
        let strict = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: file), host: testHost, checking: .strict))
        let (tunnel, ssh) = try await openSession(sshd, edge, hostKeys: strict, engine: engine)
        await #expect(throws: SSHFailure(.hostKeyRejected, "Host key verification failed.")) { try await ssh.handshake() }
        #expect(ssh.hostKey == nil)
        do {
            try await ssh.authenticate(user: sshd.passwordUser, offer: .password(sshd.password))
            Issue.record("a password went out after the host key was refused")
        } catch {
            #expect(error.kind == .configuration, "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: file), "strict checking wrote known_hosts")
        await ssh.disconnect()
        await tunnel.disconnect()
    }

    @Test("ordered authentication against sshd: typed passwords (wrong, right), the save offer, then a second connection logs in with the remembered one without asking", arguments: SSHEngineKind.allCases)
    func orderedAuthentication(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let prompts = TypingPrompts(passwords: ["not-the-password", sshd.password])
        let store = MemoryPasswords()
        let account = SSHAccount(user: sshd.passwordUser, host: testHost)
        let login = SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: store), prompts: prompts,
                                             logger: quietLogger)
        for round in 1...2 {
            let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
            try await ssh.handshake()
            let used = try await ssh.authenticate(user: sshd.passwordUser, delegate: login)
            #expect(used == .password(sshd.password), "round \(round)")
            let result = try await ssh.exec("whoami")
            #expect(String(decoding: result.standardOutput, as: UTF8.self) == "\(sshd.passwordUser)\n")
            await ssh.disconnect()
            await tunnel.disconnect()
        }
        #expect(prompts.asked.withLock { $0 } == ["password", "Authentication failed, please try again.", "password", "save?",
                                                  "Password saved for \(account)."])
        #expect(store.saved.withLock { $0 } == [account: sshd.password])
    }

    @Test("the SSH example target runs a command over a tunnel stream and exits with its status")
    func exampleTarget() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let directory = try makeTempDir("cfat-example")
        defer { try? FileManager.default.removeItem(at: directory) }
        let knownHosts = directory.appendingPathComponent("known_hosts")
        try "\(testHost) \(sshd.hostKeyPublicLine)\n".write(to: knownHosts, atomically: true, encoding: .utf8)
        let result = try run(try TestPaths.binary("cf-access-ssh-example"),
                             [testHost, sshd.keyUser, sshd.clientKeyPath.path, knownHosts.path,
                              "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path,
                              "--", "echo example-ssh; exit 9"],
                             env: ["TUNNEL_SERVICE_TOKEN_ID": testTokenID, "TUNNEL_SERVICE_TOKEN_SECRET": testTokenSecret],
                             timeout: 60)
        #expect(result.status == 9, "\(result.stderr)")
        #expect(result.stdout == "example-ssh\n")
    }

    @Test("SSH keepalives go out while a channel is idle (interval 1 s here, 2 s for libssh2), and none with the interval 0", arguments: SSHEngineKind.allCases)
    func keepalives(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        for interval in [1, 0] {
            let (tunnel, ssh) = try await openSession(sshd, edge, keepalive: SSHKeepalive(interval: .seconds(interval)), engine: engine)
            _ = try await ssh.handshake()
            try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
            let started = sshd.logText.components(separatedBy: "Starting session: command").count
            let quiet = Task { try await ssh.exec("sleep 10") }
            // Measure only once the command runs and its start-up packets are long gone.
            let deadline = Date(timeIntervalSinceNow: 120)
            while sshd.logText.components(separatedBy: "Starting session: command").count == started && Date() < deadline {
                try await Task.sleep(nanoseconds: 50_000_000)
            }
            try await Task.sleep(nanoseconds: 1_500_000_000)
            let before = try edge.stats(host: testHost).binaryFramesIn
            try await Task.sleep(nanoseconds: 6_000_000_000)
            let after = try edge.stats(host: testHost).binaryFramesIn
            if interval > 0 {
                #expect(after - before >= 2, "no keepalives went out in 6 idle seconds")
            } else {
                #expect(after == before, "something went out on an idle channel without keepalives")
            }
            #expect(try await quiet.value.exitStatus == 0)
            await ssh.disconnect()
            await tunnel.disconnect()
        }
    }

    @Test("a connection that goes silent (the edge frozen with SIGSTOP, no socket error) is found dead by unanswered keepalives", arguments: SSHEngineKind.allCases)
    func silentConnectionIsLost(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let (tunnel, ssh) = try await openSession(sshd, edge, keepalive: SSHKeepalive(interval: .seconds(1)), engine: engine)
        _ = try await ssh.handshake()
        try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
        let started = Date()
        let quiet = Task { () -> SSHChannelEnd in
            do { return try await ssh.exec("sleep 25").end } catch let failure as SSHFailure { return .lost(failure) } catch { return .closed }
        }
        try await Task.sleep(nanoseconds: 3_000_000_000)
        kill(edge.process.pid, SIGSTOP)
        let stopped = Date()
        defer { kill(edge.process.pid, SIGCONT) }
        let end = await quiet.value
        guard case .lost(let failure) = end else {
            Issue.record("the silent connection was not found dead: \(end)")
            return
        }
        #expect(failure.kind == .connectionLost)
        #expect(failure.message.hasPrefix("Connection lost: no answer to keepalives"), "\(failure.message)")
        // Keepalives every 2 s (libssh2's least): dead after 7 s without a byte, not much later.
        #expect(Date().timeIntervalSince(stopped) >= 3, "found dead before the keepalives could go unanswered")
        #expect(Date().timeIntervalSince(started) < 40, "the dead connection took too long to notice")
        kill(edge.process.pid, SIGCONT)
        await ssh.disconnect()
        await tunnel.disconnect()
    }

    @Test("a session that opens a terminal sends the terminal's modes with the request (on libssh2 while libssh is older than 0.11); another one runs on libssh")
    func terminalModesSent() async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let plain = try await openSession(sshd, edge)
        #expect(plain.1.engineKind == .libssh)
        #expect(plain.1.terminalModesSent == SSHEngineKind.libssh.sendsTerminalModes)
        await plain.1.disconnect()
        await plain.0.disconnect()

        let (tunnel, ssh) = try await openSession(sshd, edge, opensTerminal: true)
        #expect(ssh.terminalModesSent)
        #expect(ssh.engineName.hasPrefix(SSHEngineKind.libssh.sendsTerminalModes ? "libssh " : "libssh2 "), "\(ssh.engineName)")
        _ = try await ssh.handshake()
        try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
        // VINTR (1) ^X, VERASE (3) ^H, IXON (38) off: each unlike a new pty's defaults.
        let modes = SSHTerminalModes([.init(opcode: 1, value: 0x18), .init(opcode: 3, value: 0x08), .init(opcode: 38, value: 0)])
        let channel = try await ssh.openShell(terminal: SSHTerminal(term: "vt100", columns: 80, rows: 24, modes: modes),
                                              command: "stty -a; exit 3")
        let output = LockedBox(Data())
        #expect(await channel.run { data in output.withLock { $0.append(data) } } == .exited(3))
        let text = String(decoding: output.withLock { $0 }, as: UTF8.self)
        #expect(text.contains("intr = ^X"), "\(text)")
        #expect(text.contains("erase = ^H"), "\(text)")
        #expect(text.contains("-ixon"), "\(text)")
        await ssh.disconnect()
        await tunnel.disconnect()
    }

    @Test("the libssh2 engine (1.10: RSA only with SHA-1) says why a server with only an RSA host key cannot be reached; libssh reaches it")
    func rsaOnlyServerPerEngine() async throws {
        let sshd = try SSHDFixture(hostKeyType: "rsa")
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        for engine in SSHEngineKind.allCases {
            let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
            do {
                let key = try await ssh.handshake()
                #expect(engine.features.rsaSHA2, "\(engine) reached an RSA-only server without rsa-sha2")
                #expect(key.algorithm == "ssh-rsa")
            } catch {
                #expect(!engine.features.rsaSHA2, "\(engine): \(error)")
                #expect(error.message.contains("The SSH server has only an RSA host key (it offers rsa-sha2-512,rsa-sha2-256"), "\(error)")
                #expect(error.message.contains("RSA keys need rsa-sha2-256/512 signatures, which \(engine.features.version) cannot make"))
            }
            await ssh.disconnect()
            await tunnel.disconnect()
        }
    }
}
