import AccessCore
import Foundation
import Testing

/// OpenSSH public key and certificate formats, and the rules of Access short-lived certificates
/// (issue 17). The vectors were made with OpenSSH 9.2's `ssh-keygen`.
@Suite("short-lived SSH certificates: formats and rules")
struct ShortLivedCertificateTests {
    static let userPublicKey = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBI5faE10N3gelKnVTJzq2Yi2PWhUWlVU4kVj0pGUiawOOzfLy8C6wfv+QIEqykiD7Sp2GXBr97bVD+g7DAsJnok= root@vm"
    static let userPoint = "048e5f684d7437781e94a9d54c9cead988b63d68545a5554e24563d2919489ac0e3b37cbcbc0bac1fbfe40812aca4883ed2a7619706bf7b6d50fe83b0c0b099e89"
    /// `ssh-keygen -s ca -I key-id-1 -n cfat-key,other -z 42 -V 20300101000000:20300101010000 user.pub`
    static let userCertificate = "ecdsa-sha2-nistp256-cert-v01@openssh.com AAAAKGVjZHNhLXNoYTItbmlzdHAyNTYtY2VydC12MDFAb3BlbnNzaC5jb20AAAAg5wn8xQSYKmogpnCZlBVABF34zOCQl6BDH4mYp88R8ocAAAAIbmlzdHAyNTYAAABBBI5faE10N3gelKnVTJzq2Yi2PWhUWlVU4kVj0pGUiawOOzfLy8C6wfv+QIEqykiD7Sp2GXBr97bVD+g7DAsJnokAAAAAAAAAKgAAAAEAAAAIa2V5LWlkLTEAAAAVAAAACGNmYXQta2V5AAAABW90aGVyAAAAAHDb2IAAAAAAcNvmkAAAAAAAAACCAAAAFXBlcm1pdC1YMTEtZm9yd2FyZGluZwAAAAAAAAAXcGVybWl0LWFnZW50LWZvcndhcmRpbmcAAAAAAAAAFnBlcm1pdC1wb3J0LWZvcndhcmRpbmcAAAAAAAAACnBlcm1pdC1wdHkAAAAAAAAADnBlcm1pdC11c2VyLXJjAAAAAAAAAAAAAABoAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBL0/PEViI7ieKLsVQMcs42Qdzfa/6mhxxy0dURhNg8CmqfCRC9ZRF0FIEQ6f0V7+ntvt8XSBYkR7kWC34VMZeEgAAABlAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAABKAAAAIQCdafRdyVXfAC3uxBHtr18uUik09YWB+8qQT8dDdwL4mwAAACEAjyvvBKFwjY0WewreLGZS7wSzeQycHPAHP4nkcMroq5w= root@vm"
    /// `ssh-keygen -s ca -I host-1 -h -n h.example -V always:forever ed.pub`
    static let hostCertificate = "ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQtdjAxQG9wZW5zc2guY29tAAAAIGTppWMVr84xdV13OeUV0dGDkpTehTKkIgcbl4qpkryNAAAAIHT3GaxywNWQDATQZ7I4ri8e5bJvmP+LbS2CkPXKEmwXAAAAAAAAAAAAAAACAAAABmhvc3QtMQAAAA0AAAAJaC5leGFtcGxlAAAAAAAAAAD//////////wAAAAAAAAAAAAAAAAAAAGgAAAATZWNkc2Etc2hhMi1uaXN0cDI1NgAAAAhuaXN0cDI1NgAAAEEEvT88RWIjuJ4ouxVAxyzjZB3N9r/qaHHHLR1RGE2DwKap8JEL1lEXQUgRDp/RXv6e2+3xdIFiRHuRYLfhUxl4SAAAAGQAAAATZWNkc2Etc2hhMi1uaXN0cDI1NgAAAEkAAAAgdfjvDBsx0JJh1zq4Dw+VAf+Uc249UKeJvwUSRAiYaysAAAAhAMUDvehE14+17NcdnM3Ej4kB2xqCX35WDpinHPhgqexQ root@vm"
    static let edPublicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHT3GaxywNWQDATQZ7I4ri8e5bJvmP+LbS2CkPXKEmwX root@vm"

