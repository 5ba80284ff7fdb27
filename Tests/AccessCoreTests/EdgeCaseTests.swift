import AccessCore
import Testing

/// Rarely hit branches of the core, each with the behaviour it must have.
@Suite("core edge cases")
struct EdgeCaseTests {
    @Test("an international label may not start with \"-\"")
    func unicodeLabelWithLeadingHyphen() {
        #expect(throws: ConfigurationError.self) { _ = try OriginURL.parse("-ü.example") }
        do {
            _ = try OriginURL.parse("-ü.example")
        } catch {
            #expect(error.message.contains("may not start or end with \"-\""))
        }
    }

    @Test("a label whose Punycode would overflow is refused as too long")
    func punycodeOverflow() {
        let label = String(repeating: "a", count: 13_000) + "\u{2B81D}"
        do {
            _ = try OriginURL.parse(label + ".example")
            Issue.record("a 13,001-character label was accepted")
        } catch {
            #expect(error.message.contains("label is too long"))
        }
    }

    @Test("non-ASCII decimal digits are allowed in an international label")
    func unicodeDigits() throws {
        #expect(try OriginURL.parse("ü\u{0661}.example").host == "xn--tda67y.example")
    }

    @Test("control characters are shown escaped in messages, never raw")
    func escapedControlCharacters() {
        do {
            _ = try OriginURL.parse("ssh\u{7}.example.com")
            Issue.record("a control character was accepted")
        } catch {
            #expect(error.message.contains("\\u{7}"))
            #expect(!error.message.contains("\u{7}"))
        }
    }

    @Test("an empty User-Agent is refused")
    func emptyUserAgent() throws {
        let origin = try OriginURL.parse("ssh.example.com")
        #expect(throws: ConfigurationError.self) {
            _ = try RequestBuilder.upgradeRequest(origin: origin, userAgent: "", serviceToken: nil, accessToken: nil,
                                                  destination: nil, extraHeaders: [])
        }
    }

    @Test("loopback detection for IPv6 listen addresses", arguments: [
        ("[::1]:22", true), ("[::ffff:127.0.0.1]:22", true),
    ])
    func ipv6Loopback(raw: String, loopback: Bool) throws {
        #expect(try ListenAddress.parse(raw, allowNonLoopback: false).isLoopback == loopback)
        #expect(try ListenAddress.parse("[2001:db8::1]:22", allowNonLoopback: true).isLoopback == false)
    }
}

@Suite("URLs without a path")
struct PathlessURLTests {
    @Test("a Location without a path is no login redirect", arguments: [
        "https://team.cloudflareaccess.com", "//team.cloudflareaccess.com",
    ])
    func pathlessLocation(location: String) {
        #expect(UpgradeRefusal.classify(status: 302, location: location) == .redirect(status: 302, location: location))
    }

    @Test("userinfo is redacted from a URL that has no path")
    func pathlessRedaction() {
        let scrubbed = Redaction.scrub("see https://user:hunter2@example.com")
        #expect(!scrubbed.contains("hunter2"))
        #expect(scrubbed.contains("example.com"))
    }
}

@Suite("malformed numeric addresses")
struct MalformedAddressTests {
    @Test("refused with a message naming the address family", arguments: [
        ("1.2.3.4567:22", "not a valid IPv4 address"),
        ("[1:2:3:4::5:6:7:8]:22", "invalid IPv6 address"),
        ("[::ffff:1.2.3.999]:22", "invalid IPv6 address"),
    ])
    func refused(raw: String, expected: String) {
        do {
            _ = try ListenAddress.parse(raw, allowNonLoopback: true)
            Issue.record("\(raw) was accepted")
        } catch {
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }
}
