import AccessTestSupport
import CFAccessSSH
import Foundation
import Testing

/// known_hosts read as OpenSSH reads it (issue 16 points 1 and 3): patterns, negations, hashed
/// names, markers, and the verdict for a key. No sshd.
@Suite("known_hosts: patterns, hashed names, markers, verdicts")
struct KnownHostsTests {
    /// A real ed25519 host key and an ECDSA one (public halves, as ssh-keygen wrote them).
    static let ed25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOmfH5ArQsSqnok9nZkamRpC7J9Kz2IikA7Ny6wg5nbf"
    static let ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMDrFsldGhLoBx14fZjm+7+Lsa003SWT8iqzEn+v77+J6+ZuiBxoIIJ2rJ4xfR7vHsp/XagqnNyO7sX7svJbJRw="

    static func key(_ line: String) -> SSHHostKey {
        KnownHosts.entries(in: "x \(line)\n", naming: "x")[0].key
    }

    @Test("/dev/null as known_hosts (issue 26.3): read as an empty file, so every host is unknown; adding to it succeeds and keeps nothing")
    func devNull() throws {
        let file = KnownHosts(path: "/dev/null")
        #expect(try file.entries(host: "h.example", port: 22).isEmpty)
        let key = Self.key(Self.ed25519)
        #expect(try file.check(host: "h.example", port: 22, key: key) == .unknown)
        try file.add(host: "h.example", port: 22, key: key)
        #expect(try file.entries(host: "h.example", port: 22).isEmpty)
        let type = try FileManager.default.attributesOfItem(atPath: "/dev/null")[.type] as? FileAttributeType
        #expect(type == .typeCharacterSpecial, "/dev/null is still a device")
    }

    @Test("the key's fingerprint is ssh-keygen's")
    func fingerprint() {
        #expect(Self.key(Self.ed25519).fingerprint == "SHA256:43jVFLB8yy1rL2AgLAJ8wkXZxLae5RcfMtlYTksCPwQ")
    }

    @Test("patterns as OpenSSH's match_hostname: lists, * and ?, case, [host]:port, and ! excluding whatever else matches")
    func patterns() {
        #expect(KnownHosts.patternList("ssh.example.com", matches: "ssh.example.com"))
        #expect(KnownHosts.patternList("other.test,SSH.Example.COM", matches: "ssh.example.com"))
        #expect(KnownHosts.patternList("*.example.com", matches: "ssh.example.com"))
        #expect(KnownHosts.patternList("*.example.com", matches: "a.b.example.com"))
        #expect(!KnownHosts.patternList("*.example.com", matches: "example.com"))
        #expect(KnownHosts.patternList("ss?.example.com", matches: "ssh.example.com"))
        #expect(!KnownHosts.patternList("s?.example.com", matches: "ssh.example.com"))
        #expect(KnownHosts.patternList("*", matches: "anything"))
        #expect(!KnownHosts.patternList("*.example.com,!ssh.example.com", matches: "ssh.example.com"))
        #expect(!KnownHosts.patternList("!ssh.example.com,*", matches: "ssh.example.com"))
        #expect(KnownHosts.patternList("!ssh.example.com,*", matches: "web.example.com"))
        #expect(!KnownHosts.patternList("!web.example.com", matches: "ssh.example.com"), "a negation alone matches nothing")
        #expect(!KnownHosts.patternList("*.example.com", matches: "[ssh.example.com]:2222"), "the port is part of the name")
        #expect(KnownHosts.patternList("[*.example.com]:2222", matches: "[ssh.example.com]:2222"))
        #expect(KnownHosts.patternList("*a*b*c", matches: "xaxxbxxxc"))
        #expect(!KnownHosts.patternList("*a*b*c", matches: "xaxxbxxxcd"))
    }

