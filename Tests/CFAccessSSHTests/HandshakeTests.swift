import CFAccessSSH
import Testing

/// The handshake's pure parts (issue 16 points 1, 4, 9): what comes before the server's
/// identification, the server's KEXINIT, the host-key algorithm order, why a key exchange
/// failed. No server.
@Suite("Handshake: identification, KEXINIT, host-key order, negotiation failures")
struct HandshakeTests {
    @Test("lines before the identification are dropped; the identification and what follows are handed on, even fed byte by byte")
    func preBannerLines() {
        let bytes = Array("Welcome\r\nplease wait\r\nSSH-2.0-OpenSSH_9.2p1 Debian-2\r\n\u{0}\u{0}\u{1}".utf8)
        var scanner = IdentificationScanner()
        for (index, byte) in bytes.enumerated() {
            let outcome = scanner.feed([byte])
            #expect(outcome == (index < bytes.count - 4 ? .needMore : .identified), "byte \(index)")
            if outcome == .identified { break }
        }
        #expect(scanner.ignoredLines == 2)
        #expect(scanner.identification == "SSH-2.0-OpenSSH_9.2p1 Debian-2")
        #expect(scanner.passOn == Array("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n".utf8))
        #expect(scanner.identificationLineLength == 32)

        var atOnce = IdentificationScanner()
        #expect(atOnce.feed(bytes) == .identified)
        #expect(atOnce.passOn == Array("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n\u{0}\u{0}\u{1}".utf8))
    }

    @Test("not an SSH server: 8192 bytes without a line end, more than 1024 lines, a NUL byte, an identification over 255 bytes")
    func notSSH() {
        var junk = IdentificationScanner()
        #expect(junk.feed([UInt8](repeating: 0x41, count: 8192)) == .needMore)
        guard case .refused(let why) = junk.feed([0x41]) else { Issue.record("8193 bytes accepted"); return }
        #expect(why.hasPrefix("not an SSH server: it sent 8192 bytes without a line end and no SSH identification"))
        #expect(why.contains("(it began \"AAAAAAAA"))

        var flood = IdentificationScanner()
        #expect(flood.feed(Array(String(repeating: "hello\r\n", count: 1024).utf8)) == .needMore)
        #expect(flood.feed(Array("hello\r\n".utf8)) == .refused(
            "not an SSH server: it sent more than 1024 lines and no SSH identification (it began \"hello\")"))

        var binary = IdentificationScanner()
        #expect(binary.feed([0x16, 0x03, 0x01, 0x00]) == .refused(
            "not an SSH server: it sent a NUL byte and no SSH identification (it began \"\\026\\003\\001\\000\")"))

        var long = IdentificationScanner()
        let outcome = long.feed(Array(("SSH-2.0-" + String(repeating: "x", count: 250) + "\r\n").utf8))
        #expect(outcome == .refused("the SSH server's identification line is longer than 255 bytes (RFC 4253)"))
    }

    @Test("the server's text in a refusal is visible-safe")
    func refusalIsVisibleSafe() {
        var scanner = IdentificationScanner()
        _ = scanner.feed(Array("\u{1B}]0;pwned\u{07}\r\n".utf8) + [UInt8](repeating: 0x20, count: 9000))
        guard case .refused(let why) = scanner.outcome else { Issue.record("accepted"); return }
        #expect(why.contains("\\033]0;pwned\\007"))
        #expect(!why.unicodeScalars.contains { $0.value < 0x20 })
    }

    /// A binary packet holding a KEXINIT with these lists (the rest empty).
    @Test("host-key algorithms: the known types first (RSA as rsa-sha2 then ssh-rsa), then OpenSSH's order; only what libssh2 supports; never certificates or DSA")
    func hostKeyOrder() {
        let libssh2_1_10 = ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                            "ecdsa-sha2-nistp256-cert-v01@openssh.com", "ssh-ed25519", "ssh-rsa", "ssh-dss"]
        #expect(HostKeyAlgorithms.preference(preferred: nil, supported: libssh2_1_10)
                == ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"])
        let known = HostKeyAlgorithms.preferred(forKnownTypes: ["ecdsa-sha2-nistp256"])
        #expect(known == ["ecdsa-sha2-nistp256"])
        #expect(HostKeyAlgorithms.preference(preferred: known, supported: libssh2_1_10).first == "ecdsa-sha2-nistp256")
        #expect(HostKeyAlgorithms.preferred(forKnownTypes: ["ssh-rsa", "ssh-ed25519"]) == ["ssh-ed25519", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"])
        let libssh2_1_11 = libssh2_1_10 + ["rsa-sha2-512", "rsa-sha2-256"]
        #expect(HostKeyAlgorithms.preference(preferred: HostKeyAlgorithms.preferred(forKnownTypes: ["ssh-rsa"]), supported: libssh2_1_11)
                == ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa", "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521"])
    }

    @Test("a failed key exchange is explained from libssh's error: which list has nothing in common, both sides named; other errors are not")
    func negotiation() {
        let hostKeys = "kex error : no match for method server host key algo: server [rsa-sha2-512,rsa-sha2-256], "
            + "client [ssh-ed25519,ecdsa-sha2-nistp256]"
        #expect(NegotiationDiagnosis.explain(libsshError: hostKeys, engine: "libssh 0.10.6")
                == "No host-key algorithm in common: the SSH server offers rsa-sha2-512,rsa-sha2-256; this client "
                + "(libssh 0.10.6) offers ssh-ed25519,ecdsa-sha2-nistp256")
        let kex = "kex error : no match for method kex algos: server [diffie-hellman-group1-sha1], client [curve25519-sha256]"
        #expect(NegotiationDiagnosis.explain(libsshError: kex, engine: "libssh 0.10.6")?
            .hasPrefix("No key-exchange method in common: the SSH server offers diffie-hellman-group1-sha1;") == true)
        let cipher = "kex error : no match for method encryption client->server: server [3des-cbc], client [aes128-ctr]"
        #expect(NegotiationDiagnosis.explain(libsshError: cipher, engine: "libssh 0.10.6")?.hasPrefix("No cipher in common") == true)
        // Server text is made visible-safe.
        let hostile = "kex error : no match for method mac algo client->server: server [\u{1b}]0;pwned\u{07}], client [hmac-sha2-256]"
        let said = NegotiationDiagnosis.explain(libsshError: hostile, engine: "libssh 0.10.6") ?? ""
        #expect(said.hasPrefix("No MAC in common") && !said.contains("\u{1b}") && !said.contains("\u{07}"), "\(said)")
        #expect(NegotiationDiagnosis.explain(libsshError: "Socket error: disconnected", engine: "libssh 0.10.6") == nil)
        #expect(SSHEngineFeatures.linked.rsaLimitation == nil)
        let old = SSHEngineFeatures(version: "libssh2 1.10.0", rsaSHA2: false)
        #expect(old.rsaLimitation?.contains("which libssh2 1.10.0 cannot make") == true)
    }
}
