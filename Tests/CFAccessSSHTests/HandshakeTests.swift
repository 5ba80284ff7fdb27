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
    static func kexInitPacket(kex: String, hostKey: String, ciphers: String, macs: String) -> [UInt8] {
        func nameList(_ text: String) -> [UInt8] {
            let bytes = Array(text.utf8)
            let n = UInt32(bytes.count)
            return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + bytes
        }
        var payload: [UInt8] = [20] + [UInt8](repeating: 7, count: 16)
        for list in [kex, hostKey, ciphers, ciphers, macs, macs, "none", "none", "", ""] { payload += nameList(list) }
        payload += [0, 0, 0, 0, 0]
        let padding = 8 - (payload.count + 5) % 8 + 8
        let length = UInt32(payload.count + padding + 1)
        return [UInt8(length >> 24), UInt8((length >> 16) & 0xff), UInt8((length >> 8) & 0xff), UInt8(length & 0xff),
                UInt8(padding)] + payload + [UInt8](repeating: 0, count: padding)
    }

    @Test("KEXINIT: the server's lists are read from its first packet; a cut or foreign packet is not")
    func kexInit() {
        let packet = Self.kexInitPacket(kex: "curve25519-sha256,ecdh-sha2-nistp256", hostKey: "rsa-sha2-512,rsa-sha2-256",
                                        ciphers: "aes128-ctr", macs: "hmac-sha2-256")
        let parsed = KexInit.parse(packet: packet)
        #expect(parsed == KexInit(kex: ["curve25519-sha256", "ecdh-sha2-nistp256"], hostKey: ["rsa-sha2-512", "rsa-sha2-256"],
                                  ciphers: ["aes128-ctr"], macs: ["hmac-sha2-256"]))
        #expect(KexInit.parse(packet: Array(packet.prefix(40))) == nil)
        var other = packet
        other[5] = 21
        #expect(KexInit.parse(packet: other) == nil)
    }

    @Test("ciphers: OpenSSH's client order first (aes128-ctr before aes256-ctr with libssh2 1.10), then libssh2's other ciphers in its order")
    func cipherOrder() {
        let libssh2_1_10 = ["aes256-ctr", "aes192-ctr", "aes128-ctr", "aes256-cbc", "rijndael-cbc@lysator.liu.se",
                            "aes192-cbc", "aes128-cbc", "3des-cbc"]
        #expect(CipherAlgorithms.preference(supported: libssh2_1_10)
                == ["aes128-ctr", "aes192-ctr", "aes256-ctr", "aes256-cbc", "rijndael-cbc@lysator.liu.se",
                    "aes192-cbc", "aes128-cbc", "3des-cbc"])
        let withGCM = ["aes256-gcm@openssh.com", "aes128-gcm@openssh.com"] + libssh2_1_10
        #expect(Array(CipherAlgorithms.preference(supported: withGCM).prefix(5))
                == ["aes128-ctr", "aes192-ctr", "aes256-ctr", "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"])
        #expect(CipherAlgorithms.preference(supported: []) == [])
    }

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

    @Test("a failed key exchange is explained: an RSA-only server with libssh2 1.10 names the version and the way out; other lists name both sides; 1.11 says no RSA limitation")
    func negotiation() {
        let old = LibSSH2Features(version: "1.10.0", rsaSHA2: false)
        let new = LibSSH2Features(version: "1.11.0", rsaSHA2: true)
        let ours = (hostKeys: ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"], kex: ["curve25519-sha256"],
                    ciphers: ["aes128-ctr"], macs: ["hmac-sha2-256"])
        let rsaOnly = KexInit(kex: ["curve25519-sha256"], hostKey: ["rsa-sha2-512", "rsa-sha2-256"], ciphers: ["aes128-ctr"],
                              macs: ["hmac-sha2-256"])
        let said = NegotiationDiagnosis.explain(server: rsaOnly, hostKeysOffered: ours.hostKeys, kexOffered: ours.kex,
                                                ciphersOffered: ours.ciphers, macsOffered: ours.macs, features: old)
        #expect(said == "The SSH server has only an RSA host key (it offers rsa-sha2-512,rsa-sha2-256): RSA keys need libssh2 ≥ 1.11 "
                + "(this is libssh2 1.10.0: it signs and verifies RSA only as ssh-rsa, SHA-1, which OpenSSH ≥ 8.8 refuses); "
                + "use an ed25519 or ECDSA key, or ssh with ProxyCommand")
        let newer = NegotiationDiagnosis.explain(server: rsaOnly, hostKeysOffered: ours.hostKeys, kexOffered: ours.kex,
                                                 ciphersOffered: ours.ciphers, macsOffered: ours.macs, features: new)
        #expect(newer == "No host-key algorithm in common: the SSH server offers rsa-sha2-512,rsa-sha2-256; this client "
                + "(libssh2 1.11.0) offers ssh-ed25519,ecdsa-sha2-nistp256,ssh-rsa")
        let oldKex = KexInit(kex: ["diffie-hellman-group1-sha1"], hostKey: ["ssh-ed25519"], ciphers: ["aes128-ctr"], macs: ["hmac-sha2-256"])
        #expect(NegotiationDiagnosis.explain(server: oldKex, hostKeysOffered: ours.hostKeys, kexOffered: ours.kex,
                                             ciphersOffered: ours.ciphers, macsOffered: ours.macs, features: old)?
            .hasPrefix("No key-exchange method in common: the SSH server offers diffie-hellman-group1-sha1;") == true)
        let fine = KexInit(kex: ["curve25519-sha256"], hostKey: ["ssh-ed25519"], ciphers: ["aes128-ctr"], macs: ["hmac-sha2-256"])
        #expect(NegotiationDiagnosis.explain(server: fine, hostKeysOffered: ours.hostKeys, kexOffered: ours.kex,
                                             ciphersOffered: ours.ciphers, macsOffered: ours.macs, features: old) == nil)
        #expect(new.rsaLimitation == nil)
    }
}
