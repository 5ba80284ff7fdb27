import AccessCore
import Testing

/// `--pin` values (issue 26.4): curl's `sha256//BASE64` form, several per value.
@Suite("PublicKeyPin")
struct PublicKeyPinTests {
    static let a = "sha256//L6j82KvMqKU21Lwo9XvuCRfVfNQFypmub8Jgu4PLNmM="
    static let b = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

    @Test("one pin, or several separated by commas or semicolons, white space around each ignored; printed back as given")
    func accepted() throws {
        #expect(try PublicKeyPin.parseList(Self.a).map(\.description) == [Self.a])
        #expect(try PublicKeyPin.parseList("\(Self.a),\(Self.b)").map(\.description) == [Self.a, Self.b])
        #expect(try PublicKeyPin.parseList(" \(Self.a) ; \(Self.b)\n").map(\.description) == [Self.a, Self.b])
        #expect(try PublicKeyPin.parseList(Self.b).first?.sha256 == [UInt8](repeating: 0, count: 32))
    }

    @Test("refused with one line that says what a pin looks like", arguments: [
        ("", "has an empty entry"),
        ("\(a),,\(b)", "has an empty entry"),
        ("\(a),", "has an empty entry"),
        ("md5//AAAA", "\"md5//AAAA\" is not a sha256// pin"),
        ("L6j82KvMqKU21Lwo9XvuCRfVfNQFypmub8Jgu4PLNmM=", "is not a sha256// pin"),
        ("sha256//not base64!", "is not 32 bytes in base64 after sha256//"),
        ("sha256//AAAA", "is not 32 bytes in base64 after sha256//"),
    ])
    func refused(_ raw: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) { try PublicKeyPin.parseList(raw) }
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("the pinned keys") == true, "named in words: \(error?.message ?? "")")
        #expect(error?.message(naming: { $0 == .pins ? "--pin" : $0.words }).hasPrefix("--pin") == true)
    }

    @Test("a digest of another length is no pin")
    func length() {
        #expect(PublicKeyPin(sha256: [UInt8](repeating: 1, count: 31)) == nil)
        #expect(PublicKeyPin(sha256: [UInt8](repeating: 1, count: 32)) != nil)
    }

    @Test("the failure names what the edge showed, when known (libcurl does not say)")
    func mismatchFailure() {
        let shown = TunnelFailure.pinMismatch(host: "h.example", presented: ["\(Self.a) (leaf)"])
        #expect(shown.message.hasPrefix("the edge for h.example presented no pinned key: it showed \(Self.a) (leaf); check the pins"))
        #expect(shown.kind == .tls && shown.subject == .pins && !shown.isRetryable)
        #expect(TunnelFailure.pinMismatch(host: "h.example", presented: []).message
            .hasPrefix("the edge for h.example presented no pinned key; check the pins"))
    }
}
