import AccessTransport
import FoundationEssentials
import Logging

/// The ready ``SSHUserAuthenticationDelegate``: OpenSSH's order — public keys (the agent's copy
/// of a key file first, then the `-i` files, the agent's other keys unless `identitiesOnly`, the
/// default files; passphrases asked), keyboard-interactive, then the password (a saved one from
/// the ``SSHPasswordStore`` first, then typed ones, with the offer to save one that worked). A
/// keyboard-interactive round that only asks for a password (PAM's `Password: `) is answered
/// with the saved password, and a password typed there is offered for saving too. The app
/// supplies only the ``SSHAuthenticationPrompts``.
///
/// ```swift
/// let authentication = SSHOrderedAuthentication(
///     configuration: .init(account: SSHAccount(user: "me", host: "ssh.example.com"),
///                          agentSocketPath: SSHOrderedAuthentication.Configuration.agentSocketPath(environment: env),
///                          defaultIdentityFiles: SSHOrderedAuthentication.Configuration.defaultIdentityFiles(environment: env),
///                          passwordStore: SecretServiceStore()),
///     prompts: myPrompts)
/// try await ssh.authenticate(user: "me", delegate: authentication)
/// ```
///
/// Use one instance for every connection of a destination: the way that worked is remembered,
/// and a reconnect tries it first without asking again. One authentication at a time.
public final class SSHOrderedAuthentication: SSHUserAuthenticationDelegate {
    /// What to try, and how often.
    public struct Configuration: Sendable {
        /// Who logs in where: the prompts' and the password store's key.
        public var account: SSHAccount
        /// The ssh-agent's socket (nil: no agent is tried).
        public var agentSocketPath: String?
        /// Key files to try first, in order (ssh's `-i`); each is tried even if unreadable, so a
        /// bad one is said.
        public var identityFiles: [String]
        /// Key files tried next when they exist and are readable (ssh's `~/.ssh/id_*`).
        public var defaultIdentityFiles: [String]
        /// OpenSSH's `IdentitiesOnly`: the agent's keys are used only when they are copies of
        /// the key files; its other keys are not tried.
        public var identitiesOnly: Bool
        /// Where saved passwords are looked up and saved (nil: none are).
        public var passwordStore: (any SSHPasswordStore)?
        /// Passphrases asked for each encrypted key.
        public var passphraseAttempts: Int
        /// Keyboard-interactive rounds tried.
        public var keyboardInteractiveAttempts: Int
        /// Typed passwords tried.
        public var passwordAttempts: Int
        /// The methods that may be used (ssh_config's `PubkeyAuthentication`,
        /// `KbdInteractiveAuthentication`, `PasswordAuthentication`, `PreferredAuthentications`);
        /// the others are never tried, whatever the server offers.
        public var allowedMethods: SSHAuthenticationMethods = [.publicKey, .keyboardInteractive, .password]

        /// A configuration with every setting; three tries of each kind by default.
        public init(account: SSHAccount, agentSocketPath: String? = nil, identityFiles: [String] = [],
                    defaultIdentityFiles: [String] = [], identitiesOnly: Bool = false,
                    passwordStore: (any SSHPasswordStore)? = nil,
                    passphraseAttempts: Int = 3, keyboardInteractiveAttempts: Int = 3, passwordAttempts: Int = 3) {
            self.account = account
            self.agentSocketPath = agentSocketPath
            self.identityFiles = identityFiles
            self.defaultIdentityFiles = defaultIdentityFiles
            self.identitiesOnly = identitiesOnly
            self.passwordStore = passwordStore
            self.passphraseAttempts = passphraseAttempts
            self.keyboardInteractiveAttempts = keyboardInteractiveAttempts
            self.passwordAttempts = passwordAttempts
        }

        /// OpenSSH's default keys in the home directory (`HOME` of `environment`, else the
        /// user's): `~/.ssh/id_ed25519`, `id_ecdsa`, `id_rsa`.
        public static func defaultIdentityFiles(environment: [String: String]) -> [String] {
            let home = homeDirectory(environment: environment)
            return ["id_ed25519", "id_ecdsa", "id_rsa"].map { "\(home)/.ssh/\($0)" }
        }

