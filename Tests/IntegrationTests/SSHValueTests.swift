import AccessCore
import CFAccessSSH
import Foundation
import Testing

/// The embedded SSH library's values, without I/O.
@Suite("SSH values: host keys, known_hosts names, failures")
struct SSHValueTests {
    /// An SSH string: a 4-byte big-endian length, then the bytes.
    private func sshString(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        let n = UInt32(bytes.count)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + bytes
    }

    @Test("a host key's algorithm, display type, fingerprint and known_hosts text")
    func hostKey() {
        let blob = sshString("ssh-ed25519") + sshString("0123456789abcdef0123456789abcdef")
        let key = SSHHostKey(blob: blob, sha256: Array(repeating: 0xab, count: 32))
        #expect(key.algorithm == "ssh-ed25519")
        #expect(key.displayType == "ED25519")
        #expect(key.fingerprint == "SHA256:" + Data(repeating: 0xab, count: 32).base64EncodedString().replacingOccurrences(of: "=", with: ""))
        #expect(key.knownHostsText == "ssh-ed25519 " + Data(blob).base64EncodedString())
        #expect(SSHHostKey(blob: sshString("ecdsa-sha2-nistp256"), sha256: []).displayType == "ECDSA")
        #expect(SSHHostKey(blob: sshString("ssh-rsa"), sha256: []).displayType == "RSA")
        #expect(SSHHostKey(blob: [0, 0, 0, 9, 1], sha256: []).algorithm == "")   // truncated
        #expect(SSHHostKey(blob: [], sha256: []).algorithm == "")
    }

    @Test("known_hosts entry names: bare for port 22, [host]:port otherwise, lower-cased")
    func entryNames() {
        #expect(KnownHosts.entryName(host: "SSH.Example.com", port: 22) == "ssh.example.com")
        #expect(KnownHosts.entryName(host: "ssh.example.com", port: 2222) == "[ssh.example.com]:2222")
        #expect(KnownHosts.defaultPath(environment: ["HOME": "/home/me"]) == "/home/me/.ssh/known_hosts")
    }
}
