import CFAccessSSH
import Testing

/// OpenSSH's authentication order as pure decisions (``AuthenticationOrder``): no session, no
/// prompts, each event fed by hand.
@Suite("Authentication order: agent, keys, keyboard-interactive, password")
struct AuthenticationOrderTests {
    private let account = SSHAccount(user: "me", host: "ssh.example.com")
    private let refused = SSHFailure(.authenticationFailed, "Authentication failed")
    private let all: SSHAuthenticationMethods = [.publicKey, .keyboardInteractive, .password]

    private let old = SSHEngineFeatures(version: "libssh2 1.10.0", rsaSHA2: false)
    /// A refusal of an RSA key by a session on an engine without rsa-sha2 (as the session says it).
    private var refusedUnderLimitation: SSHFailure {
        var failure = SSHFailure(.authenticationFailed, "Authentication failed")
        failure.engineLimitation = old.rsaLimitation
        return failure
    }

    private func order(agent: String? = "/run/agent.sock", keys: [AuthenticationOrder.KeyFile] = [],
                       identitiesOnly: Bool = false, canAsk: Bool = true, store: Bool = true) -> AuthenticationOrder {
        AuthenticationOrder(setup: .init(account: account, agentSocketPath: agent, keys: keys, identitiesOnly: identitiesOnly,
                                         canAsk: canAsk, hasPasswordStore: store))
    }

    /// A public key blob of `type` with `fill` as its key bytes.
    static func blob(_ fill: UInt8, type: String = "ssh-ed25519") -> [UInt8] {
        func sshString(_ bytes: [UInt8]) -> [UInt8] {
            let n = UInt32(bytes.count)
            return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + bytes
        }
        return sshString(Array(type.utf8)) + sshString([UInt8](repeating: fill, count: 32))
    }

    private let passwordRound = SSHKeyboardPrompt(name: "", instruction: "", questions: [.init(text: "Password: ", echo: false)])

