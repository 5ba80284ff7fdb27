import AccessTransport
import CFAccessSSH

/// Prompts answered from scripts, recording every question and notice in order.
final class ScriptedPrompts: SSHAuthenticationPrompts, SSHHostKeyPrompt {
    /// One thing the prompts were asked or told.
    enum Event: Equatable {
        case passphrase(String)
        case password(SSHAccount)
        case keyboard(SSHKeyboardPrompt)
        case saveOffer(SSHAccount)
        case notice(SSHAuthenticationNotice)
        case hostKeyQuestion(SSHUnknownHostKey)
        case hostKeyNotice(SSHHostKeyNotice)
    }

    private struct Script {
        var passphrases: [String?]
        var passwords: [String?]
        var keyboard: [[String]?]
        var saveAnswer: Bool
        var hostKeyAnswer: Bool?
        var events: [Event] = []
    }

    let canAsk: Bool
    private let script: LockedBox<Script>

    /// Prompts that answer from these lists in order (nil once a list runs out).
    init(canAsk: Bool = true, passphrases: [String?] = [], passwords: [String?] = [], keyboard: [[String]?] = [],
         saveAnswer: Bool = false, hostKeyAnswer: Bool? = nil) {
        self.canAsk = canAsk
        script = LockedBox(Script(passphrases: passphrases, passwords: passwords, keyboard: keyboard,
                                  saveAnswer: saveAnswer, hostKeyAnswer: hostKeyAnswer))
    }

    /// Everything asked and told, in order.
    var events: [Event] { script.withLock { $0.events } }

    /// The notices only.
    var notices: [SSHAuthenticationNotice] {
        events.compactMap { if case .notice(let notice) = $0 { return notice } else { return nil } }
    }

    func passphrase(forKey keyPath: String) async -> String? {
        script.withLock { s in
            s.events.append(.passphrase(keyPath))
            return s.passphrases.isEmpty ? nil : s.passphrases.removeFirst()
        }
    }

    func password(for account: SSHAccount) async -> String? {
        script.withLock { s in
            s.events.append(.password(account))
            return s.passwords.isEmpty ? nil : s.passwords.removeFirst()
        }
    }

    func respond(to round: SSHKeyboardPrompt) async -> [String]? {
        script.withLock { s in
            s.events.append(.keyboard(round))
            return s.keyboard.isEmpty ? nil : s.keyboard.removeFirst()
        }
    }

    func confirmSavingPassword(for account: SSHAccount) async -> Bool {
        script.withLock { s in
            s.events.append(.saveOffer(account))
            return s.saveAnswer
        }
    }

    func show(_ notice: SSHAuthenticationNotice) async {
        script.withLock { $0.events.append(.notice(notice)) }
    }

    func confirm(_ question: SSHUnknownHostKey) async -> Bool? {
        script.withLock { s in
            s.events.append(.hostKeyQuestion(question))
            return s.hostKeyAnswer
        }
    }

    func show(_ notice: SSHHostKeyNotice) async {
        script.withLock { $0.events.append(.hostKeyNotice(notice)) }
    }
}

/// Passwords in memory; `unavailable` makes every call fail with that reason (as a store that
/// did not answer in time when `timedOut`).
final class MemoryPasswordStore: SSHPasswordStore {
    private let saved: LockedBox<[SSHAccount: String]>
    private let unavailable: String?
    private let timedOut: Bool

    init(saved: [SSHAccount: String] = [:], unavailable: String? = nil, timedOut: Bool = false) {
        self.saved = LockedBox(saved)
        self.unavailable = unavailable
        self.timedOut = timedOut
    }

    /// What is saved now.
    var contents: [SSHAccount: String] { saved.withLock { $0 } }

    func password(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> String? {
        if let unavailable { throw SSHPasswordStoreFailure(reason: unavailable, timedOut: timedOut) }
        return saved.withLock { $0[account] }
    }

    func save(_ password: String, for account: SSHAccount) async throws(SSHPasswordStoreFailure) {
        if let unavailable { throw SSHPasswordStoreFailure(reason: unavailable, timedOut: timedOut) }
        saved.withLock { $0[account] = password }
    }

    func remove(for account: SSHAccount) async throws(SSHPasswordStoreFailure) -> Bool {
        if let unavailable { throw SSHPasswordStoreFailure(reason: unavailable, timedOut: timedOut) }
        return saved.withLock { $0.removeValue(forKey: account) != nil }
    }
}

/// A server that accepts only the offers it was given, refusing the others with the failure
/// kind scripted for them (authentication refused by default), and records every offer tried.
final class ScriptedServer: Sendable {
    private let accepted: [SSHAuthenticationOffer]
    private let failures: [SSHAuthenticationOffer: SSHFailure]
    private let tried = LockedBox<[SSHAuthenticationOffer]>([])

    init(accepting accepted: [SSHAuthenticationOffer], failing failures: [SSHAuthenticationOffer: SSHFailure] = [:]) {
        self.accepted = accepted
        self.failures = failures
    }

    /// The offers tried, in order.
    var offers: [SSHAuthenticationOffer] { tried.withLock { $0 } }

    /// Tries `offer` as a server would.
    func attempt(_ offer: SSHAuthenticationOffer) throws(SSHFailure) {
        tried.withLock { $0.append(offer) }
        if accepted.contains(offer) { return }
        throw failures[offer] ?? SSHFailure(.authenticationFailed, "Authentication failed")
    }
}
