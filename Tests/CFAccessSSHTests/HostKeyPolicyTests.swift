import AccessTestSupport
import CFAccessSSH
import Foundation
import Testing

/// OpenSSH's known_hosts rules: the pure decisions (``HostKeyCheck``), then the ready delegate
/// (``KnownHostsVerifier``) on a real file with scripted prompts. No sshd.
@Suite("Host-key policy: known_hosts decisions and the verifier")
struct HostKeyPolicyTests {
    private static func sshString(_ bytes: [UInt8]) -> [UInt8] {
        let n = UInt32(bytes.count)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + bytes
    }

    /// An ed25519 host key blob with `fill` as its 32 key bytes.
    static func ed25519(_ fill: UInt8) -> SSHHostKey {
        SSHHostKey(blob: sshString(Array("ssh-ed25519".utf8)) + sshString([UInt8](repeating: fill, count: 32)),
                   sha256: [UInt8](repeating: fill, count: 32))
    }

    private let key = Self.ed25519(7)
    private let failed = SSHFailure(.hostKeyRejected, "Host key verification failed.")

    private func check(_ checking: SSHHostKeyChecking) -> HostKeyCheck {
        HostKeyCheck(checking: checking, entryName: "ssh.example.com", knownHostsPath: "/home/me/.ssh/known_hosts", key: key)
    }

