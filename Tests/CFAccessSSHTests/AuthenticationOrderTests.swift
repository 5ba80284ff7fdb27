import CFAccessSSH
import Testing

/// OpenSSH's authentication order as pure decisions (``AuthenticationOrder``): no session, no
/// prompts, each event fed by hand.
@Suite("Authentication order: agent, keys, keyboard-interactive, password")
struct AuthenticationOrderTests {
    private let account = SSHAccount(user: "me", host: "ssh.example.com")
    private let refused = SSHFailure(.authenticationFailed, "Authentication failed")
    private let all: SSHAuthenticationMethods = [.publicKey, .keyboardInteractive, .password]

    private func order(agent: String? = "/run/agent.sock", keys: [AuthenticationOrder.KeyFile] = [],
                       canAsk: Bool = true, store: Bool = true) -> AuthenticationOrder {
        AuthenticationOrder(setup: .init(account: account, agentSocketPath: agent, keys: keys, canAsk: canAsk,
                                         hasPasswordStore: store))
    }

    @Test("every method in OpenSSH's order: agent, each key (an encrypted one after its passphrase), keyboard-interactive ×3, saved password, typed passwords ×3, then the failure")
    func fullOrder() {
        var machine = order(keys: [.init(path: "/k/plain", encrypted: false), .init(path: "/k/locked", encrypted: true)])
        #expect(machine.next(.start(all)) == .init(notices: [], action: .offer(.agent(socketPath: "/run/agent.sock"))))
        #expect(machine.next(.refused(refused)).action == .offer(.privateKey(path: "/k/plain", passphrase: nil)))
        #expect(machine.next(.refused(refused)).action == .askPassphrase(keyPath: "/k/locked"))
        #expect(machine.next(.passphrase("phrase")).action == .offer(.privateKey(path: "/k/locked", passphrase: "phrase")))
        #expect(machine.next(.refused(refused)) == .init(notices: [], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .offer(.keyboardInteractive)))
        #expect(machine.next(.refused(refused)) == .init(notices: [.keyboardInteractiveRefused], action: .lookUpSavedPassword))
        #expect(machine.next(.savedPassword("saved")).action == .offer(.password("saved")))
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
                == .fail(SSHFailure(.authenticationFailed, "Authentication failed: me@ssh.example.com (the server offers: )")))
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
            var agentStage = order(keys: [.init(path: "/k/a", encrypted: false)])
            _ = agentStage.next(.start(all))
            #expect(agentStage.next(.refused(SSHFailure(kind, "agent"))).action == .offer(.privateKey(path: "/k/a", passphrase: nil)), "\(kind)")
        }
        for kind in [SSHFailure.Kind.connectionLost, .timedOut, .protocolError] {
            let failure = SSHFailure(kind, "broken")
            var agentStage = order(keys: [.init(path: "/k/a", encrypted: false)])
            _ = agentStage.next(.start(all))
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
        var machine = order(agent: nil)
        #expect(machine.next(.start([.keyboardInteractive])).action == .offer(.keyboardInteractive))
        _ = machine.succeeded()
        #expect(machine.remembered == .keyboardInteractive)
        #expect(machine.next(.start([.keyboardInteractive, .password])).action == .offer(.keyboardInteractive))
        #expect(machine.next(.refused(refused)).notices == [.keyboardInteractiveRefused], "three rounds again, not a replay")
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