    // `ssh-keygen -s ca -I r -n u -V always:forever` for an RSA and an ECDSA P-384 key.
    static let rsaPublicKey = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQD6efgKS1WYyHc0v1Ygx2IF+Z9ObUiCoYUE6BwoVt8saQE8Jp/temo1HlqyKT8NIwF2btIk2VKttVZJKcBHjXQaWAhqhBHknDrt+TTseScx34tmAWFHuT7vHUKukeiinCdcN86QR9LJOEjEt1nx8L/toKI6zy4ocuPVBsRDye3mBQ=="
    static let rsaCertificate = "ssh-rsa-cert-v01@openssh.com AAAAHHNzaC1yc2EtY2VydC12MDFAb3BlbnNzaC5jb20AAAAgEtwLkepU+qJlrinFskbmxrx1HhQoUPBpSXDiwKIEWPEAAAADAQABAAAAgQD6efgKS1WYyHc0v1Ygx2IF+Z9ObUiCoYUE6BwoVt8saQE8Jp/temo1HlqyKT8NIwF2btIk2VKttVZJKcBHjXQaWAhqhBHknDrt+TTseScx34tmAWFHuT7vHUKukeiinCdcN86QR9LJOEjEt1nx8L/toKI6zy4ocuPVBsRDye3mBQAAAAAAAAAAAAAAAQAAAAFyAAAABQAAAAF1AAAAAAAAAAD//////////wAAAAAAAACCAAAAFXBlcm1pdC1YMTEtZm9yd2FyZGluZwAAAAAAAAAXcGVybWl0LWFnZW50LWZvcndhcmRpbmcAAAAAAAAAFnBlcm1pdC1wb3J0LWZvcndhcmRpbmcAAAAAAAAACnBlcm1pdC1wdHkAAAAAAAAADnBlcm1pdC11c2VyLXJjAAAAAAAAAAAAAABoAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBL0/PEViI7ieKLsVQMcs42Qdzfa/6mhxxy0dURhNg8CmqfCRC9ZRF0FIEQ6f0V7+ntvt8XSBYkR7kWC34VMZeEgAAABjAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAABIAAAAICdaJyBF4IzfTDNUyK9krF+40DugrDsydpvjqqzD8wQZAAAAIBtfz372Dl0zMMtrhJeukd49UDsGhJLQkTlMTxFXs9dq"
    static let p384PublicKey = "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBLPytU7xP8W4NesTGwb2lFzkoCJjrEETtusAXhWeDVpWb4gNnhx0VlIZkLz1lhL98aFRiPk30PWjEPPyXuph6UsMhufbHUss0b4utN4PjlJWt1VLg4DE3ByIkla6scIj3g=="
    static let p384Certificate = "ecdsa-sha2-nistp384-cert-v01@openssh.com AAAAKGVjZHNhLXNoYTItbmlzdHAzODQtY2VydC12MDFAb3BlbnNzaC5jb20AAAAgZatm3Xol1yYtMpJHzED9hQnzwxLX3WThaf3N//hNK20AAAAIbmlzdHAzODQAAABhBLPytU7xP8W4NesTGwb2lFzkoCJjrEETtusAXhWeDVpWb4gNnhx0VlIZkLz1lhL98aFRiPk30PWjEPPyXuph6UsMhufbHUss0b4utN4PjlJWt1VLg4DE3ByIkla6scIj3gAAAAAAAAAAAAAAAQAAAAFlAAAABQAAAAF1AAAAAAAAAAD//////////wAAAAAAAACCAAAAFXBlcm1pdC1YMTEtZm9yd2FyZGluZwAAAAAAAAAXcGVybWl0LWFnZW50LWZvcndhcmRpbmcAAAAAAAAAFnBlcm1pdC1wb3J0LWZvcndhcmRpbmcAAAAAAAAACnBlcm1pdC1wdHkAAAAAAAAADnBlcm1pdC11c2VyLXJjAAAAAAAAAAAAAABoAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBL0/PEViI7ieKLsVQMcs42Qdzfa/6mhxxy0dURhNg8CmqfCRC9ZRF0FIEQ6f0V7+ntvt8XSBYkR7kWC34VMZeEgAAABkAAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAABJAAAAIBOH3di50L+WcmZUw9P7al33MPJZb1tn4tKduS+QNH+sAAAAIQD+sTtQhwIiJnW9ED15Lcqbp48AugbhvcOPwZ+/FZbHyw=="

