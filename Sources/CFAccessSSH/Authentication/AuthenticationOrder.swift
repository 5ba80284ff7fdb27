/// OpenSSH's authentication order as a decision without I/O: the ssh-agent, then key files (an
/// encrypted one after its passphrase), then keyboard-interactive, then the password (a saved
/// one first, then typed ones). Events go in (the server's methods, a refusal, an answer), a
/// ``Step`` comes out: notices to show and one action. ``SSHOrderedAuthentication`` performs the
/// actions (prompts, the password store) and the session tries the offers.
///
/// The offer that worked is remembered: the next connection (a reconnect) offers it first,
/// without asking again, and fails if it is refused.
package struct AuthenticationOrder: Sendable {
    /// A key file to try, and whether it needs a passphrase.
    package struct KeyFile: Sendable, Equatable {
        /// The private key's path.
        package var path: String
        /// Whether the key is protected by a passphrase.
        package var encrypted: Bool

        /// A key file.
        package init(path: String, encrypted: Bool) {
            self.path = path
            self.encrypted = encrypted
        }
    }

    /// What there is to try with.
    package struct Setup: Sendable, Equatable {
        /// Who logs in where (for the messages).
        package var account: SSHAccount
        /// The ssh-agent's socket, or nil without an agent.
        package var agentSocketPath: String?
        /// The key files, in order.
        package var keys: [KeyFile]
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

        /// Everything to try with; three tries of each kind by default.
        package init(account: SSHAccount, agentSocketPath: String? = nil, keys: [KeyFile] = [], canAsk: Bool = true,
                     hasPasswordStore: Bool = false, passphraseAttempts: Int = 3, keyboardInteractiveAttempts: Int = 3,
                     passwordAttempts: Int = 3) {
            self.account = account
            self.agentSocketPath = agentSocketPath
            self.keys = keys
            self.canAsk = canAsk
            self.hasPasswordStore = hasPasswordStore
            self.passphraseAttempts = passphraseAttempts
            self.keyboardInteractiveAttempts = keyboardInteractiveAttempts
            self.passwordAttempts = passwordAttempts
        }
    }

    /// What happened.
    package enum Event: Sendable, Equatable {
        /// A connection's authentication begins; the server accepts these methods.
        case start(SSHAuthenticationMethods)
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

    private enum Stage: Sendable, Equatable {
        case idle
        case remembered
        case agent
        /// Trying key `index`; `triesLeft` passphrases may still be asked for it.
        case key(index: Int, triesLeft: Int)
        /// Keyboard-interactive; `triesLeft` more rounds after this one.
        case keyboardInteractive(triesLeft: Int)
        case savedPassword
        case typedPassword(attempt: Int)
    }

    /// What there is to try with.
    package let setup: Setup
    /// The offer that worked last, tried first by the next connection.
    package private(set) var remembered: SSHAuthenticationOffer?
    private var stage = Stage.idle
    private var methods: SSHAuthenticationMethods = []
    private var lastOffer: SSHAuthenticationOffer?

    /// An order for `setup`, with nothing remembered.
    package init(setup: Setup) { self.setup = setup }

    /// Feeds `event`; returns the notices to show and the next action.
    package mutating func next(_ event: Event) -> Step {
        var notices: [SSHAuthenticationNotice] = []
        let action = handle(event, &notices)
        if case .offer(let offer) = action { lastOffer = offer }
        if case .fail = action { stage = .idle }
        return Step(notices: notices, action: action)
    }

    /// The last offer worked: remember it. Returns the password to offer to save when it was a
    /// typed one.
    package mutating func succeeded() -> String? {
        defer { stage = .idle }
        guard let offer = lastOffer else { return nil }
        remembered = offer
        if case .typedPassword = stage, case .password(let password) = offer { return password }
        return nil
    }

    private mutating func handle(_ event: Event, _ notices: inout [SSHAuthenticationNotice]) -> Action {
        switch event {
        case .start(let methods):
            self.methods = methods
            lastOffer = nil
            if let remembered, remembered != .keyboardInteractive {
                stage = .remembered
                return .offer(remembered)
            }
            return advance(from: .agent, &notices)
        case .refused(let failure):
            return refused(failure, &notices)
        case .passphrase(let passphrase):
            guard case .key(let index, let triesLeft) = stage else { return outOfOrder(event) }
            guard let passphrase else { return advance(from: .key(index: index + 1, triesLeft: 0), &notices) }
            stage = .key(index: index, triesLeft: triesLeft - 1)
            return .offer(.privateKey(path: setup.keys[index].path, passphrase: passphrase))
        case .savedPassword(let password):
            guard stage == .savedPassword else { return outOfOrder(event) }
            guard let password else { return advance(from: .typedPassword(attempt: 1), &notices) }
            return .offer(.password(password))
        case .typedPassword(let password):
            guard case .typedPassword = stage else { return outOfOrder(event) }
            guard let password else { return finalFailure() }
            return .offer(.password(password))
        }
    }

    /// The first thing to try at or after `candidate`, in OpenSSH's order.
    private mutating func advance(from candidate: Stage, _ notices: inout [SSHAuthenticationNotice]) -> Action {
        var candidate = candidate
        while true {
            switch candidate {
            case .agent:
                if methods.contains(.publicKey), let socket = setup.agentSocketPath {
                    stage = .agent
                    return .offer(.agent(socketPath: socket))
                }
                candidate = .key(index: 0, triesLeft: 0)
            case .key(let index, _):
                guard methods.contains(.publicKey), index < setup.keys.count else {
                    candidate = .keyboardInteractive(triesLeft: setup.keyboardInteractiveAttempts)
                    continue
                }
                let key = setup.keys[index]
                if key.encrypted {
                    guard setup.canAsk else {
                        candidate = .key(index: index + 1, triesLeft: 0)
                        continue
                    }
                    stage = .key(index: index, triesLeft: setup.passphraseAttempts)
                    return .askPassphrase(keyPath: key.path)
                }
                stage = .key(index: index, triesLeft: 0)
                return .offer(.privateKey(path: key.path, passphrase: nil))
            case .keyboardInteractive(let triesLeft):
                if methods.contains(.keyboardInteractive), setup.canAsk, triesLeft > 0 {
                    stage = .keyboardInteractive(triesLeft: triesLeft - 1)
                    return .offer(.keyboardInteractive)
                }
                candidate = .savedPassword
            case .savedPassword:
                guard methods.contains(.password) else { return finalFailure() }
                if setup.hasPasswordStore {
                    stage = .savedPassword
                    return .lookUpSavedPassword
                }
                candidate = .typedPassword(attempt: 1)
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
        case .agent:
            // No agent, an agent that failed, or keys the server refused: on to the key files.
            guard [.authenticationFailed, .configuration, .localIO].contains(failure.kind) else { return .fail(failure) }
            return advance(from: .key(index: 0, triesLeft: 0), &notices)
        case .key(let index, let triesLeft):
            let key = setup.keys[index]
            switch failure.kind {
            case .localIO:
                notices.append(key.encrypted ? .badPassphrase(keyPath: key.path) : .unreadableKey(keyPath: key.path))
                if key.encrypted && triesLeft > 0 { return .askPassphrase(keyPath: key.path) }
                return advance(from: .key(index: index + 1, triesLeft: 0), &notices)
            case .authenticationFailed:
                return advance(from: .key(index: index + 1, triesLeft: 0), &notices)
            default:
                return .fail(failure)
            }
        case .keyboardInteractive(let triesLeft):
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            notices.append(.keyboardInteractiveRefused)
            return advance(from: .keyboardInteractive(triesLeft: triesLeft), &notices)
        case .savedPassword:
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            notices.append(.savedPasswordRefused(setup.account))
            return advance(from: .typedPassword(attempt: 1), &notices)
        case .typedPassword(let attempt):
            guard failure.kind == .authenticationFailed else { return .fail(failure) }
            let retrying = attempt < setup.passwordAttempts
            notices.append(.passwordRefused(retrying: retrying))
            guard retrying else { return finalFailure() }
            stage = .typedPassword(attempt: attempt + 1)
            return .askPassword
        case .idle:
            return outOfOrder(.refused(failure))
        }
    }

    /// Nothing left to try.
    private func finalFailure() -> Action {
        let offered = methods.names.joined(separator: ", ")
        return .fail(SSHFailure(.authenticationFailed,
                                "Authentication failed: \(setup.account.user)@\(setup.account.host) (the server offers: \(offered))"))
    }

    private func outOfOrder(_ event: Event) -> Action {
        .fail(SSHFailure(.configuration, "authentication: an answer came that was not asked for"))
    }
}