    @Test("every method in OpenSSH's order: agent, each key (an encrypted one after its passphrase), the saved password looked up, keyboard-interactive ×3, saved password, typed passwords ×3, then the failure")
    func fullOrder() {
        let agentKey = Self.blob(1)
        var machine = order(keys: [.init(path: "/k/plain", encrypted: false, explicit: false),
                                   .init(path: "/k/locked", encrypted: true, explicit: false)])
        #expect(machine.next(.start(all, agentKeys: [agentKey]))
                == .init(notices: [], action: .offer(.agentKey(socketPath: "/run/agent.sock", publicKey: agentKey))))
        #expect(machine.next(.refused(refused)).action == .offer(.privateKey(path: "/k/plain", passphrase: nil)))
        #expect(machine.next(.refused(refused)).action == .askPassphrase(keyPath: "/k/locked"))
        #expect(machine.next(.passphrase("phrase")).action == .offer(.privateKey(path: "/k/locked", passphrase: "phrase")))
        #expect(machine.next(.refused(refused)) == .init(notices: [], action: .lookUpSavedPassword))
        #expect(machine.next(.savedPassword("saved")) == .init(notices: [], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .offer(.password("saved"))))
        #expect(machine.next(.refused(refused)) == .init(notices: [.savedPasswordRefused(account)], action: .askPassword))
        #expect(machine.next(.typedPassword("one")).action == .offer(.password("one")))
        #expect(machine.next(.refused(refused)) == .init(notices: [.passwordRefused(retrying: true)], action: .askPassword))
        #expect(machine.next(.typedPassword("two")).action == .offer(.password("two")))
        #expect(machine.next(.refused(refused)) == .init(notices: [.passwordRefused(retrying: true)], action: .askPassword))
        #expect(machine.next(.typedPassword("three")).action == .offer(.password("three")))
        let last = machine.next(.refused(refused))
        #expect(last.notices == [.passwordRefused(retrying: false)])
        #expect(last.action == .fail(SSHFailure(.authenticationFailed,
                                                "Authentication failed: me@ssh.example.com (the server offers: publickey, keyboard-interactive, password)")))
    }

    @Test("methods the server does not offer are skipped: keys need publickey, passwords need password")
    func onlyWhatTheServerOffers() {
        var passwordOnly = order(keys: [.init(path: "/k/plain", encrypted: false)])
        #expect(passwordOnly.next(.start([.password])).action == .lookUpSavedPassword)

        var keysOnly = order(agent: nil, keys: [.init(path: "/k/plain", encrypted: false)])
        #expect(keysOnly.next(.start([.publicKey])).action == .offer(.privateKey(path: "/k/plain", passphrase: nil)))
        #expect(keysOnly.next(.refused(refused)).action
                == .fail(SSHFailure(.authenticationFailed, "Authentication failed: me@ssh.example.com (the server offers: publickey)")))

        var none = order()
        #expect(none.next(.start([])).action
                == .fail(SSHFailure(.authenticationFailed, "Authentication failed: no authentication method offered by the server for me@ssh.example.com")))
    }

    @Test("without an agent the keys come first; without a store the password is asked at once")
    func noAgentNoStore() {
        var machine = order(agent: nil, keys: [.init(path: "/k/a", encrypted: false)], store: false)
        #expect(machine.next(.start(all)).action == .offer(.privateKey(path: "/k/a", passphrase: nil)))
        #expect(machine.next(.refused(refused)).action == .offer(.keyboardInteractive))
        _ = machine.next(.refused(refused))
        _ = machine.next(.refused(refused))
        #expect(machine.next(.refused(refused)).action == .askPassword)
    }

    @Test("a wrong passphrase is said and asked again, three times in all, then the next key")
    func passphraseRetries() {
        let unreadable = SSHFailure(.localIO, "using the key /k/locked: Unable to extract public key from private key file")
        var machine = order(agent: nil, keys: [.init(path: "/k/locked", encrypted: true), .init(path: "/k/next", encrypted: false)])
        #expect(machine.next(.start([.publicKey])).action == .askPassphrase(keyPath: "/k/locked"))
        for attempt in 1...3 {
            #expect(machine.next(.passphrase("wrong\(attempt)")).action == .offer(.privateKey(path: "/k/locked", passphrase: "wrong\(attempt)")))
            let step = machine.next(.refused(unreadable))
            #expect(step.notices == [.badPassphrase(keyPath: "/k/locked")])
            #expect(step.action == (attempt < 3 ? .askPassphrase(keyPath: "/k/locked") : .offer(.privateKey(path: "/k/next", passphrase: nil))))
        }
    }

    @Test("an encrypted key whose public half is known is offered without its passphrase first (the session probes it): refused, the next key comes and nothing is asked; accepted, the passphrase is asked, then the key offered with it")
    func probedBeforePassphrase() {
        let locked = Self.blob(7), other = Self.blob(8)
        var machine = order(agent: nil, keys: [.init(path: "/k/locked", encrypted: true, publicKey: locked),
                                               .init(path: "/k/other", encrypted: true, publicKey: other)])
        #expect(machine.next(.start([.publicKey])).action == .offer(.privateKey(path: "/k/locked", passphrase: nil)))
        let step = machine.next(.refused(refused))
        #expect(step == .init(notices: [], action: .offer(.privateKey(path: "/k/other", passphrase: nil))), "no passphrase asked for a refused key")
        var accepted = SSHFailure(.localIO, "using the key /k/other: the server accepts it; its passphrase is needed")
        accepted.needsPassphrase = true
        #expect(machine.next(.refused(accepted)) == .init(notices: [], action: .askPassphrase(keyPath: "/k/other")))
        #expect(machine.next(.passphrase("right")).action == .offer(.privateKey(path: "/k/other", passphrase: "right")))
        let wrong = machine.next(.refused(SSHFailure(.localIO, "using the key /k/other: wrong passphrase")))
        #expect(wrong == .init(notices: [.badPassphrase(keyPath: "/k/other")], action: .askPassphrase(keyPath: "/k/other")))
    }

    @Test("no passphrase given skips the key; an unreadable plain key is said once and skipped")
    func skippedKeys() {
        var machine = order(agent: nil, keys: [.init(path: "/k/locked", encrypted: true), .init(path: "/k/broken", encrypted: false),
                                             .init(path: "/k/good", encrypted: false)])
        #expect(machine.next(.start([.publicKey])).action == .askPassphrase(keyPath: "/k/locked"))
        #expect(machine.next(.passphrase(nil)).action == .offer(.privateKey(path: "/k/broken", passphrase: nil)))
        let step = machine.next(.refused(SSHFailure(.localIO, "bad format")))
        #expect(step == .init(notices: [.unreadableKey(keyPath: "/k/broken")], action: .offer(.privateKey(path: "/k/good", passphrase: nil))))
    }

    @Test("no one to ask: encrypted keys, keyboard-interactive and typed passwords are skipped, with one notice; a saved password still works")
    func noOneToAsk() {
        var machine = order(agent: nil, keys: [.init(path: "/k/locked", encrypted: true)], canAsk: false)
        #expect(machine.next(.start(all)).action == .lookUpSavedPassword)
        let step = machine.next(.savedPassword(nil))
        #expect(step.notices == [.noOneToAskForPassword])
        if case .fail(let failure) = step.action {
            #expect(failure.kind == .authenticationFailed)
        } else {
            Issue.record("expected the final failure, got \(step.action)")
        }
    }

    @Test("an agent that is missing or failed moves on; a broken connection or protocol error ends at once")
    func agentFailures() {
        for kind in [SSHFailure.Kind.configuration, .localIO, .authenticationFailed] {
            var agentStage = order(keys: [.init(path: "/k/a", encrypted: false, explicit: false)])
            _ = agentStage.next(.start(all, agentKeys: [Self.blob(1)]))
            #expect(agentStage.next(.refused(SSHFailure(kind, "agent"))).action == .offer(.privateKey(path: "/k/a", passphrase: nil)), "\(kind)")
        }
        for kind in [SSHFailure.Kind.connectionLost, .timedOut, .protocolError] {
            let failure = SSHFailure(kind, "broken")
            var agentStage = order(keys: [.init(path: "/k/a", encrypted: false, explicit: false)])
            _ = agentStage.next(.start(all, agentKeys: [Self.blob(1)]))
            #expect(agentStage.next(.refused(failure)).action == .fail(failure), "\(kind)")
            var keyStage = order(agent: nil, keys: [.init(path: "/k/a", encrypted: false)])
            _ = keyStage.next(.start(all))
            #expect(keyStage.next(.refused(failure)).action == .fail(failure), "\(kind) after a key")
        }
    }

    @Test("what worked is remembered: the next connection offers it first, asks nothing, and fails if it is refused")
    func rememberedForReconnect() {
        var machine = order(agent: nil, keys: [.init(path: "/k/locked", encrypted: true)])
        _ = machine.next(.start(all))
        _ = machine.next(.passphrase("right"))
        #expect(machine.succeeded() == nil, "a key is not a password to save")
        #expect(machine.remembered == .privateKey(path: "/k/locked", passphrase: "right"))
        #expect(machine.next(.start(all)) == .init(notices: [], action: .offer(.privateKey(path: "/k/locked", passphrase: "right"))))
        #expect(machine.next(.refused(refused)).action == .fail(refused))
    }

    @Test("a typed password that worked is handed back to be offered for saving; a saved one is not")
    func typedPasswordToSave() {
        var typed = order(agent: nil, store: false)
        #expect(typed.next(.start([.password])).action == .askPassword)
        _ = typed.next(.typedPassword("secret"))
        #expect(typed.succeeded() == "secret")
        #expect(typed.remembered == .password("secret"))

        var saved = order(agent: nil)
        _ = saved.next(.start([.password]))
        _ = saved.next(.savedPassword("stored"))
        #expect(saved.succeeded() == nil)
        #expect(saved.remembered == .password("stored"))
    }

    @Test("keyboard-interactive is not replayed: after it worked, the next connection runs the whole order again")
    func keyboardInteractiveNotReplayed() {
        var machine = order(agent: nil, store: false)
        #expect(machine.next(.start([.keyboardInteractive])).action == .offer(.keyboardInteractive))
        _ = machine.succeeded()
        #expect(machine.remembered == .keyboardInteractive)
        #expect(machine.next(.start([.keyboardInteractive, .password])).action == .offer(.keyboardInteractive))
        #expect(machine.next(.refused(refused)).notices == [.keyboardInteractiveRefused], "three rounds again, not a replay")
    }

    @Test("-i keys come before the agent's other keys (six of them would use up sshd's MaxAuthTries); the agent's copy of an -i key comes first and the file is not tried again; default files come last")
    func explicitKeysFirst() {
        let good = Self.blob(9), copy = Self.blob(8), fallback = Self.blob(7)
        let others = (1...6).map { Self.blob(UInt8($0)) }
        var machine = order(keys: [.init(path: "/k/good", encrypted: false, publicKey: good),
                                   .init(path: "/k/copied", encrypted: false, publicKey: copy),
                                   .init(path: "/home/me/.ssh/id_ed25519", encrypted: false, publicKey: fallback, explicit: false)])
        var offers = [machine.next(.start([.publicKey], agentKeys: others + [copy, fallback])).action]
        while case .offer = offers.last! { offers.append(machine.next(.refused(refused)).action) }
        let agent = { (key: [UInt8]) in AuthenticationOrder.Action.offer(.agentKey(socketPath: "/run/agent.sock", publicKey: key)) }
        #expect(Array(offers.dropLast()) == [agent(copy), .offer(.privateKey(path: "/k/good", passphrase: nil))]
                + others.map(agent) + [agent(fallback)])
    }

    @Test("IdentitiesOnly: of the agent's keys only copies of the key files are used")
    func identitiesOnly() {
        let wanted = Self.blob(9), defaultKey = Self.blob(8), stranger = Self.blob(1)
        var machine = order(keys: [.init(path: "/k/wanted", encrypted: false, publicKey: wanted),
                                   .init(path: "/k/default", encrypted: false, publicKey: defaultKey, explicit: false)],
                            identitiesOnly: true)
        var offers = [machine.next(.start([.publicKey], agentKeys: [stranger, defaultKey, wanted])).action]
        while case .offer = offers.last! { offers.append(machine.next(.refused(refused)).action) }
        #expect(Array(offers.dropLast()) == [.offer(.agentKey(socketPath: "/run/agent.sock", publicKey: wanted)),
                                             .offer(.agentKey(socketPath: "/run/agent.sock", publicKey: defaultKey))])
    }

    @Test("an RSA key refused under the engine's limitation (the session's failure says so): said once, with the way out, and in the final failure; an ordinary refusal says nothing")
    func rsaKeyRefused() {
        let rsa = Self.blob(3, type: "ssh-rsa")
        var machine = order(keys: [.init(path: "/k/id_rsa", encrypted: false, publicKey: rsa)], store: false)
        #expect(machine.next(.start([.publicKey], agentKeys: [rsa, Self.blob(4, type: "ssh-rsa")])).action
                == .offer(.agentKey(socketPath: "/run/agent.sock", publicKey: rsa)))
        let limitation = old.rsaLimitation!
        #expect(machine.next(.refused(refusedUnderLimitation))
                == .init(notices: [.rsaKeyRefused(key: "the agent's key", reason: limitation)],
                         action: .offer(.agentKey(socketPath: "/run/agent.sock", publicKey: Self.blob(4, type: "ssh-rsa")))))
        let last = machine.next(.refused(refusedUnderLimitation))
        #expect(last.notices.isEmpty, "said once")
        #expect(last.action == .fail(SSHFailure(.authenticationFailed,
                                                "Authentication failed: me@ssh.example.com (the server offers: publickey): \(limitation)")))
        #expect(limitation.hasPrefix("RSA keys need rsa-sha2-256/512 signatures, which libssh2 1.10.0 cannot make"))
        #expect(limitation.hasSuffix("; use an ed25519 or ECDSA key, or ssh with ProxyCommand"))

        var newer = order(agent: nil, keys: [.init(path: "/k/id_rsa", encrypted: false, publicKey: rsa)], store: false)
        _ = newer.next(.start([.publicKey]))
        #expect(newer.next(.refused(refused)).notices.isEmpty)
    }

    @Test("the public keys an order offers, in its order (what the engine choice looks at): -i keys first, then the agent's others; a key file without a known public half is left out")
    func publicKeysInOrder() {
        let rsa = Self.blob(3, type: "ssh-rsa"), ed25519 = Self.blob(4)
        let machine = order(keys: [.init(path: "/k/id_rsa", encrypted: false, publicKey: rsa),
                                   .init(path: "/k/id_unknown", encrypted: true, publicKey: nil)])
        #expect(machine.publicKeys(agentKeys: [ed25519]) == [rsa, ed25519])
        #expect(order().publicKeys(agentKeys: [ed25519, rsa]) == [ed25519, rsa])
        #expect(order(agent: nil).publicKeys(agentKeys: []).isEmpty)
    }

    @Test("keyboard-interactive: a single echo-off Password round is answered with the saved password; refused, it is said and the person is asked; a typed one is handed back for saving")
    func savedPasswordForKeyboardInteractive() {
        var machine = order(agent: nil)
        #expect(machine.next(.start([.keyboardInteractive])).action == .lookUpSavedPassword)
        #expect(machine.next(.savedPassword("stale")).action == .offer(.keyboardInteractive))
        #expect(machine.answer(passwordRound) == .answers(["stale"]))
        let otp = SSHKeyboardPrompt(name: "", instruction: "", questions: [.init(text: "Verification code: ", echo: false)])
        #expect(machine.answer(otp) == .ask(password: false), "a second factor goes to the person")
        #expect(machine.next(.refused(refused)) == .init(notices: [.savedPasswordRefused(account)], action: .offer(.keyboardInteractive)))
        #expect(machine.answer(passwordRound) == .ask(password: true), "the refused saved password is not offered again")
        machine.typedAnswers(["typed"], to: passwordRound)
        #expect(machine.succeeded() == "typed", "a password typed at PAM's prompt is offered for saving")
        #expect(machine.rememberedKeyboardPassword == "typed")

        // The reconnect: the round is answered with the password that worked, without asking.
        #expect(machine.next(.start([.keyboardInteractive])).action == .lookUpSavedPassword)
        #expect(machine.next(.savedPassword(nil)).action == .offer(.keyboardInteractive))
        #expect(machine.answer(passwordRound) == .answers(["typed"]))
        #expect(machine.succeeded() == nil)
    }

    @Test("keyboard-interactive with the saved password that works: nothing to save; without a terminal it is still tried once")
    func savedPasswordWithoutTerminal() {
        var machine = order(agent: nil, canAsk: false)
        _ = machine.next(.start([.keyboardInteractive]))
        #expect(machine.next(.savedPassword("right")).action == .offer(.keyboardInteractive))
        #expect(machine.answer(passwordRound) == .answers(["right"]))
        let step = machine.next(.refused(refused))
        #expect(step.notices == [.savedPasswordRefused(account)])
        if case .fail = step.action {} else { Issue.record("tried again without anyone to answer: \(step.action)") }

        var good = order(agent: nil, canAsk: false)
        _ = good.next(.start([.keyboardInteractive]))
        _ = good.next(.savedPassword("right"))
        #expect(good.answer(passwordRound) == .answers(["right"]))
        #expect(good.succeeded() == nil, "a saved password is not offered for saving again")
        #expect(!AuthenticationOrder.isPasswordRound(.init(name: "", instruction: "", questions: [.init(text: "Password: ", echo: true)])))
        #expect(!AuthenticationOrder.isPasswordRound(.init(name: "", instruction: "", questions: [
            .init(text: "Password: ", echo: false), .init(text: "Code: ", echo: false)])))
    }

    @Test("an answer nobody asked for is refused, not acted on")
    func outOfOrder() {
        var machine = order()
        _ = machine.next(.start(all))
        if case .fail(let failure) = machine.next(.typedPassword("x")).action {
            #expect(failure.kind == .configuration)
        } else {
            Issue.record("an unasked password was used")
        }
    }
}
