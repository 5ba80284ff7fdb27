import AccessCore
import AccessTestSupport
import AccessTransport
import CFAccessSSH
import Foundation
import Testing

/// Host certificates (issue 25 part 2 point 2): OpenSSH's certificates, made by ssh-keygen
/// (``HostCertificateVectors``), read, their CA signatures checked with OpenSSL, OpenSSH's rules
/// applied, and the verifier's decisions against `@cert-authority` lines. No sshd.
@Suite("Host certificates: parsing, CA signatures, OpenSSH's rules, the verifier")
struct HostCertificateTests {
    /// The blob of a `type base64` line.
    private static func blob(_ line: String) -> [UInt8] {
        Base64.decode(String(line.split(separator: " ")[1]), alphabet: .standard) ?? []
    }

    private static func key(_ line: String) -> SSHHostKey {
        let bytes = blob(line)
        return SSHHostKey(blob: bytes, sha256: Digest.sha256(bytes))
    }

    private static func certificate(_ name: String) throws -> OpenSSHCertificate {
        try OpenSSHCertificate.parse(blob: blob(HostCertificateVectors.certificates[name]!))
    }

    private static let inside = Date(timeIntervalSince1970: 1_800_000_000)   // 2027

    @Test("a host certificate blob is read: the certified key, type, principals, validity, critical options, CA key, signature and what it covers")
    func parsing() throws {
        let certificate = try Self.certificate("ed25519")
        #expect(certificate.type == "ssh-ed25519-cert-v01@openssh.com")
        #expect(certificate.publicKey.blob == Self.blob(HostCertificateVectors.hostKey))
        #expect(certificate.certificateType == OpenSSHCertificate.hostCertificate && certificate.serial == 7)
        #expect(certificate.principals == ["ssh.cfat.test", "*.wild.test"] && certificate.keyID == "ed25519")
        #expect(certificate.validAfter > 0 && certificate.validBefore < UInt64.max)
        #expect(certificate.criticalOptions.isEmpty)
        #expect(certificate.signatureKey == Self.blob(HostCertificateVectors.authorities["ed25519"]!))
        let whole = Self.blob(HostCertificateVectors.certificates["ed25519"]!)
        #expect(certificate.signedBytes == Array(whole.prefix(certificate.signedBytes.count)))
        #expect(certificate.signedBytes.count + 4 + certificate.signature.count == whole.count)
        #expect(try Self.certificate("critical").criticalOptions == ["force-command"])
        #expect(try Self.certificate("anyhost").principals.isEmpty)
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHCertificate.parse(blob: Self.blob(HostCertificateVectors.hostKey)) }
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHCertificate.parse(blob: Array(whole.dropLast(3))) }
    }

    @Test("CA signatures verify with OpenSSL for every CA type (ed25519, ECDSA P-256/384/521, RSA with SHA-256/512); a changed byte or another CA does not; ssh-rsa (SHA-1) is disallowed, as OpenSSH's CASignatureAlgorithms")
    func signatures() throws {
        for name in ["ed25519", "ecdsa256", "ecdsa384", "ecdsa521", "rsa256", "rsa512"] {
            let certificate = try Self.certificate(name)
            #expect(SSHSignatureVerifier.check(signature: certificate.signature, data: certificate.signedBytes,
                                               publicKey: certificate.signatureKey) == .valid, "\(name)")
            var changed = certificate.signedBytes
            changed[changed.count / 2] ^= 0x01
            #expect(SSHSignatureVerifier.check(signature: certificate.signature, data: changed,
                                               publicKey: certificate.signatureKey) == .invalid, "\(name) changed")
            let other = Self.blob(HostCertificateVectors.authorities[name == "ed25519" ? "ecdsa256" : "ed25519"]!)
            #expect(SSHSignatureVerifier.check(signature: certificate.signature, data: certificate.signedBytes,
                                               publicKey: other) != .valid, "\(name) by another CA")
        }
        let sha1 = try Self.certificate("sha1")
        #expect(SSHSignatureVerifier.check(signature: sha1.signature, data: sha1.signedBytes, publicKey: sha1.signatureKey)
                == .disallowed("ssh-rsa"))
        #expect(SSHSignatureVerifier.check(signature: [0, 0], data: [], publicKey: sha1.signatureKey) == .invalid)
    }

    @Test("OpenSSH's rules: a host certificate, within its validity, naming the host (wildcards; none names any host), no critical option")
    func rules() throws {
        let certificate = try Self.certificate("ed25519")
        #expect(HostCertificateRules.problem(certificate, host: "ssh.cfat.test", now: Self.inside) == nil)
        #expect(HostCertificateRules.problem(certificate, host: "a.wild.test", now: Self.inside) == nil)
        #expect(HostCertificateRules.problem(certificate, host: "other.cfat.test", now: Self.inside)
                == "Certificate invalid: name is not a listed principal")
        #expect(HostCertificateRules.problem(certificate, host: "ssh.cfat.test", now: Date(timeIntervalSince1970: 1_000_000_000))
                == "Certificate invalid: not yet valid")
        #expect(HostCertificateRules.problem(certificate, host: "ssh.cfat.test", now: Date(timeIntervalSince1970: 4_200_000_000))
                == "Certificate invalid: expired")
        #expect(HostCertificateRules.problem(try Self.certificate("user"), host: "ssh.cfat.test", now: Self.inside)
                == "Certificate invalid: not a host certificate")
        #expect(HostCertificateRules.problem(try Self.certificate("critical"), host: "ssh.cfat.test", now: Self.inside)
                == "Certificate for ssh.cfat.test contains unsupported critical options(s)")
        #expect(HostCertificateRules.problem(try Self.certificate("anyhost"), host: "whatever.example", now: Self.inside) == nil)
    }

    // MARK: The verifier

    private func verify(_ name: String, host: String = "ssh.cfat.test", lines: [String], checking: SSHHostKeyChecking = .strict,
                        certificate: SSHHostKey? = nil) async -> (failure: SSHFailure?, prompt: ScriptedPrompts, file: String) {
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        try? lines.map { $0 + "\n" }.joined().write(toFile: file, atomically: true, encoding: .utf8)
        let prompt = ScriptedPrompts()
        let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: file), otherKnownHosts: [], host: host,
                                                               checking: checking), prompt: prompt)
        var failure: SSHFailure?
        do {
            try await verifier.validateHostKey(certificate ?? Self.key(HostCertificateVectors.certificates[name]!))
        } catch {
            failure = error
        }
        return (failure, prompt, (try? String(contentsOfFile: file, encoding: .utf8)) ?? "")
    }

    private func authority(_ name: String, pattern: String = "*.cfat.test") -> String {
        "@cert-authority \(pattern) \(HostCertificateVectors.authorities[HostCertificateVectors.signedBy[name]!]!)"
    }

    @Test("a certificate from a CA known_hosts trusts for the host is trusted, with nothing asked, told or written, for every CA type; the CA asks for certificates first")
    func trusted() async throws {
        for name in ["ed25519", "ecdsa256", "ecdsa384", "ecdsa521", "rsa256", "rsa512"] {
            let result = await verify(name, lines: [authority(name)])
            #expect(result.failure == nil && result.prompt.events.isEmpty, "\(name): \(String(describing: result.failure)) \(result.prompt.events)")
            #expect(result.file == authority(name) + "\n")
        }
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path + "/known_hosts"
        try (authority("ed25519") + "\nssh.cfat.test \(HostCertificateVectors.hostKey)\n").write(toFile: file, atomically: true, encoding: .utf8)
        let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: file), otherKnownHosts: [], host: "ssh.cfat.test"))
        let preferred = await verifier.preferredHostKeyAlgorithms() ?? []
        #expect(Array(preferred.prefix(2)) == ["ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com"])
        #expect(preferred.contains("ssh-ed25519"))
    }

    @Test("a certificate that does not hold is said in OpenSSH's words, then its key is judged as a plain key (unknown: refused when strict, added with accept-new; known: trusted)")
    func fallsBackToThePlainKey() async throws {
        let plain = Self.key(HostCertificateVectors.hostKey)
        let failed = SSHFailure(.hostKeyRejected, "Host key verification failed.")
        let wrongHost = await verify("ed25519", host: "other.cfat.test", lines: [authority("ed25519")])
        #expect(wrongHost.failure == failed)
        #expect(wrongHost.prompt.events.count == 2)
        #expect(wrongHost.prompt.events.first.map { "\($0)" }?.contains("Certificate invalid: name is not a listed principal") == true,
                "\(wrongHost.prompt.events)")
        #expect(wrongHost.prompt.events.last == .hostKeyNotice(.unknownRefused(SSHUnknownHostKey(entryName: "other.cfat.test", key: plain))))

        let added = await verify("critical", lines: [authority("critical")], checking: .acceptNew)
        #expect(added.failure == nil)
        #expect(added.file.hasSuffix("ssh.cfat.test \(HostCertificateVectors.hostKey)\n"), "the plain key is written: \(added.file)")
        #expect(added.prompt.events.first.map { "\($0)" }?.contains("unsupported critical options") == true)

        let known = await verify("user", lines: [authority("user"), "ssh.cfat.test \(HostCertificateVectors.hostKey)"])
        #expect(known.failure == nil && known.prompt.events.count == 1, "\(known.prompt.events)")

        let sha1 = await verify("sha1", lines: [authority("sha1")])
        #expect(sha1.failure == failed)
        #expect(sha1.prompt.events.first.map { "\($0)" }?.contains("ED25519-CERT certificate signed using disallowed signature algorithm ssh-rsa") == true,
                "\(sha1.prompt.events)")

        // A CA known_hosts does not name for this host: the plain key, silently (OpenSSH's "No matching CA found").
        let unnamed = await verify("ed25519", lines: [authority("ed25519", pattern: "*.elsewhere.test"), "ssh.cfat.test \(HostCertificateVectors.hostKey)"])
        #expect(unnamed.failure == nil && unnamed.prompt.events.isEmpty, "\(unnamed.prompt.events)")
    }

    @Test("refused outright: a revoked CA or certified key (OpenSSH's warning), a signature that does not verify with the trusted CA, a malformed certificate")
    func refused() async throws {
        let failed = SSHFailure(.hostKeyRejected, "Host key verification failed.")
        let revokedCA = await verify("ed25519", lines: [authority("ed25519"), "@revoked * \(HostCertificateVectors.authorities["ed25519"]!)"],
                                     checking: .acceptNew)
        #expect(revokedCA.failure == failed)
        #expect(revokedCA.prompt.events.first.map { "\($0)" }?.contains("revoked") == true, "\(revokedCA.prompt.events)")
        let revokedKey = await verify("ed25519", lines: [authority("ed25519"), "@revoked * \(HostCertificateVectors.hostKey)"])
        #expect(revokedKey.failure == failed)
        #expect(revokedKey.prompt.events == [.hostKeyNotice(.revoked(entryName: "ssh.cfat.test", key: Self.key(HostCertificateVectors.hostKey)))])

        // The certificate with one byte of its principals changed: the CA's signature no longer holds.
        var forged = Self.blob(HostCertificateVectors.certificates["ed25519"]!)
        let text = Array("ssh.cfat.test".utf8)
        let at = try #require((0..<(forged.count - text.count)).first { Array(forged[$0..<($0 + text.count)]) == text })
        forged[at] = UInt8(ascii: "x")
        let forgedKey = SSHHostKey(blob: forged, sha256: Digest.sha256(forged))
        let impostor = await verify("ed25519", host: "xsh.cfat.test", lines: [authority("ed25519")], checking: .acceptNew, certificate: forgedKey)
        #expect(impostor.failure == failed)
        #expect(impostor.prompt.events.first.map { "\($0)" }?.contains("signature does not verify") == true, "\(impostor.prompt.events)")
        #expect(impostor.file == authority("ed25519") + "\n", "nothing added")

        let cut = Array(Self.blob(HostCertificateVectors.certificates["ed25519"]!).dropLast(10))
        let malformed = await verify("ed25519", lines: [authority("ed25519")], checking: .acceptNew,
                                     certificate: SSHHostKey(blob: cut, sha256: Digest.sha256(cut)))
        #expect(malformed.failure == failed)
        #expect(malformed.prompt.events.first.map { "\($0)" }?.contains("malformed") == true)
    }

    @Test("a certificate's type and name: ED25519-CERT; a host a CA vouches for keeps its engine (the certificate is read on a connection of its own, whichever library runs the session)")
    func namesAndEngine() {
        let certificate = Self.key(HostCertificateVectors.certificates["ed25519"]!)
        #expect(certificate.isCertificate && certificate.displayType == "ED25519-CERT")
        #expect(!Self.key(HostCertificateVectors.hostKey).isCertificate)
        let libssh = SSHEngineFeatures(version: "libssh 0.10.6", rsaSHA2: true, sendsTerminalModes: false)
        let libssh2 = SSHEngineFeatures(version: "libssh2 1.10.0", rsaSHA2: false, acceptsAgentChannels: false)
        #expect(SSHEngineChoice.decide(opensTerminal: true, knownHostKeyAlgorithms: ["ssh-ed25519-cert-v01@openssh.com", "ssh-ed25519"],
                                       libssh: libssh, libssh2: libssh2) == SSHEngineChoice(.libssh2, .terminalModes))
    }

    // MARK: The probe

    /// `payload` as an unencrypted packet, as a server sends it.
    private static func packet(_ payload: [UInt8]) -> [UInt8] {
        HostCertificateProbePackets.packet(payload)
    }

    private static func sshString(_ bytes: [UInt8]) -> [UInt8] {
        let n = UInt32(bytes.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)] + bytes
    }

    @Test("the probe's opening: the identification, a KEXINIT offering curve25519 and only certificate algorithms, then a 32-byte share; packets padded as RFC 4253 asks")
    func opening() throws {
        let bytes = HostCertificateProbe.opening()
        let identification = Array("SSH-2.0-cf-access-tcp\r\n".utf8)
        #expect(Array(bytes.prefix(identification.count)) == identification)
        var rest = Array(bytes.dropFirst(identification.count))
        var payloads: [[UInt8]] = []
        while !rest.isEmpty {
            let length = Int(rest[0]) << 24 | Int(rest[1]) << 16 | Int(rest[2]) << 8 | Int(rest[3])
            #expect((4 + length) % 8 == 0 && rest[4] >= 4)
            payloads.append(Array(rest[5..<(4 + length - Int(rest[4]))]))
            rest.removeFirst(4 + length)
        }
        try #require(payloads.count == 2)
        #expect(payloads[0].first == 20 && payloads[1].first == 30)
        var reader = SSHWireReader(Array(payloads[0].dropFirst(17)))
        #expect(try reader.text() == "curve25519-sha256,curve25519-sha256@libssh.org")
        #expect(try reader.text().split(separator: ",").allSatisfy { $0.hasSuffix("-cert-v01@openssh.com") })
        var share = SSHWireReader(Array(payloads[1].dropFirst()))
        #expect(try share.string().count == 32 && share.isAtEnd)
    }

    @Test("the probe reads the certificate out of the key-exchange reply, after lines before the identification, the server's KEXINIT and an SSH_MSG_IGNORE, however the bytes are split")
    func probeReadsTheCertificate() {
        let blob = Self.blob(HostCertificateVectors.certificates["ecdsa256"]!)
        let server = Array("a greeting line\r\nSSH-2.0-OpenSSH_9.2p1 Debian-2\r\n".utf8)
            + Self.packet([20] + [UInt8](repeating: 1, count: 16) + [UInt8](repeating: 0, count: 45))
            + Self.packet([2] + Self.sshString(Array("ignored".utf8)))
            + Self.packet([31] + Self.sshString(blob) + Self.sshString([UInt8](repeating: 9, count: 32)) + Self.sshString([1, 2, 3]))
        for cut in stride(from: 1, to: server.count, by: 7) {
            var probe = HostCertificateProbe()
            #expect(probe.feed(Array(server[..<cut])) == .needMore, "cut at \(cut)")
            #expect(probe.feed(Array(server[cut...])) == .certificate(blob), "cut at \(cut)")
        }
    }

    @Test("no certificate: a disconnect (its reason visible-safe), a plain key in the reply, a malformed packet, a peer that is not an SSH server")
    func probeFailures() {
        let identification = Array("SSH-2.0-OpenSSH_9.2\r\n".utf8)
        var probe = HostCertificateProbe()
        let disconnect = Self.packet([1, 0, 0, 0, 3] + Self.sshString(Array("no matching host key type\u{1b}[2J".utf8)) + Self.sshString([]))
        #expect(probe.feed(identification + disconnect)
                == .failed("the server has no host certificate to offer (it disconnected: no matching host key type\\033[2J)"))
        probe = HostCertificateProbe()
        let plain = Self.packet([31] + Self.sshString(Self.blob(HostCertificateVectors.hostKey)))
        #expect(probe.feed(identification + plain) == .failed("the server presented no certificate"))
        probe = HostCertificateProbe()
        #expect(probe.feed(identification + [0xff, 0xff, 0xff, 0xff, 4]) == .failed("the server sent a malformed packet"))
        probe = HostCertificateProbe()
        #expect(probe.feed(identification + Self.packet([31, 0, 0])) == .failed("the server's key-exchange reply is malformed"))
        probe = HostCertificateProbe()
        guard case .failed(let why) = probe.feed([0x41, 0, 0x0a]) else {
            Issue.record("a NUL byte was taken")
            return
        }
        #expect(why.hasPrefix("the peer is not an SSH server: it sent a NUL byte"), "\(why)")
    }
}

/// Packets as a server writes them, for the probe's tests.
enum HostCertificateProbePackets {
    static func packet(_ payload: [UInt8]) -> [UInt8] {
        var padding = 8 - (5 + payload.count) % 8
        if padding < 4 { padding += 8 }
        let length = UInt32(1 + payload.count + padding)
        return [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), UInt8(padding)]
            + payload + [UInt8](repeating: 0, count: padding)
    }
}
