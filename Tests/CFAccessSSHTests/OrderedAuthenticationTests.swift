import AccessTestSupport
import AccessTransport
import CFAccessSSH
import Foundation
import Testing

/// ``SSHOrderedAuthentication`` (the ready delegate) driven through ``AuthenticationLoop`` against a
/// scripted server, with scripted prompts and an in-memory password store: no sshd.
@Suite("Ordered authentication with scripted prompts, store and server")
struct OrderedAuthenticationTests {
    private let account = SSHAccount(user: "me", host: "SSH.Example.com", port: 2222)
    private let all: SSHAuthenticationMethods = [.publicKey, .keyboardInteractive, .password]

    private func authenticate(_ delegate: SSHOrderedAuthentication, _ server: ScriptedServer,
                              methods: SSHAuthenticationMethods? = nil) async throws(SSHFailure) -> SSHAuthenticationOffer {
        try await AuthenticationLoop.run(availableMethods: methods ?? all, delegate: delegate) { offer throws(SSHFailure) in
            try server.attempt(offer)
        }
    }

    @Test("a typed password that worked is offered for saving and saved; the reconnect uses it without asking")
    func typedPasswordSavedAndRemembered() async throws {
        let prompts = ScriptedPrompts(passwords: ["wrong", "right"], saveAnswer: true)
        let store = MemoryPasswordStore()
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: store), prompts: prompts,
                                                logger: MemoryLog().logger)
        let server = ScriptedServer(accepting: [.password("right")])
        #expect(try await authenticate(delegate, server) == .password("right"))
        #expect(server.offers == [.keyboardInteractive, .keyboardInteractive, .keyboardInteractive, .password("wrong"), .password("right")])
        #expect(prompts.events == [
            .notice(.keyboardInteractiveRefused), .notice(.keyboardInteractiveRefused), .notice(.keyboardInteractiveRefused),
            .password(account), .notice(.passwordRefused(retrying: true)), .password(account),
            .saveOffer(account), .notice(.passwordSaved(account)),
        ])
        #expect(store.contents == [account: "right"])
        #expect(account.description == "me@ssh.example.com:2222")

        // The reconnect: the remembered password first, no question at all.
        let before = prompts.events.count
        #expect(try await authenticate(delegate, server) == .password("right"))
        #expect(server.offers.last == .password("right"))
        #expect(prompts.events.count == before)
    }

    @Test("a saved password is used before asking; refused, it is said and the person is asked")
    func savedPasswordFirst() async throws {
        let prompts = ScriptedPrompts(passwords: ["typed"], saveAnswer: false)
        let store = MemoryPasswordStore(saved: [account: "stale"])
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: store), prompts: prompts)
        let server = ScriptedServer(accepting: [.password("typed")])
        _ = try await authenticate(delegate, server, methods: [.password])
        #expect(server.offers == [.password("stale"), .password("typed")])
        #expect(prompts.events == [.notice(.savedPasswordRefused(account)), .password(account), .saveOffer(account)])
        #expect(store.contents == [account: "stale"], "declined: nothing saved")
    }

    @Test("a store that cannot be used: no save question, one notice saying why")
    func unavailableStore() async throws {
        let prompts = ScriptedPrompts(passwords: ["right"], saveAnswer: true)
        let store = MemoryPasswordStore(unavailable: "no D-Bus session bus")
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: store), prompts: prompts)
        _ = try await authenticate(delegate, ScriptedServer(accepting: [.password("right")]), methods: [.password])
        #expect(prompts.events == [.password(account), .notice(.passwordNotSavable(reason: "no D-Bus session bus"))])
    }

    @Test("-i keys, then the agent's keys (listed at the start), then the default keys that exist (encrypted ones after the passphrase), in that order")
    func keysInOrder() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let plain = directory.path + "/id_plain", locked = directory.path + "/id_ed25519", missing = directory.path + "/id_ecdsa"
        try PrivateKeyFixtures.openSSH(cipher: "none").write(toFile: plain, atomically: true, encoding: .utf8)
        try PrivateKeyFixtures.openSSH(cipher: "aes256-ctr").write(toFile: locked, atomically: true, encoding: .utf8)
        let prompts = ScriptedPrompts(passphrases: ["phrase"])
        let agentKey = AuthenticationOrderTests.blob(5)
        let listed = LockedBox<[String]>([])
        let delegate = SSHOrderedAuthentication(
            configuration: .init(account: account, agentSocketPath: "/run/agent", identityFiles: [plain],
                                 defaultIdentityFiles: [plain, locked, missing]),
            prompts: prompts, logger: MemoryLog().logger) { socket in
                listed.withLock { $0.append(socket) }
                return [agentKey]
            }
        let server = ScriptedServer(accepting: [.privateKey(path: locked, passphrase: "phrase")])
        #expect(try await authenticate(delegate, server) == .privateKey(path: locked, passphrase: "phrase"))
        #expect(server.offers == [.privateKey(path: plain, passphrase: nil), .agentKey(socketPath: "/run/agent", publicKey: agentKey),
                                  .privateKey(path: locked, passphrase: "phrase")])
        #expect(listed.withLock { $0 } == ["/run/agent"])
        #expect(prompts.events == [.passphrase(locked)])
    }

    @Test("PAM's Password round: answered from the store without a question; else typed, and offered for saving once it worked")
    func keyboardInteractivePassword() async throws {
        let round = SSHKeyboardPrompt(name: "", instruction: "", questions: [.init(text: "Password: ", echo: false)])
        /// A PAM server: one Password round; the right answer lets the user in.
        func pam(_ delegate: SSHOrderedAuthentication) async throws(SSHFailure) -> SSHAuthenticationOffer {
            try await AuthenticationLoop.run(availableMethods: [.keyboardInteractive], delegate: delegate) { offer throws(SSHFailure) in
                guard offer == .keyboardInteractive, await delegate.respond(to: round) == ["right"] else {
                    throw SSHFailure(.authenticationFailed, "Authentication failed")
                }
            }
        }
        let savedPrompts = ScriptedPrompts(saveAnswer: true)
        let filled = MemoryPasswordStore(saved: [account: "right"])
        _ = try await pam(SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: filled), prompts: savedPrompts))
        #expect(savedPrompts.events.isEmpty, "no question and no save offer: \(savedPrompts.events)")

        let typingPrompts = ScriptedPrompts(keyboard: [["right"]], saveAnswer: true)
        let empty = MemoryPasswordStore()
        _ = try await pam(SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: empty), prompts: typingPrompts))
        #expect(typingPrompts.events == [.keyboard(round), .saveOffer(account), .notice(.passwordSaved(account))])
        #expect(empty.contents == [account: "right"])
    }

    @Test("a store that hangs is said before the question (one notice), and the person is asked")
    func hangingStore() async throws {
        let prompts = ScriptedPrompts(passwords: ["right"])
        let store = MemoryPasswordStore(unavailable: "the Secret Service (D-Bus) did not answer within 3 s", timedOut: true)
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account, passwordStore: store), prompts: prompts)
        _ = try await authenticate(delegate, ScriptedServer(accepting: [.password("right")]), methods: [.password])
        #expect(prompts.events == [
            .notice(.passwordStoreUnavailable(reason: "the Secret Service (D-Bus) did not answer within 3 s")), .password(account),
            .notice(.passwordNotSavable(reason: "the Secret Service (D-Bus) did not answer within 3 s")),
        ])
    }

    @Test("keyboard-interactive rounds go to the prompts through the delegate")
    func keyboardInteractiveAnswers() async {
        let prompts = ScriptedPrompts(keyboard: [["otp-123"]])
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account), prompts: prompts)
        let round = SSHKeyboardPrompt(name: "", instruction: "Two factors", questions: [.init(text: "Code: ", echo: false)])
        #expect(await delegate.respond(to: round) == ["otp-123"])
        #expect(prompts.events == [.keyboard(round)])
    }

    @Test("secrets stay out of the log and of the offers' descriptions")
    func noSecretsLogged() async throws {
        let log = MemoryLog()
        let prompts = ScriptedPrompts(passphrases: ["phrase-SECRET"], passwords: ["password-SECRET"])
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let locked = directory.path + "/id_locked"
        try PrivateKeyFixtures.openSSH(cipher: "aes256-ctr").write(toFile: locked, atomically: true, encoding: .utf8)
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account, identityFiles: [locked]), prompts: prompts,
                                                logger: log.logger)
        _ = try await authenticate(delegate, ScriptedServer(accepting: [.password("password-SECRET")]))
        #expect(!log.lines.isEmpty)
        #expect(!log.lines.joined().contains("SECRET"), "\(log.lines)")
    }

    @Test("the loop: nil from the delegate fails with the methods; a lost connection ends it without asking the delegate again")
    func loopEnds() async {
        struct GiveUp: SSHUserAuthenticationDelegate {
            func nextAuthenticationOffer(availableMethods: SSHAuthenticationMethods,
                                         lastFailure: SSHFailure?) async throws(SSHFailure) -> SSHAuthenticationOffer? { nil }
        }
        await #expect(throws: SSHFailure(.authenticationFailed, "Authentication failed (the server offers: publickey, password)")) {
            _ = try await AuthenticationLoop.run(availableMethods: [.password, .publicKey], delegate: GiveUp()) { _ throws(SSHFailure) in }
        }

        let lost = SSHFailure(.connectionLost, "Connection lost")
        let prompts = ScriptedPrompts(passwords: ["a", "b"])
        let delegate = SSHOrderedAuthentication(configuration: .init(account: account), prompts: prompts)
        let server = ScriptedServer(accepting: [], failing: [.password("a"): lost])
        await #expect(throws: lost) { _ = try await authenticate(delegate, server, methods: [.password]) }
        #expect(server.offers == [.password("a")])
        #expect(prompts.events == [.password(account)])
    }
}

/// OpenSSH private key files with a chosen cipher (the body after the cipher name is filler:
/// only the header is read to tell whether the key is encrypted).
enum PrivateKeyFixtures {
    static func openSSH(cipher: String) -> String {
        func sshString(_ text: String) -> [UInt8] {
            let bytes = Array(text.utf8)
            let n = UInt32(bytes.count)
            return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + bytes
        }
        let blob = Array("openssh-key-v1\0".utf8) + sshString(cipher) + sshString(cipher == "none" ? "none" : "bcrypt")
            + [UInt8](repeating: 0x41, count: 64)
        let base64 = Data(blob).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN OPENSSH PRIVATE KEY-----\n\(base64)\n-----END OPENSSH PRIVATE KEY-----\n"
    }
}