        /// The agent socket named by `SSH_AUTH_SOCK` in `environment`, or nil.
        public static func agentSocketPath(environment: [String: String]) -> String? {
            environment["SSH_AUTH_SOCK"].flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    private struct State: Sendable {
        var order: AuthenticationOrder
        var storeProblem: SSHPasswordStoreFailure?
    }

    /// What to try, and how often.
    public let configuration: Configuration
    private let prompts: any SSHAuthenticationPrompts
    private let logger: Logger
    private let state: LockedBox<State>
    private let listAgent: @Sendable (String) async -> [[UInt8]]

    /// An authentication for `configuration` asking through `prompts`. The key files are looked
    /// at (which exist, which are encrypted, their public keys) now; the agent's keys are listed
    /// at the start of each authentication.
    public convenience init(configuration: Configuration, prompts: any SSHAuthenticationPrompts,
                            logger: Logger = Logger(label: "cf-access-ssh")) {
        self.init(configuration: configuration, prompts: prompts, logger: logger) { socket in
            ((try? await SSHAgentIdentity.list(socketPath: socket)) ?? []).map(\.publicKey)
        }
    }

    /// The same with the agent's key list given (tests).
    package init(configuration: Configuration, prompts: any SSHAuthenticationPrompts, logger: Logger,
                 listAgent: @escaping @Sendable (String) async -> [[UInt8]]) {
        self.configuration = configuration
        self.prompts = prompts
        self.logger = logger
        self.listAgent = listAgent
        let defaults = configuration.defaultIdentityFiles.filter {
            !configuration.identityFiles.contains($0) && FileManager.default.isReadableFile(atPath: $0)
        }
        let explicit = Set(configuration.identityFiles)
        let keys = (configuration.identityFiles + defaults).map {
            AuthenticationOrder.KeyFile(path: $0, encrypted: PrivateKeyFile.isEncrypted(path: $0),
                                        publicKey: PrivateKeyFile.publicKey(path: $0), explicit: explicit.contains($0))
        }
        let setup = AuthenticationOrder.Setup(
            account: configuration.account, agentSocketPath: configuration.agentSocketPath, keys: keys,
            identitiesOnly: configuration.identitiesOnly,
            canAsk: prompts.canAsk, hasPasswordStore: configuration.passwordStore != nil,
            passphraseAttempts: configuration.passphraseAttempts,
            keyboardInteractiveAttempts: configuration.keyboardInteractiveAttempts,
            passwordAttempts: configuration.passwordAttempts, allowedMethods: configuration.allowedMethods)
        state = LockedBox(State(order: AuthenticationOrder(setup: setup)))
    }

    /// The algorithms of the keys this authentication offers a server that takes public keys,
    /// in order (`ssh-rsa`, `ssh-ed25519`, …): what the engine choice needs to know.
    package func keyAlgorithms() async -> [String] {
        let order = state.withLock { $0.order }
        var agentKeys: [[UInt8]] = []
        if let socket = order.setup.agentSocketPath { agentKeys = await listAgent(socket) }
        return order.publicKeys(agentKeys: agentKeys).map { SSHPublicKeyBlob.algorithm($0) }
    }

    /// The banner goes to the prompts, as a notice.
    public func showBanner(_ text: String) async {
        await prompts.show(.banner(text))
    }

    /// The next offer in OpenSSH's order, asking the prompts and the password store on the way.
    public func nextAuthenticationOffer(availableMethods: SSHAuthenticationMethods,
                                        lastFailure: SSHFailure?) async throws(SSHFailure) -> SSHAuthenticationOffer? {
        var event: AuthenticationOrder.Event
        if let lastFailure {
            logger.debug("authentication refused: \(lastFailure.message)")
            event = .refused(lastFailure)
        } else {
            logger.debug("server offers: \(availableMethods)")
            var agentKeys: [[UInt8]] = []
            if availableMethods.contains(.publicKey), let socket = configuration.agentSocketPath {
                agentKeys = await listAgent(socket)
                logger.debug("the ssh-agent holds \(agentKeys.count) keys")
            }
            event = .start(availableMethods, agentKeys: agentKeys)
        }
        while true {
            let step = state.withLock { $0.order.next(event) }
            for notice in step.notices { await prompts.show(notice) }
            switch step.action {
            case .offer(let offer):
                logger.debug("trying \(offer)")
                return offer
            case .askPassphrase(let path):
                event = .passphrase(await prompts.passphrase(forKey: path))
            case .lookUpSavedPassword:
                event = .savedPassword(await savedPassword())
            case .askPassword:
                event = .typedPassword(await prompts.password(for: configuration.account))
            case .fail(let failure):
                throw failure
            }
        }
    }

    /// Answers a round that only asks for a password with the saved (or, on a reconnect, the
    /// remembered) password; passes any other round to the prompts.
    public func respond(to round: SSHKeyboardPrompt) async -> [String]? {
        switch state.withLock({ $0.order.answer(round) }) {
        case .answers(let answers):
            logger.debug("keyboard-interactive: the password round answered without asking")
            return answers
        case .ask(let password):
            let answers = await prompts.respond(to: round)
            if password, let answers { state.withLock { $0.order.typedAnswers(answers, to: round) } }
            return answers
        case .none:
            return nil
        }
    }

    /// Remembers `offer` for the next connection; after a typed password, offers to save it.
    public func authenticationSucceeded(with offer: SSHAuthenticationOffer) async {
        let (typed, problem) = state.withLock { ($0.order.succeeded(), $0.storeProblem) }
        guard let password = typed, let store = configuration.passwordStore else { return }
        if let problem {
            await prompts.show(.passwordNotSavable(reason: problem.reason))
            return
        }
        guard await prompts.confirmSavingPassword(for: configuration.account) else { return }
        do {
            try await store.save(password, for: configuration.account)
            await prompts.show(.passwordSaved(configuration.account))
        } catch {
            await prompts.show(.passwordNotSaved(reason: error.reason))
        }
    }

    /// The saved password, or nil; a store that cannot be used is noted (for the save offer).
    private func savedPassword() async -> String? {
        guard let store = configuration.passwordStore else { return nil }
        do {
            return try await store.password(for: configuration.account)
        } catch {
            logger.debug("password store: \(error.reason)")
            state.withLock { $0.storeProblem = error }
            // A store that hung (a wedged D-Bus) is said at once, so the wait before the
            // password prompt is explained; one that is simply not there is said after a login.
            if error.timedOut { await prompts.show(.passwordStoreUnavailable(reason: error.reason)) }
            return nil
        }
    }
}
