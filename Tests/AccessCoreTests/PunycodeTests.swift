import AccessCore
import Testing

/// A Unicode string and its Punycode form.
struct PunycodePair: Sendable, CustomTestStringConvertible {
    let name: String
    let unicode: String
    let encoded: String
    var testDescription: String { name }
}

@Suite("Punycode (RFC 3492)")
struct PunycodeTests {
    // RFC 3492 §7.1 sample strings. Expected values checked with Python:
    // `codecs.encode(s, "punycode")`.
    static let rfcSamples: [PunycodePair] = [
        PunycodePair(name: "(A) Arabic (Egyptian)",
                     unicode: "\u{0644}\u{064A}\u{0647}\u{0645}\u{0627}\u{0628}\u{062A}\u{0643}\u{0644}\u{0645}\u{0648}\u{0634}\u{0639}\u{0631}\u{0628}\u{064A}\u{061F}",
                     encoded: "egbpdaj6bu4bxfgehfvwxn"),
        PunycodePair(name: "(B) Chinese (simplified)",
                     unicode: "\u{4ED6}\u{4EEC}\u{4E3A}\u{4EC0}\u{4E48}\u{4E0D}\u{8BF4}\u{4E2D}\u{6587}",
                     encoded: "ihqwcrb4cv8a8dqg056pqjye"),
        PunycodePair(name: "(C) Chinese (traditional)",
                     unicode: "\u{4ED6}\u{5011}\u{7232}\u{4EC0}\u{9EBD}\u{4E0D}\u{8AAA}\u{4E2D}\u{6587}",
                     encoded: "ihqwctvzc91f659drss3x8bo0yb"),
        PunycodePair(name: "(D) Czech",
                     unicode: "Pro\u{010D}prost\u{011B}nemluv\u{00ED}\u{010D}esky",
                     encoded: "Proprostnemluvesky-uyb24dma41a"),
        PunycodePair(name: "(E) Hebrew",
                     unicode: "\u{05DC}\u{05DE}\u{05D4}\u{05D4}\u{05DD}\u{05E4}\u{05E9}\u{05D5}\u{05D8}\u{05DC}\u{05D0}\u{05DE}\u{05D3}\u{05D1}\u{05E8}\u{05D9}\u{05DD}\u{05E2}\u{05D1}\u{05E8}\u{05D9}\u{05EA}",
                     encoded: "4dbcagdahymbxekheh6e0a7fei0b"),
        PunycodePair(name: "(G) Japanese",
                     unicode: "なぜみんな日本語を話してくれないのか",
                     encoded: "n8jok5ay5dzabd5bym9f0cm5685rrjetr6pdxa"),
        PunycodePair(name: "(I) Spanish",
                     unicode: "porqu\u{00E9}nopuedensimplementehablarenEspa\u{00F1}ol",
                     encoded: "porqunopuedensimplementehablarenEspaol-fmd56a"),
        PunycodePair(name: "(L) 3年B組金八先生", unicode: "3年B組金八先生", encoded: "3B-ww4c5e180e575a65lsy2b"),
        PunycodePair(name: "(M) 安室奈美恵-with-SUPER-MONKEYS",
                     unicode: "安室奈美恵-with-SUPER-MONKEYS", encoded: "-with-SUPER-MONKEYS-pc58ag80a8qai00g7n9n"),
        PunycodePair(name: "(N) Hello-Another-Way-それぞれの場所",
                     unicode: "Hello-Another-Way-それぞれの場所", encoded: "Hello-Another-Way--fc4qua05auwb3674vfr0b"),
        PunycodePair(name: "(O) ひとつ屋根の下2", unicode: "ひとつ屋根の下2", encoded: "2-u9tlzr9756bt3uc0v"),
        PunycodePair(name: "(P) MajiでKoiする5秒前", unicode: "MajiでKoiする5秒前", encoded: "MajiKoi5-783gue6qz075azm5e"),
        PunycodePair(name: "(Q) パフィーdeルンバ", unicode: "パフィーdeルンバ", encoded: "de-jg4avhby1noc0d"),
        PunycodePair(name: "(R) そのスピードで", unicode: "そのスピードで", encoded: "d9juau41awczczp"),
        PunycodePair(name: "(S) -> $1.00 <-", unicode: "-> $1.00 <-", encoded: "-> $1.00 <--"),
    ]

    // IDNA labels (Python `"…".encode("idna")` without the xn-- prefix).
    static let labels: [PunycodePair] = [
        PunycodePair(name: "bücher", unicode: "bücher", encoded: "bcher-kva"),
        PunycodePair(name: "münchen", unicode: "münchen", encoded: "mnchen-3ya"),
        PunycodePair(name: "例え", unicode: "例え", encoded: "r8jz45g"),
        PunycodePair(name: "テスト", unicode: "テスト", encoded: "zckzah"),
        PunycodePair(name: "ü", unicode: "ü", encoded: "tda"),
        PunycodePair(name: "пример", unicode: "пример", encoded: "e1afmkfd"),
        PunycodePair(name: "παράδειγμα", unicode: "παράδειγμα", encoded: "hxajbheg2az3al"),
        PunycodePair(name: "straße", unicode: "straße", encoded: "strae-oqa"),
        PunycodePair(name: "ascii only", unicode: "abc", encoded: "abc-"),
        PunycodePair(name: "empty", unicode: "", encoded: ""),
    ]

    @Test("encode", arguments: rfcSamples + labels)
    func encode(_ pair: PunycodePair) {
        #expect(Punycode.encode(pair.unicode) == pair.encoded)
    }

    @Test("decode", arguments: rfcSamples + labels)
    func decode(_ pair: PunycodePair) {
        #expect(Punycode.decode(pair.encoded) == pair.unicode)
    }

    @Test func decodeIgnoresDigitCase() {
        #expect(Punycode.decode("EGBPDAJ6BU4BXFGEHFVWXN") == Punycode.decode("egbpdaj6bu4bxfgehfvwxn"))
        #expect(Punycode.decode("BCHER-KVA") == "BüCHER")
    }

    @Test("decode refuses malformed input", arguments: [
        "bcher-kv!",          // "!" is not a digit
        "b\u{00FC}cher-kva",  // non-ASCII before the delimiter
        "kva-",               // nothing after "-" is fine, but…
        "99999999999999999",  // overflow
        "bcher-k",            // truncated number
    ])
    func decodeRefuses(_ input: String) {
        if input == "kva-" {
            // …a basic part alone is valid Punycode and decodes to itself.
            #expect(Punycode.decode(input) == "kva")
        } else {
            #expect(Punycode.decode(input) == nil)
        }
    }

    @Test func roundTripsLongMixedText() {
        let text = String(repeating: "häßlich-日本-", count: 20)
        let encoded = Punycode.encode(text)
        #expect(encoded != nil)
        #expect(encoded.flatMap(Punycode.decode) == text)
        #expect(encoded?.unicodeScalars.allSatisfy(\.isASCII) == true)
    }
}