    @Test("a known key is trusted; a changed key (of any type) and a revoked key are refused with OpenSSH's warning, in every mode")
    func knownAndChanged() {
        let other = KnownHosts.Entry(line: 3, marker: nil, key: Self.ed25519(9))
        let ca = KnownHosts.Entry(line: 4, marker: .certificateAuthority, key: Self.ed25519(5))
        for mode in [SSHHostKeyChecking.strict, .acceptNew, .ask] {
            #expect(check(mode).decide(.match) == .trust, "\(mode)")
            let changed = SSHChangedHostKey(entryName: "ssh.example.com", key: key, knownHostsPath: "/home/me/.ssh/known_hosts",
                                            known: [other])
            #expect(check(mode).decide(.mismatch, known: [other, ca]) == .refuse(notices: [.changed(changed)], failure: failed),
                    "\(mode)")
            #expect(check(mode).decide(.revoked) == .refuse(notices: [.revoked(entryName: "ssh.example.com", key: key)], failure: failed),
                    "\(mode)")
        }
    }

    @Test("an unknown key: strict refuses, accept-new adds, ask asks; yes adds, no or nobody refuses")
    func unknownKey() {
        let unknown = SSHUnknownHostKey(entryName: "ssh.example.com", key: key)
        #expect(check(.strict).decide(.unknown) == .refuse(notices: [.unknownRefused(unknown)], failure: failed))
        #expect(check(.acceptNew).decide(.unknown) == .record(notice: .added(entryName: "ssh.example.com", key: key)))
        #expect(check(.ask).decide(.unknown) == .ask(unknown))
        #expect(check(.ask).answered(true) == .record(notice: .added(entryName: "ssh.example.com", key: key)))
        #expect(check(.ask).answered(false) == .refuse(notices: [], failure: failed))
        #expect(check(.ask).answered(nil) == .refuse(notices: [], failure: failed))
    }

    @Test("the question reads answers as OpenSSH does: yes or the fingerprint, no or empty, else ask again")
    func answers() {
        let question = SSHUnknownHostKey(entryName: "[ssh.example.com]:2222", key: key)
        #expect(question.interpret("yes") == true)
        #expect(question.interpret(" YES ") == true)
        #expect(question.interpret(key.fingerprint) == true)
        #expect(question.interpret("no") == false)
        #expect(question.interpret("") == false)
        #expect(question.interpret("y") == nil)
        #expect(question.interpret(String(key.fingerprint.dropLast())) == nil)
        #expect(question.text == "The authenticity of host '[ssh.example.com]:2222' can't be established.\n"
                + "ED25519 key fingerprint is \(key.fingerprint).")
    }

    @Test("the notices in OpenSSH's words")
    func noticeTexts() {
        let known = [KnownHosts.Entry(line: 7, marker: nil, key: Self.ed25519(9))]
        let warning = SSHHostKeyNotice.changed(.init(entryName: "[h.test]:2222", key: key, knownHostsPath: "/k/known_hosts",
                                                     known: known)).text
        #expect(warning.contains("WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!"))
        #expect(warning.contains("The fingerprint for the ED25519 key sent by the remote host is\n\(key.fingerprint)."))
        #expect(warning.contains("Add correct host key in /k/known_hosts to get rid of this message."))
        #expect(warning.contains("Offending ED25519 key in /k/known_hosts:7\n  remove with:\n  ssh-keygen -f \"/k/known_hosts\" -R \"[h.test]:2222\""))
        #expect(warning.hasSuffix("\nHost key for [h.test]:2222 has changed and you have requested strict checking."))
        #expect(SSHHostKeyNotice.revoked(entryName: "h.test", key: key).text == """
            @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
            @       WARNING: REVOKED HOST KEY DETECTED!               @
            @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
            The ED25519 host key for h.test is marked as revoked.
            This could mean that a stolen key is being used to
            impersonate this host.
            ED25519 host key for h.test was revoked and you have requested strict checking.
            """)
        #expect(SSHHostKeyNotice.added(entryName: "ssh.example.com", key: key).text
                == "Warning: Permanently added 'ssh.example.com' (ED25519) to the list of known hosts.")
    }

    // MARK: The verifier on a real file

    private func verifier(_ file: String, _ checking: SSHHostKeyChecking, port: Int = 22,
                          prompt: ScriptedPrompts?) -> KnownHostsVerifier {
        KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: file), otherKnownHosts: [], host: "SSH.Example.com",
                                                port: port, checking: checking),
                           prompt: prompt)
    }

    @Test("every file counts (issue 25.2.1): a key pinned in another file is a changed key even for accept-new, an @revoked line there refuses, a key known there is trusted; only the first file is written")
    func everyFileCounts() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let first = directory.path + "/known_hosts", global = directory.path + "/ssh_known_hosts"
        func verifier(_ checking: SSHHostKeyChecking) -> KnownHostsVerifier {
            KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: first), otherKnownHosts: [KnownHosts(path: global)],
                                                    host: "ssh.example.com", checking: checking), prompt: ScriptedPrompts())
        }
        func line(_ key: SSHHostKey, marker: String = "") -> String { "\(marker)ssh.example.com \(key.knownHostsText)\n" }

        try line(Self.ed25519(9)).write(toFile: global, atomically: true, encoding: .utf8)
        let pinned = await #expect(throws: SSHFailure.self) { try await verifier(.acceptNew).validateHostKey(key) }
        #expect(pinned == failed)
        #expect(!FileManager.default.fileExists(atPath: first), "nothing added")

        try line(key, marker: "@revoked ").write(toFile: global, atomically: true, encoding: .utf8)
        try line(key).write(toFile: first, atomically: true, encoding: .utf8)
        await #expect(throws: SSHFailure.self) { try await verifier(.acceptNew).validateHostKey(key) }

        try line(key).write(toFile: global, atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: first)
        try await verifier(.strict).validateHostKey(key)
        #expect(!FileManager.default.fileExists(atPath: first))
        #expect(await verifier(.strict).preferredHostKeyAlgorithms() == ["ssh-ed25519"], "the other file's types are asked for first too")

        try FileManager.default.removeItem(atPath: global)
        try await verifier(.acceptNew).validateHostKey(key)
        #expect(try String(contentsOfFile: first, encoding: .utf8) == line(key))

        let changed = SSHChangedHostKey(entryName: "ssh.example.com", key: key, knownHostsPath: first,
                                        known: [KnownHosts.Entry(line: 2, marker: nil, key: Self.ed25519(9), path: global)])
        let text = SSHHostKeyNotice.changed(changed).text
        #expect(text.contains("Offending ED25519 key in \(global):2") && text.contains("ssh-keygen -f \"\(global)\" -R"), "\(text)")
        #expect(text.contains("Add correct host key in \(first) to get rid of this message."))
    }

    @Test("accept-new appends the key (named for the port) and says so; the next check matches without a word")
    func acceptNewThenMatch() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/ssh/known_hosts"
        let prompt = ScriptedPrompts()
        try await verifier(file, .acceptNew, port: 2222, prompt: prompt).validateHostKey(key)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "[ssh.example.com]:2222 \(key.knownHostsText)\n")
        #expect(directory.mode(of: "ssh/known_hosts") == 0o600)
        #expect(prompt.events == [.hostKeyNotice(.added(entryName: "[ssh.example.com]:2222", key: key))])

        let quiet = ScriptedPrompts()
        try await verifier(file, .strict, port: 2222, prompt: quiet).validateHostKey(key)
        #expect(quiet.events.isEmpty)
    }

    @Test("a changed key is refused with the warning even with accept-new, and the file is left alone")
    func changedKeyRefused() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        let known = "ssh.example.com \(Self.ed25519(9).knownHostsText)\n"
        try known.write(toFile: file, atomically: true, encoding: .utf8)
        let prompt = ScriptedPrompts(hostKeyAnswer: true)
        await #expect(throws: failed) { try await verifier(file, .acceptNew, prompt: prompt).validateHostKey(key) }
        let entry = KnownHosts.entries(in: known, naming: "ssh.example.com", path: file)[0]
        #expect(prompt.events == [.hostKeyNotice(.changed(.init(entryName: "ssh.example.com", key: key, knownHostsPath: file,
                                                                 known: [entry])))])
        #expect(try String(contentsOfFile: file, encoding: .utf8) == known)
    }

    @Test("a key of ANOTHER type for a known host is a changed key: refused with accept-new and ask alike, never called unknown, never added")
    func otherTypeIsChanged() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        let known = "ssh.example.com \(KnownHostsTests.ecdsa)\n"
        try known.write(toFile: file, atomically: true, encoding: .utf8)
        for mode in [SSHHostKeyChecking.acceptNew, .ask] {
            let prompt = ScriptedPrompts(hostKeyAnswer: true)
            await #expect(throws: failed) { try await verifier(file, mode, prompt: prompt).validateHostKey(key) }
            #expect(prompt.events.count == 1, "\(mode): \(prompt.events)")
            guard case .hostKeyNotice(.changed(let changed)) = prompt.events.first else {
                Issue.record("\(mode): not the changed-key warning: \(prompt.events)")
                continue
            }
            #expect(changed.known.map(\.key.displayType) == ["ECDSA"])
            #expect(!SSHHostKeyNotice.changed(changed).text.contains("can't be established"))
        }
        #expect(try String(contentsOfFile: file, encoding: .utf8) == known)
    }

    @Test("@revoked: refused with OpenSSH's warning even with accept-new, and never added")
    func revokedRefused() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        let known = "@revoked * \(key.knownHostsText)\n"
        try known.write(toFile: file, atomically: true, encoding: .utf8)
        let prompt = ScriptedPrompts(hostKeyAnswer: true)
        await #expect(throws: failed) { try await verifier(file, .acceptNew, prompt: prompt).validateHostKey(key) }
        #expect(prompt.events == [.hostKeyNotice(.revoked(entryName: "ssh.example.com", key: key))])
        #expect(try String(contentsOfFile: file, encoding: .utf8) == known)
    }

    @Test("the verifier asks for the known key types first in the key exchange; nothing known, no preference")
    func preferredAlgorithms() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        #expect(await verifier(file, .ask, prompt: nil).preferredHostKeyAlgorithms() == nil)
        try "ssh.example.com \(KnownHostsTests.ecdsa)\n@revoked * \(KnownHostsTests.ed25519)\nssh.example.com \(KnownHostsTests.ed25519)\n"
            .write(toFile: file, atomically: true, encoding: .utf8)
        #expect(await verifier(file, .ask, prompt: nil).preferredHostKeyAlgorithms() == ["ecdsa-sha2-nistp256"],
                "a revoked key's type is not asked for because of it")
        #expect(await verifier(file, .ask, port: 2222, prompt: nil).preferredHostKeyAlgorithms() == nil)
    }

    @Test("ask: the key is shown, then the question; yes appends it, no and no answer refuse it without writing")
    func askTheQuestion() async throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        let unknown = SSHUnknownHostKey(entryName: "ssh.example.com", key: key)
        for answer in [false, nil] as [Bool?] {
            let prompt = ScriptedPrompts(hostKeyAnswer: answer)
            await #expect(throws: failed) { try await verifier(file, .ask, prompt: prompt).validateHostKey(key) }
            #expect(prompt.events == [.hostKeyNotice(.unknown(unknown)), .hostKeyQuestion(unknown)])
            #expect(!FileManager.default.fileExists(atPath: file))
        }
        let yes = ScriptedPrompts(hostKeyAnswer: true)
        try await verifier(file, .ask, prompt: yes).validateHostKey(key)
        #expect(yes.events == [.hostKeyNotice(.unknown(unknown)), .hostKeyQuestion(unknown),
                               .hostKeyNotice(.added(entryName: "ssh.example.com", key: key))])
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "ssh.example.com \(key.knownHostsText)\n")
    }

    @Test("without a prompt, ask refuses an unknown key; strict refuses it with OpenSSH's line")
    func nobodyToAsk() async {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        await #expect(throws: failed) { try await verifier(file, .ask, prompt: nil).validateHostKey(key) }
        let prompt = ScriptedPrompts(hostKeyAnswer: true)
        await #expect(throws: failed) { try await verifier(file, .strict, prompt: prompt).validateHostKey(key) }
        #expect(prompt.events == [.hostKeyNotice(.unknownRefused(SSHUnknownHostKey(entryName: "ssh.example.com", key: key)))])
        #expect(SSHHostKeyNotice.unknownRefused(SSHUnknownHostKey(entryName: "ssh.example.com", key: key)).text
                == "No ED25519 host key is known for ssh.example.com and you have requested strict checking.")
        #expect(!FileManager.default.fileExists(atPath: file))
    }
}