    @Test("hashed names (ssh-keygen -H) match their host and port only")
    func hashed() {
        // Written by ssh-keygen -H for ssh.example.com and [ssh.example.com]:2222.
        let plain22 = "|1|RLL9fPQcEXw7TQQPybqrXmyXCHk=|3Mz+pO5ooLW/8QFd1PPOgrGvZHs="
        let port2222 = "|1|7V7TlkjWJlkPqgiGFvQ2B3HlyoQ=|TRch9KrtOPc/3a+Uh678m6Ewmh4="
        #expect(KnownHosts.hostField(plain22[...], matches: "ssh.example.com"))
        #expect(!KnownHosts.hostField(plain22[...], matches: "ssh.example.org"))
        #expect(!KnownHosts.hostField(plain22[...], matches: "[ssh.example.com]:2222"))
        #expect(KnownHosts.hostField(port2222[...], matches: "[ssh.example.com]:2222"))
        #expect(!KnownHosts.hostField("|1|broken"[...], matches: "ssh.example.com"))
        // Written as ssh-keygen writes them: the same salt gives ssh-keygen's field, and a new
        // salt each time otherwise.
        let salt = [UInt8](Data(base64Encoded: "RLL9fPQcEXw7TQQPybqrXmyXCHk=")!)
        #expect(KnownHosts.hashedName("ssh.example.com", salt: salt) == plain22)
        let written = KnownHosts.hashedName("[ssh.example.com]:2222")
        #expect(KnownHosts.hostField(written[...], matches: "[ssh.example.com]:2222") && written != KnownHosts.hashedName("[ssh.example.com]:2222"))
    }

    @Test("entries: markers read, comments and broken lines skipped, line numbers kept, key type checked against the blob")
    func entries() {
        let text = """
        # a comment
        *.example.com \(Self.ed25519)
        @revoked * \(Self.ecdsa)
        @cert-authority *.example.com \(Self.ecdsa)
        @unknown-marker ssh.example.com \(Self.ed25519)
        ssh.example.com ssh-rsa \(Self.ed25519.split(separator: " ")[1])
        ssh.example.com ssh-ed25519 !!!notbase64
        other.test \(Self.ecdsa)

        """
        let found = KnownHosts.entries(in: text, naming: "ssh.example.com")
        #expect(found.map(\.line) == [2, 3, 4])
        #expect(found.map(\.marker) == [nil, .revoked, .certificateAuthority])
        #expect(found[0].key == Self.key(Self.ed25519))
    }

    @Test("verdicts: match; another key of the same or ANOTHER type is a changed key; @revoked wins; @cert-authority alone leaves the host unknown")
    func verdicts() {
        let ed = Self.key(Self.ed25519), ec = Self.key(Self.ecdsa)
        func verdict(_ text: String, _ key: SSHHostKey) -> KnownHosts.Verdict {
            KnownHosts.verdict(for: key, among: KnownHosts.entries(in: text, naming: "ssh.example.com"))
        }
        #expect(verdict("ssh.example.com \(Self.ed25519)\n", ed) == .match)
        #expect(verdict("ssh.example.com \(Self.ed25519)\n", ec) == .mismatch, "known by ed25519, an ECDSA key is a changed key")
        #expect(verdict("ssh.example.com \(Self.ecdsa)\nssh.example.com \(Self.ed25519)\n", ed) == .match)
        #expect(verdict("ssh.example.com \(Self.ed25519)\n@revoked * \(Self.ed25519)\n", ed) == .revoked)
        #expect(verdict("@revoked ssh.example.com \(Self.ecdsa)\n", ec) == .revoked)
        #expect(verdict("@revoked ssh.example.com \(Self.ecdsa)\n", ed) == .unknown)
        #expect(verdict("@cert-authority *.example.com \(Self.ed25519)\n", ed) == .unknown)
        #expect(verdict("*.example.com,!ssh.example.com \(Self.ed25519)\n", ec) == .unknown)
        #expect(verdict("", ed) == .unknown)
    }

    @Test("add writes one plain line; a host that is a pattern or host:port is refused and nothing is written")
    func addRefusesPatterns() throws {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = KnownHosts(path: directory.path + "/known_hosts")
        let ed = Self.key(Self.ed25519)
        for bad in ["ssh.example.com:22", "*.example.com", "a,b", "!x", "[x]:2", "x y", "x\u{1B}"] {
            #expect(throws: SSHFailure.self, "\(bad)") { try file.add(host: bad, port: 22, key: ed) }
        }
        #expect(!FileManager.default.fileExists(atPath: file.path))
        try file.add(host: "SSH.example.com", port: 2222, key: ed)
        #expect(try String(contentsOfFile: file.path, encoding: .utf8) == "[ssh.example.com]:2222 \(Self.ed25519)\n")
        #expect(try file.check(host: "ssh.example.com", port: 2222, key: ed) == .match)
        #expect(try file.check(host: "ssh.example.com", port: 22, key: ed) == .unknown)
    }
}
