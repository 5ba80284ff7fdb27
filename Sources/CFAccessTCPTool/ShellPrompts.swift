import AccessTransport
import CFAccessSSH
import Dispatch
import FoundationEssentials

/// The shell's questions and notices: the library's prompt protocols answered on the controlling
/// terminal (`/dev/tty`, never stdin or stdout, which may carry a command's data); notices go to
/// stderr in the tool's words. The terminal is read on a queue of its own, never on Swift's pool.
final class TerminalPrompts: SSHHostKeyPrompt, SSHAuthenticationPrompts {
    let prompter = TerminalPrompter()
    private let queue = DispatchQueue(label: "cf-access-tcp.terminal-prompts")
    /// Set when an unknown host key could not be asked about (no terminal), for the failure line.
    private let unaskedHostKey = LockedBox(false)
    /// `-q`: informational notices (a key added to known_hosts) are not shown.
    private let quiet: Bool

    /// `BatchMode`: nothing is ever asked, as if there were no terminal.
    private let batch: Bool

    init(quiet: Bool = false, batch: Bool = false) {
        self.quiet = quiet
        self.batch = batch
    }

    /// Whether there is a terminal to ask (never in batch mode).
    var canAsk: Bool { !batch && prompter.isAvailable }

    /// Whether a host-key question found no terminal to ask.
    var hostKeyQuestionUnasked: Bool { unaskedHostKey.withLock { $0 } }

    /// Shows `prompt` on the terminal and reads one line, off Swift's pool.
    private func ask(_ prompt: String, echo: Bool) async -> String? {
        let prompter = self.prompter
        return await withCheckedContinuation { continuation in
            queue.async { continuation.resume(returning: prompter.readLine(prompt: prompt, echo: echo)) }
        }
    }

    // MARK: Host keys

    func confirm(_ question: SSHUnknownHostKey) async -> Bool? {
        if batch { return nil }
        guard prompter.isAvailable else {
            unaskedHostKey.withLock { $0 = true }
            return nil
        }
        var prompt = question.question
        while true {
            guard let answer = await ask(prompt, echo: true) else { return false }
            if let decided = question.interpret(answer) { return decided }
            prompt = question.retryQuestion
        }
    }

    func show(_ notice: SSHHostKeyNotice) async {
        if case .added = notice, quiet { return }
        if case .unknown = notice, prompter.isAvailable {
            prompter.say(notice.text + "\n")   // part of the question
        } else {
            writeStderr(notice.text)
        }
    }

    // MARK: Authentication

    func passphrase(forKey keyPath: String) async -> String? {
        await ask("Enter passphrase for key '\(keyPath)': ", echo: false)
    }

    func password(for account: SSHAccount) async -> String? {
        await ask("\(account.user)@\(account.host)'s password: ", echo: false)
    }

    func respond(to round: SSHKeyboardPrompt) async -> [String]? {
        guard prompter.isAvailable else { return nil }
        // The library made the server's texts visible-safe; shown as OpenSSH shows them.
        if !round.name.isEmpty { prompter.say(round.name + "\n") }
        if !round.instruction.isEmpty { prompter.say(round.instruction + "\n") }
        var answers: [String] = []
        for question in round.questions {
            answers.append(await ask(question.text, echo: question.echo) ?? "")
        }
        return answers
    }

    func confirmSavingPassword(for account: SSHAccount) async -> Bool {
        let answer = await ask("Save password for future connections? [y/N] ", echo: true)?
            .trimmingHorizontalWhitespace.lowercased()
        return answer == "y" || answer == "yes"
    }

    func show(_ notice: SSHAuthenticationNotice) async {
        switch notice {
        case .banner(let text):
            // As ssh: on stderr, not with -q (or LogLevel QUIET/ERROR).
            guard !quiet else { return }
            var lines = text
            while lines.hasSuffix("\n") || lines.hasSuffix("\r") { lines.removeLast() }
            writeStderr(lines)
        case .noOneToAskForPassword:
            writeStderr("cf-access-tcp: no terminal to ask for a password (the password is never read from stdin)")
        case .passwordNotSavable(let reason):
            writeStderr("cf-access-tcp: the password cannot be saved: \(reason)")
        case .passwordNotSaved(let reason):
            writeStderr("cf-access-tcp: the password was not saved: \(reason)")
        case .passwordSaved(let account):
            writeStderr("Password saved in the keyring for \(account).")
        case .passwordStoreUnavailable(let reason):
            writeStderr("cf-access-tcp: the saved password cannot be looked up: \(reason)")
        default:
            writeStderr(notice.message)
        }
    }
}