    static func bytes(hex: String) -> [UInt8] {
        stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
    }

    @Test("an ECDSA P-256 public key line is what ssh-keygen writes")
    func publicKeyLine() throws {
        let key = try OpenSSHPublicKey.ecdsaP256(point: Self.bytes(hex: Self.userPoint))
        #expect(key.line(comment: "root@vm") == Self.userPublicKey)
        #expect(try OpenSSHPublicKey.parse(Self.userPublicKey) == key)
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHPublicKey.ecdsaP256(point: [4, 1, 2]) }
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHPublicKey.parse("ssh-rsa " + Self.userPublicKey.split(separator: " ")[1]) }
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHPublicKey.parse("ecdsa-sha2-nistp256 !!!") }
    }

    @Test("a user certificate: key, serial, key ID, principals, validity")
    func userCertificate() throws {
        let certificate = try OpenSSHCertificate.parse(Self.userCertificate)
        #expect(certificate.type == "ecdsa-sha2-nistp256-cert-v01@openssh.com")
        #expect(certificate.publicKey == (try OpenSSHPublicKey.parse(Self.userPublicKey)))
        #expect(certificate.serial == 42)
        #expect(certificate.certificateType == OpenSSHCertificate.userCertificate)
        #expect(certificate.keyID == "key-id-1")
        #expect(certificate.principals == ["cfat-key", "other"])
        #expect(certificate.validAfter == 1_893_456_000)
        #expect(certificate.validBefore == 1_893_459_600)
        #expect(certificate.expiresAt == Date(timeIntervalSince1970: 1_893_459_600))
    }

    @Test("an ed25519 host certificate valid forever")
    func hostCertificate() throws {
        let certificate = try OpenSSHCertificate.parse(Self.hostCertificate)
        #expect(certificate.publicKey == (try OpenSSHPublicKey.parse(Self.edPublicKey)))
        #expect(certificate.certificateType == 2)
        #expect(certificate.principals == ["h.example"])
        #expect(certificate.validBefore == UInt64.max)
        #expect(certificate.expiresAt == nil)
    }

    static let damagedLines: [String] = [
        "", "ecdsa-sha2-nistp256 AAAA", String(userCertificate.dropLast(30)) + " x",
        "ssh-foo-cert-v01@openssh.com AAAAHHNzaC1mb28tY2VydC12MDFAb3BlbnNzaC5jb20=", userPublicKey,
    ]

    @Test("damaged certificates are refused with a reason, never a crash", arguments: damagedLines)
    func damaged(_ line: String) {
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHCertificate.parse(line) }
    }

    @Test("every truncation of a certificate is refused")
    func truncations() throws {
        let blob = Array(Data(base64Encoded: String(Self.userCertificate.split(separator: " ")[1]))!)
        for length in stride(from: 0, to: blob.count, by: 7) {
            let line = "ecdsa-sha2-nistp256-cert-v01@openssh.com " + Data(blob.prefix(length)).base64EncodedString()
            #expect(throws: OpenSSHFormatError.self) { try OpenSSHCertificate.parse(line) }
        }
    }

    @Test("file names as cloudflared makes them", arguments: [
        ("ssh.example.com", "ssh.example.com-cf_key"), ("https://SSH.example.com/", "ssh.example.com-cf_key"),
        ("ssh.example.com/a/b", "ssh.example.com-a-b-cf_key"),
    ])
    func fileNames(_ hostname: String, _ name: String) throws {
        let origin = try OriginURL.parse(hostname)
        #expect(ShortLivedCertificateRules.keyFileName(for: origin) == name)
        #expect(ShortLivedCertificateRules.publicKeyFileName(for: origin) == name + ".pub")
        #expect(ShortLivedCertificateRules.certificateFileName(for: origin) == name + "-cert.pub")
    }

    @Test("renewal: missing, another key, not a user certificate, expired, about to expire, good")
    func renewal() throws {
        let key = try OpenSSHPublicKey.parse(Self.userPublicKey)
        let start = Date(timeIntervalSince1970: 1_893_456_000)
        typealias Rules = ShortLivedCertificateRules
        #expect(Rules.renewalReason(certificate: nil, publicKey: key, now: start) == .missing)
        #expect(Rules.renewalReason(certificate: "junk", publicKey: key, now: start) != nil)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: try OpenSSHPublicKey.parse(Self.edPublicKey),
                                    now: start) == .otherKey)
        #expect(Rules.renewalReason(certificate: Self.hostCertificate, publicKey: try OpenSSHPublicKey.parse(Self.edPublicKey),
                                    now: start) == .notAUserCertificate)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start - 10) == .notYetValid)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start) == nil)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start + 3600 - 61) == nil)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start + 3600 - 30)
                == .expiresSoon(seconds: 30))
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start + 3600) == .expired)
        #expect(Rules.renewalReason(certificate: Self.userCertificate, publicKey: key, now: start + 7200) == .expired)
    }

    @Test("the token goes only to its own team domain")
    func signURL() throws {
        typealias Rules = ShortLivedCertificateRules
        #expect(try Rules.signURL(issuer: "https://team.cloudflareaccess.com", authDomain: "team.cloudflareaccess.com")
                == "https://team.cloudflareaccess.com/cdn-cgi/access/cert_sign")
        #expect(try Rules.signURL(issuer: "https://Team.cloudflareaccess.com/", authDomain: "team.cloudflareaccess.com")
                == "https://team.cloudflareaccess.com/cdn-cgi/access/cert_sign")
        for issuer in ["https://evil.example", "http://team.cloudflareaccess.com", "https://team.cloudflareaccess.com.evil.example",
                       "https://other.cloudflareaccess.com"] {
            let error = #expect(throws: ConfigurationError.self) {
                try Rules.signURL(issuer: issuer, authDomain: "team.cloudflareaccess.com")
            }
            #expect(error?.message.contains("refusing to send it there") == true)
        }
        #expect(throws: ConfigurationError.self) { try Rules.signURL(issuer: nil, authDomain: "team.cloudflareaccess.com") }
    }

    @Test("the request body and the answers of cert_sign")
    func exchange() throws {
        typealias Rules = ShortLivedCertificateRules
        let body = try Rules.signRequestBody(publicKeyLine: "ecdsa-sha2-nistp256 AAAA", token: "a.b.c", issuer: "https://t")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: String])
        #expect(object == ["public_key": "ecdsa-sha2-nistp256 AAAA", "jwt": "a.b.c", "issuer": "https://t"])
        let ok = Array(#"{"id":"1","certificate":"ecdsa-sha2-nistp256-cert-v01@openssh.com AAAA\n","expires_at":"2030-01-01T00:00:00Z"}"#.utf8)
        #expect(Rules.signAnswer(status: 200, body: ok) == .certificate("ecdsa-sha2-nistp256-cert-v01@openssh.com AAAA"))
        let refused = Array(#"{"status":403,"message":"short-lived\u001b[2J certificates are off"}"#.utf8)
        #expect(Rules.signAnswer(status: 403, body: refused) == .refused(status: 403, message: "short-lived [2J certificates are off"))
        #expect(Rules.signAnswer(status: 502, body: Array("<html>bad gateway</html>".utf8))
                == .refused(status: 502, message: "<html>bad gateway</html>"))
        #expect(Rules.signAnswer(status: 200, body: Array("{}".utf8)) == .refused(status: 200, message: "the answer holds no certificate"))
        // A token in an error message never comes through.
        let leaky = Array(#"{"status":401,"message":"bad token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"}"#.utf8)
        guard case .refused(_, let message) = Rules.signAnswer(status: 401, body: leaky) else { Issue.record("not refused"); return }
        #expect(!message.contains("eyJ"))
    }

    @Test("certificates of RSA and ECDSA P-384 keys carry their key")
    func otherKeyTypes() throws {
        for (certificate, key) in [(Self.rsaCertificate, Self.rsaPublicKey), (Self.p384Certificate, Self.p384PublicKey)] {
            let parsed = try OpenSSHCertificate.parse(certificate)
            #expect(parsed.publicKey == (try OpenSSHPublicKey.parse(key)))
            #expect(parsed.principals == ["u"] && parsed.validAfter == 0 && parsed.expiresAt == nil)
        }
    }

    /// A certificate blob made by hand: `type`, a nonce, then `rest`.
    static func handmade(_ type: String, inner: String? = nil, rest: [UInt8]) -> String {
        func string(_ bytes: [UInt8]) -> [UInt8] {
            let n = UInt32(bytes.count)
            return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + bytes
        }
        let blob = string(Array((inner ?? type).utf8)) + string([1, 2, 3]) + rest
        return type + " " + Data(blob).base64EncodedString()
    }

    @Test("hand-made certificates: an unknown key type, another type inside, a name that is not UTF-8, bytes after the end")
    func handmadeCertificates() throws {
        func reason(_ line: String) -> String {
            do {
                _ = try OpenSSHCertificate.parse(line)
                return "parsed"
            } catch {
                return error.reason
            }
        }
        #expect(reason(Self.handmade("ssh-foo-cert-v01@openssh.com", rest: [])) == "certificates for \"ssh-foo\" keys are not understood")
        #expect(reason(Self.handmade("ssh-ed25519-cert-v01@openssh.com", inner: "ssh-rsa-cert-v01@openssh.com", rest: []))
                == "the certificate inside is of another type")
        #expect(reason(Self.handmade("ssh-ed25519-cert-v01@openssh.com", inner: "ssh-ed25519-cert-v01@openssh.com\u{FF}", rest: []))
                == "the certificate inside is of another type")
        #expect(reason("ssh-rsa AAAA") == "\"ssh-rsa\" is not an OpenSSH certificate type")
        #expect(reason("ssh-ed25519-cert-v01@openssh.com") == "it is not \"type base64 [comment]\"")
        #expect(reason("ssh-ed25519-cert-v01@openssh.com ***") == "the base64 part does not decode")
        let blob = Array(Data(base64Encoded: String(Self.userCertificate.split(separator: " ")[1]))!)
        #expect(reason("ecdsa-sha2-nistp256-cert-v01@openssh.com " + Data(blob + [0]).base64EncodedString())
                == "it has bytes after the signature")
        // A principal that is not UTF-8.
        var principals = [UInt8]()
        principals += [0, 0, 0, 2, 0xC3, 0x28]
        let ed = Array(Data(base64Encoded: String(Self.edPublicKey.split(separator: " ")[1]))!).suffix(36)
        let rest = Array(ed) + [UInt8](repeating: 0, count: 12) + [0, 0, 0, 0] + [0, 0, 0, 6] + principals
        #expect(reason(Self.handmade("ssh-ed25519-cert-v01@openssh.com", rest: rest)) == "a name is not UTF-8")
        #expect(throws: OpenSSHFormatError.self) { try OpenSSHPublicKey.parse("ecdsa-sha2-nistp256") }
        #expect(throws: OpenSSHFormatError.self) {
            try OpenSSHPublicKey.parse("ecdsa-sha2-nistp256 " + Data([0, 0, 0, 9, 0xFF, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0]).base64EncodedString())
        }
    }

    @Test("every renewal reason reads as a phrase")
    func renewalReasons() {
        typealias Reason = ShortLivedCertificateRules.RenewalReason
        let phrases = [Reason.missing, .unreadable("x"), .otherKey, .notAUserCertificate, .notYetValid, .expired,
                       .expiresSoon(seconds: 12)].map(\.description)
        #expect(phrases == ["there is no certificate yet", "the certificate file cannot be read (x)",
                            "the certificate is for another key", "the certificate is not a user certificate",
                            "the certificate is not valid yet", "the certificate has expired", "the certificate expires in 12 s"])
        #expect(ShortLivedCertificateRules.signAnswer(status: 500, body: []) == .refused(status: 500, message: "no message"))
    }

    @Test("a refused signature is an authentication failure for a 4xx, a retryable transport failure otherwise")
    func refusalFailures() {
        let client = TunnelFailure.certificateRefused(host: "h", status: 403, message: "off")
        #expect(client.kind == .certificateRefused && client.category == .authentication && !client.isRetryable)
        #expect(client.message.hasPrefix("Cloudflare Access did not sign an SSH certificate for h (403: off)"))
        let server = TunnelFailure.certificateRefused(host: "h", status: 503, message: "down")
        #expect(server.category == .transport && server.isRetryable)
    }
}
