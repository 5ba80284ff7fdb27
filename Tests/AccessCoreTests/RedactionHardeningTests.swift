@testable import AccessCore
import Testing

/// Issue 12.9: redaction is idempotent, catches JWTs with short segments wherever they sit, and
/// treats any header whose name suggests a credential as secret.
@Suite("redaction hardening")
struct RedactionHardeningTests {
    static let inputs = [
        "token=abc123", "a=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl&b=1",
        "Cf-Access-Client-Secret: hunter2 Host: x", "https://u:p@h.example/p?token=1#frag",
        "Bearer abc.def.ghi", "password=[redacted] next", "cookie=[redacted]]", "plain words only",
        "x eyJh.eyJi.c y", "session=abc;path=/",
        // Found by scripts/fuzz: a "Name:" word holding a JWT shape, after a secret header.
        "proxy-authorizations:\u{0}\u{3}\u{0}ax/\u{0}B\u{0}eyJh.eh~tzs:\u{0}\u{3}\u{0}axtoE\r\u{1}\u{0}",
        "Authorization: x eyJh.eyJi.c~d: tail",
    ]

    @Test("scrubbing twice gives the same text as scrubbing once", arguments: inputs)
    func idempotent(_ input: String) {
        let once = Redaction.scrub(input)
        #expect(Redaction.scrub(once) == once)
        #expect(!once.contains("[redacted]]") || input.contains("[redacted]]"))
    }

    @Test("a JWT after '=' with other pairs around it is removed, the rest stays")
    func jwtInsidePairs() {
        let out = Redaction.scrub("a=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl&b=1")
        #expect(!out.contains("eyJ"))
        #expect(out == "a=[redacted]&b=1")
    }

    @Test("JWT shapes with short segments, after '=', ':' or a space", arguments: [
        "v=eyJh.eyJi.c", "note:eyJh.eyJi.c", "got eyJh.eyJi.c here", "(eyJ0eXAi.e30.x)",
    ])
    func shortSegments(_ input: String) {
        let out = Redaction.scrub(input)
        #expect(!out.contains("eyJh") && !out.contains("eyJ0"), "\(out)")
        #expect(out.contains("[redacted]"))
    }

    @Test("host names, paths and versions are not mistaken for tokens", arguments: [
        "ssh.cfat.test", "cf-access-tcp/0.1.0", "a.b.c", "example.com:443", "v=1.2.3", "ey/a.bb.cc", "k=eyab.cd",
        "ey.a.b",
    ])
    func notTokens(_ input: String) {
        #expect(Redaction.scrub(input) == input)
    }

    @Test("header names that suggest a credential are secret", arguments: [
        ("X-Api-Key", true), ("X-Auth-Token", true), ("My-Password", true), ("Set-Cookie", true),
        ("X-Client-Secret", true), ("Authorization", true), ("X-Trace-Id", false), ("Accept-Language", false),
    ])
    func secretHeaderNames(_ name: String, _ secret: Bool) {
        #expect(HeaderField.isSecretName(name) == secret)
        if secret {
            #expect(Redaction.scrub("\(name): s3cr3tvalue other: x").contains("s3cr3tvalue") == false)
        }
    }
}
