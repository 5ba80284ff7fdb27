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
        // Found by scripts/fuzz: a second URL in one word; a token whose removal exposes userinfo.
        "\u{13}=\u{0}Ti\u{FFFD}a=ey2Jh.eyJi\u{8}:$$$/htoken=eyJhtoken/u:h://uj:@eyJh://u:j@\u{FFFD}\u{5}",
        "h://np\u{FFFD}hOi>eyl:l://np@hi>eyJzWIi.c3//np@hi>eyJzWIi.c3l=1=1",
    ]

    @Test("user information of every URL in a word is removed, not only the first's")
    func everyURLInAWord() {
        let once = Redaction.scrub("see=https://a.example/x,https://user:pw@b.example/y")
        #expect(!once.contains("user:pw"), "\(once)")
        #expect(once.contains("a.example/x"))
    }

    @Test("a word is scrubbed until it settles; one that does not settle in the rounds allowed is replaced whole")
    func scrubbingSettles() {
        // Removing the JWT-shaped run opens the authority up to the next "@": a second round
        // removes that user information.
        let word = "l://np@hi>eyJzWIi.c3//np@hi>x"
        let settled = Redaction.scrubWord(word)
        #expect(Redaction.scrubWord(settled) == settled)
        #expect(!settled.contains("np@"), "\(settled)")
        // Taken many times: the count of this path is derived from two counters that tests on other
        // threads bump thousands of times, without atomics, so a single pass can read as zero in
        // the coverage report (seen once in CI).
        for _ in 0..<200 {
            #expect(Redaction.scrubWord(word, maxRounds: 1) == Redaction.placeholder)
        }
    }

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
