/// OpenSSH's authentication order as a decision without I/O: public keys (the agent's copy of
/// a key file first, the `-i` files, the agent's other keys, the default key files), then
/// keyboard-interactive, then the password (a saved one first, then typed ones). Events go in
/// (the server's methods and the agent's keys, a refusal, an answer), a ``Step`` comes out:
/// notices to show and one action. ``SSHOrderedAuthentication`` performs the actions (prompts,
/// the password store) and the session tries the offers.
///
/// The offer that worked is remembered: the next connection (a reconnect) offers it first,
/// without asking again, and fails if it is refused. A password that answered a
/// keyboard-interactive `Password:` round is remembered for such rounds.
package struct AuthenticationOrder: Sendable {
    /// A key file to try, and what is known of it without decrypting it.
    package struct KeyFile: Sendable, Equatable {
        /// The private key's path.
        package var path: String
        /// Whether the key is protected by a passphrase.
        package var encrypted: Bool
        /// The public key blob (from `path.pub` or the OpenSSH key's header), if known: to find
        /// the agent's copy of the key, and its type.
        package var publicKey: [UInt8]?
        /// Whether the key was named explicitly (`-i`), not one of the default files.
        package var explicit: Bool

        /// A key file.
        package init(path: String, encrypted: Bool, publicKey: [UInt8]? = nil, explicit: Bool = true) {
            self.path = path
            self.encrypted = encrypted
            self.publicKey = publicKey
            self.explicit = explicit
        }
    }

    /// What there is to try with.
    package struct Setup: Sendable, Equatable {
        /// Who logs in where (for the messages).
        package var account: SSHAccount
        /// The ssh-agent's socket, or nil without an agent.
        package var agentSocketPath: String?
        /// The key files, in order: `-i` ones, then default ones.
        package var keys: [KeyFile]
        /// OpenSSH's `IdentitiesOnly`: the agent's keys are used only when they are copies of
        /// the key files.
        package var identitiesOnly: Bool
        /// Whether a person can be asked.
        package var canAsk: Bool
        /// Whether a password store is configured.
        package var hasPasswordStore: Bool
        /// Passphrases asked per encrypted key.
        package var passphraseAttempts: Int
        /// Keyboard-interactive rounds tried.
        package var keyboardInteractiveAttempts: Int
        /// Typed passwords tried.
        package var passwordAttempts: Int
        /// The methods that may be used at all.
        package var allowedMethods: SSHAuthenticationMethods

        /// Everything to try with; three tries of each kind by default.
        package init(account: SSHAccount, agentSocketPath: String? = nil, keys: [KeyFile] = [], identitiesOnly: Bool = false,
                     canAsk: Bool = true, hasPasswordStore: Bool = false, passphraseAttempts: Int = 3,
                     keyboardInteractiveAttempts: Int = 3, passwordAttempts: Int = 3,
                     allowedMethods: SSHAuthenticationMethods = [.publicKey, .keyboardInteractive, .password]) {
            self.account = account
            self.agentSocketPath = agentSocketPath
            self.keys = keys
            self.identitiesOnly = identitiesOnly
            self.canAsk = canAsk
            self.hasPasswordStore = hasPasswordStore
            self.passphraseAttempts = passphraseAttempts
            self.keyboardInteractiveAttempts = keyboardInteractiveAttempts
            self.passwordAttempts = passwordAttempts
            self.allowedMethods = allowedMethods
        }
    }

    /// What happened.
    package enum Event: Sendable, Equatable {
        /// A connection's authentication begins; the server accepts these methods, and the agent
        /// holds these keys (public key blobs, in the agent's order).
        case start(SSHAuthenticationMethods, agentKeys: [[UInt8]] = [])
        /// The last offer failed.
        case refused(SSHFailure)
        /// The answer to `.askPassphrase` (nil: skip the key).
        case passphrase(String?)
        /// The answer to `.lookUpSavedPassword` (nil: none saved, or no store).
        case savedPassword(String?)
        /// The answer to `.askPassword` (nil: stop asking).
        case typedPassword(String?)
    }

    /// What to do next.
    package enum Action: Sendable, Equatable {
        /// Try this offer; its failure comes back as `.refused`.
        case offer(SSHAuthenticationOffer)
        /// Ask for the passphrase of the key; the answer comes back as `.passphrase`.
        case askPassphrase(keyPath: String)
        /// Look the account's password up in the store; it comes back as `.savedPassword`.
        case lookUpSavedPassword
        /// Ask for a password; it comes back as `.typedPassword`.
        case askPassword
        /// End the authentication with this failure.
        case fail(SSHFailure)
    }

    /// Notices to show, then an action.
    package struct Step: Sendable, Equatable {
        /// What to tell the person first, in order.
        package var notices: [SSHAuthenticationNotice]
        /// What to do.
        package var action: Action

        /// Notices, then an action.
        package init(notices: [SSHAuthenticationNotice], action: Action) {
            self.notices = notices
            self.action = action
        }
    }

    /// How to answer a keyboard-interactive round.
    package enum KeyboardAnswer: Sendable, Equatable {
        /// With these answers, no person asked (the saved or remembered password).
        case answers([String])
        /// Ask the person; `password` when the round is a single password question, whose
        /// typed answer goes to ``typedAnswers(_:to:)``.
        case ask(password: Bool)
        /// No one can answer.
        case none
    }

    /// One public key to try.
    private enum PublicKeyStep: Sendable, Equatable {
        case agent([UInt8])
        case file(Int)
    }

    private enum Stage: Sendable, Equatable {
        case idle
        case remembered
        /// Trying public key step `position`; `triesLeft` passphrases may still be asked for it.
        case publicKey(position: Int, triesLeft: Int)
        /// The saved password is looked up before keyboard-interactive, which may need it.
        case keyboardLookup
        /// Keyboard-interactive; `triesLeft` more rounds after this one.
        case keyboardInteractive(triesLeft: Int)
        case savedPassword
        case typedPassword(attempt: Int)
    }

    private enum Saved: Sendable, Equatable {
        case notLookedUp
        case none
        case available(String)
        case refused
    }

    /// What there is to try with.
    package private(set) var setup: Setup
    /// The offer that worked last, tried first by the next connection.
    package private(set) var remembered: SSHAuthenticationOffer?
    /// The password that answered a keyboard-interactive password round that worked: such a
    /// round of the next connection is answered with it.
    package private(set) var rememberedKeyboardPassword: String?
    private var stage = Stage.idle
    private var methods: SSHAuthenticationMethods = []
    private var lastOffer: SSHAuthenticationOffer?
    private var publicKeys: [PublicKeyStep] = []
    private var saved = Saved.notLookedUp
    /// The saved (or remembered) password answered a round of the current keyboard-interactive
    /// offer.
    private var savedUsedInRound = false
    private var rememberedUsedInRound = false
    /// What the person typed at a password round of the current keyboard-interactive offer.
    private var typedInRound: String?
    /// The engine's limitation, once an RSA key was refused under it.
    private var rsaLimitation: String?

    /// The public keys this order offers a server that accepts public keys, in order, with the
    /// agent holding `agentKeys` (a key file whose public half is unknown is left out).
    package func publicKeys(agentKeys: [[UInt8]]) -> [[UInt8]] {
        planPublicKeys(agentKeys: agentKeys).compactMap { step in
            switch step {
            case .agent(let key): key
            case .file(let index): setup.keys[index].publicKey
            }
        }
    }

    /// An order for `setup`, with nothing remembered.
    package init(setup: Setup) { self.setup = setup }

    /// Feeds `event`; returns the notices to show and the next action.
    package mutating func next(_ event: Event) -> Step {
        var notices: [SSHAuthenticationNotice] = []
        let action = handle(event, &notices)
        if case .offer(let offer) = action {
            lastOffer = offer
            savedUsedInRound = false
            rememberedUsedInRound = false
            typedInRound = nil
        }
        if case .fail = action { stage = .idle }
        return Step(notices: notices, action: action)
    }

    /// The last offer worked: remember it. Returns the password to offer to save when the person
    /// typed it (at the password prompt, or at a keyboard-interactive password round).
    package mutating func succeeded() -> String? {
        defer { stage = .idle }
        guard let offer = lastOffer else { return nil }
        remembered = offer
        if case .typedPassword = stage, case .password(let password) = offer { return password }
        if offer == .keyboardInteractive {
            if let typed = typedInRound {
                rememberedKeyboardPassword = typed
                return typed
            }
            if savedUsedInRound, case .available(let password) = saved { rememberedKeyboardPassword = password }
        }
        return nil
    }

    /// How to answer `round` of the running keyboard-interactive offer: a single question
    /// without echo that asks for a password (PAM's `Password: `) is answered with the saved
    /// password, once per offer, or on a reconnect with the password that answered it before;
    /// anything else goes to the person.
    package mutating func answer(_ round: SSHKeyboardPrompt) -> KeyboardAnswer {
        let isPassword = Self.isPasswordRound(round)
        if isPassword {
            if !savedUsedInRound, case .available(let password) = saved {
                savedUsedInRound = true
                return .answers([password])
            }
            if !rememberedUsedInRound, !savedUsedInRound, let password = rememberedKeyboardPassword {
                rememberedUsedInRound = true
                return .answers([password])
            }
        }
        return setup.canAsk ? .ask(password: isPassword) : .none
    }

    /// The person answered `round` with `answers`: a typed password is kept, to be offered for
    /// saving once the login worked.
    package mutating func typedAnswers(_ answers: [String], to round: SSHKeyboardPrompt) {
        if Self.isPasswordRound(round), let password = answers.first { typedInRound = password }
    }

    /// Whether `round` is one question without echo that asks for a password.
    package static func isPasswordRound(_ round: SSHKeyboardPrompt) -> Bool {
        guard round.questions.count == 1, let question = round.questions.first, !question.echo else { return false }
        return question.text.lowercased().contains("password")
    }

    private mutating func handle(_ event: Event, _ notices: inout [SSHAuthenticationNotice]) -> Action {
        switch event {
        case .start(let methods, let agentKeys):
            self.methods = methods
            lastOffer = nil
            saved = .notLookedUp
            rsaLimitation = nil
            publicKeys = planPublicKeys(agentKeys: agentKeys)
            if let remembered, remembered != .keyboardInteractive {
                stage = .remembered
                return .offer(remembered)
            }
            return advance(from: .publicKey(position: 0, triesLeft: 0), &notices)
        case .refused(let failure):
            return refused(failure, &notices)
        case .passphrase(let passphrase):
            guard case .publicKey(let position, let triesLeft) = stage, case .file(let index) = publicKeys[position] else {
                return outOfOrder(event)
            }
            guard let passphrase else { return advance(from: .publicKey(position: position + 1, triesLeft: 0), &notices) }
            stage = .publicKey(position: position, triesLeft: triesLeft - 1)
            return .offer(.privateKey(path: setup.keys[index].path, passphrase: passphrase))
        case .savedPassword(let password):
            switch stage {
            case .keyboardLookup:
                saved = password.map { .available($0) } ?? .none
                return advance(from: .keyboardInteractive(triesLeft: setup.keyboardInteractiveAttempts), &notices)
            case .savedPassword:
                guard let password else {
                    saved = .none
                    return advance(from: .typedPassword(attempt: 1), &notices)
                }
                saved = .available(password)
                return .offer(.password(password))
            default:
                return outOfOrder(event)
            }
        case .typedPassword(let password):
            guard case .typedPassword = stage else { return outOfOrder(event) }
            guard let password else { return finalFailure() }
            return .offer(.password(password))
        }
    }

    /// The public keys in order (issue 16 point 10): the agent's copies of the `-i` files, the
    /// `-i` files not already tried through the agent, the agent's other keys (with
    /// `identitiesOnly` only its copies of the default files), then the default files not
    /// already tried through the agent.
    private func planPublicKeys(agentKeys: [[UInt8]]) -> [PublicKeyStep] {
        let agent = setup.agentSocketPath == nil ? [] : agentKeys
        let explicit = setup.keys.filter(\.explicit).compactMap(\.publicKey)
        let defaults = setup.keys.filter { !$0.explicit }.compactMap(\.publicKey)
        var plan: [PublicKeyStep] = []
        for key in explicit where agent.contains(key) && !plan.contains(.agent(key)) { plan.append(.agent(key)) }
        func viaAgent(_ index: Int) -> Bool { setup.keys[index].publicKey.map { plan.contains(.agent($0)) } ?? false }
        for index in setup.keys.indices where setup.keys[index].explicit && !viaAgent(index) { plan.append(.file(index)) }
        for key in agent where !plan.contains(.agent(key)) && (!setup.identitiesOnly || defaults.contains(key)) {
            plan.append(.agent(key))
        }
        for index in setup.keys.indices where !setup.keys[index].explicit && !viaAgent(index) { plan.append(.file(index)) }
        return plan
    }

    /// The first thing to try at or after `candidate`, in OpenSSH's order.
    private mutating func advance(from candidate: Stage, _ notices: inout [SSHAuthenticationNotice]) -> Action {
        var candidate = candidate
        while true {
            switch candidate {
            case .publicKey(let position, _):
                guard usable(.publicKey), position < publicKeys.count else {
                    candidate = .keyboardLookup
                    continue
                }
                switch publicKeys[position] {
                case .agent(let key):
                    stage = .publicKey(position: position, triesLeft: 0)
                    return .offer(.agentKey(socketPath: setup.agentSocketPath, publicKey: key))
                case .file(let index):
                    let key = setup.keys[index]
                    if key.encrypted {
                        guard setup.canAsk else {
                            candidate = .publicKey(position: position + 1, triesLeft: 0)
                            continue
                        }
                        stage = .publicKey(position: position, triesLeft: setup.passphraseAttempts)
                        // Its public half known: offered first (the session probes with it), so
                        // the passphrase is asked only for a key the server accepts.
                        if key.publicKey != nil { return .offer(.privateKey(path: key.path, passphrase: nil)) }
                        return .askPassphrase(keyPath: key.path)
                    }
                    stage = .publicKey(position: position, triesLeft: 0)
                    return .offer(.privateKey(path: key.path, passphrase: nil))
                }
            case .keyboardLookup:
                // The saved password may answer a password round: look it up first.
                if usable(.keyboardInteractive), setup.hasPasswordStore, saved == .notLookedUp {
                    stage = .keyboardLookup
                    return .lookUpSavedPassword
                }
                candidate = .keyboardInteractive(triesLeft: setup.keyboardInteractiveAttempts)
            case .keyboardInteractive(let triesLeft):
                let savedUsable: Bool
                if case .available = saved { savedUsable = true } else { savedUsable = false }
                let answerable = setup.canAsk || savedUsable || rememberedKeyboardPassword != nil
                if usable(.keyboardInteractive), answerable, triesLeft > 0 {
                    // Without a person, one try: the saved (or remembered) password's.
                    stage = .keyboardInteractive(triesLeft: setup.canAsk ? triesLeft - 1 : 0)
                    return .offer(.keyboardInteractive)
                }
                candidate = .savedPassword
            case .savedPassword:
                guard usable(.password) else { return finalFailure() }
                switch saved {
                case .available(let password):
                    stage = .savedPassword
                    return .offer(.password(password))
                case .notLookedUp where setup.hasPasswordStore:
                    stage = .savedPassword
                    return .lookUpSavedPassword
                default:
                    candidate = .typedPassword(attempt: 1)
                }
            case .typedPassword(let attempt):
                guard setup.canAsk else {
                    notices.append(.noOneToAskForPassword)
                    return finalFailure()
                }
                stage = .typedPassword(attempt: attempt)
                return .askPassword
            case .idle, .remembered:
                return finalFailure()
            }
        }
    }

    /// The last offer failed: a refusal moves on (with a notice where OpenSSH says something);
    /// a broken connection or protocol error ends the authentication.
    private mutating func refused(_ failure: SSHFailure, _ notices: inout [SSHAuthenticationNotice]) -> Action {
        switch stage {
        case .remembered:
            return .fail(failure)
        case .publicKey(let position, let triesLeft):
            switch publicKeys[position] {
            case .agent:
                // An agent that is gone or failed, or a key the server refused: on to the next.
                guard [.authenticationFailed, .configuration, .localIO].contains(failure.kind) else { return .fail(failure) }
                if failure.kind == .authenticationFailed { noteRefusedKey(failure, name: "the agent's key", &notices) }
                return advance(from: .publicKey(position: position + 1, triesLeft: 0), &notices)
            case .file(let index):
                let key = setup.keys[index]
                switch failure.kind {
                case .localIO where failure.needsPassphrase && key.encrypted && triesLeft > 0:
                    return .askPassphrase(keyPath: key.path)
                case .localIO:
                    notices.append(key.encrypted ? .badPassphrase(keyPath: key.path) : .unreadableKey(keyPath: key.path))
                    if key.encrypted && triesLeft > 0 { return .askPassphrase(keyPath: key.path) }
                    return advance(from: .publicKey(position: position + 1, triesLeft: 0), &notices)
                case .authenticationFailed:
                    noteRefusedKey(failure, name: key.path, &notices)
                    return advance(from: .publicKey(position: position + 1, triesLeft: 0), &notices)
                default:
                    return .fail(failure)
                }
            }
        case .keyboardInteractive(let triesLeft):
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            if savedUsedInRound {
                notices.append(.savedPasswordRefused(setup.account))
                saved = .refused
            } else if rememberedUsedInRound {
                rememberedKeyboardPassword = nil
            } else {
                notices.append(.keyboardInteractiveRefused)
            }
            return advance(from: .keyboardInteractive(triesLeft: triesLeft), &notices)
        case .savedPassword:
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            notices.append(.savedPasswordRefused(setup.account))
            saved = .refused
            return advance(from: .typedPassword(attempt: 1), &notices)
        case .typedPassword(let attempt):
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            let retrying = attempt < setup.passwordAttempts
            notices.append(.passwordRefused(retrying: retrying))
            guard retrying else { return finalFailure() }
            stage = .typedPassword(attempt: attempt + 1)
            return .askPassword
        case .idle, .keyboardLookup:
            return outOfOrder(.refused(failure))
        }
    }

    /// A key refused under the engine's limitation (an RSA key, an engine without rsa-sha2):
    /// said once, and remembered for the final failure (issue 16 point 9).
    private mutating func noteRefusedKey(_ failure: SSHFailure, name: String, _ notices: inout [SSHAuthenticationNotice]) {
        guard let limitation = failure.engineLimitation else { return }
        if rsaLimitation == nil { notices.append(.rsaKeyRefused(key: name, reason: limitation)) }
        rsaLimitation = limitation
    }

    /// Whether `method` is offered by the server and allowed by the setup.
    private func usable(_ method: SSHAuthenticationMethods) -> Bool {
        methods.contains(method) && setup.allowedMethods.contains(method)
    }

    /// Nothing left to try.
    private func finalFailure() -> Action {
        let who = "\(setup.account.user)@\(setup.account.host)"
        if methods.isEmpty {
            return .fail(SSHFailure(.authenticationFailed, "Authentication failed: no authentication method offered by the server for \(who)"))
        }
        let offered = methods.names.joined(separator: ", ")
        if let limitation = rsaLimitation {
            return .fail(SSHFailure(.authenticationFailed,
                                    "Authentication failed: \(who) (the server offers: \(offered)): \(limitation)"))
        }
        return .fail(SSHFailure(.authenticationFailed, "Authentication failed: \(who) (the server offers: \(offered))"))
    }

    private func outOfOrder(_ event: Event) -> Action {
        .fail(SSHFailure(.configuration, "authentication: an answer came that was not asked for"))
    }
}
