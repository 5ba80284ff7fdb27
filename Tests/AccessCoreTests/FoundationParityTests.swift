import AccessCore
import Foundation
import Testing

/// The shipped modules import FoundationEssentials, not Foundation (issue 18.3). What replaced
/// Foundation's JSONSerialization, NSString path methods, trimmingCharacters and
/// ISO8601DateFormatter is checked here against Foundation itself, which the tests still import.
@Suite("Foundation parity (issue 18.3)")
struct FoundationParityTests {
    static let documents: [String] = [
        #"{"pid":12,"start_time":1700000000123}"#,
        #"{"a":[1,2.5,-3e2,true,false,null,"x\u00e9\n\"\\\/"],"b":{"c":{}}}"#,
        #" { "k" : "v" } "#,
        "[]", "[5,1]", #""text""#, "12", "true", "null",
        "", " ", "{", "}", "[1,]", #"{"a":1,}"#, #"{'a':1}"#, #"{a:1}"#, "01", "1.", ".5", "+1",
        "NaN", "Infinity", "[1] [2]", #"{"a":1} x"#, "// c\n{}", #"{"a":"\x"}"#, "\u{FEFF}{}",
        "{\"a\":\"tab\tinside\"}",
    ]

    @Test("JSONValue accepts exactly what JSONSerialization accepts", arguments: documents)
    func jsonAcceptance(_ text: String) {
        let bytes = Array(text.utf8)
        let foundation = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        #expect((JSONValue.parse(bytes) != nil) == (foundation != nil), "\(text)")
        #expect((JSONValue.object(bytes) != nil) == (foundation is [String: Any]), "\(text)")
    }

    @Test func jsonKindsAndNumbers() throws {
        let object = try #require(JSONValue.object(Array(#"{"i":12,"big":1700000000123,"d":2.5,"e":1e3,"t":true,"n":null,"s":"é","a":["x",1]}"#.utf8)))
        #expect(object["i"] == .integer(12))
        #expect(object["big"]?.int64Value == 1_700_000_000_123)
        #expect(object["d"]?.doubleValue == 2.5)
        #expect(object["d"]?.int64Value == 2)          // NSNumber's int64Value drops the fraction
        #expect(object["d"]?.exactInt == nil)          // `as? Int` of 2.5 is nil
        #expect(object["e"]?.exactInt == 1000)
        #expect(object["t"] == .bool(true))
        #expect(object["t"]?.doubleValue == nil)       // a boolean is not a number
        #expect(object["n"] == .null)
        #expect(object["s"]?.stringValue == "é")
        #expect(object["a"]?.arrayValue == [.string("x"), .integer(1)])
        #expect(object["missing"] == nil)
    }

    @Test("the cert_sign body is byte for byte what JSONSerialization wrote", arguments: [
        ("ecdsa-sha2-nistp256 AAAA/B+C==", "a.b.c", "https://team.cloudflareaccess.com/"),
        ("k", "quote\" backslash\\ newline\n tab\t ctrl\u{01} é 🙂", "http://x/y?z=1&w=2"),
    ])
    func signRequestBody(_ key: String, _ token: String, _ issuer: String) throws {
        let ours = try ShortLivedCertificateRules.signRequestBody(publicKeyLine: key, token: token, issuer: issuer)
        let foundation = try JSONSerialization.data(withJSONObject: ["public_key": key, "jwt": token, "issuer": issuer],
                                                    options: [.sortedKeys])
        #expect(String(decoding: ours, as: UTF8.self) == String(decoding: foundation, as: UTF8.self))
    }

    @Test("PathText matches NSString's path methods", arguments: [
        "/a/b/c", "/a", "/", "a/b/", "//a//b", "~/.ssh/known_hosts", "", "/a/b//", "./x",
    ])
    func paths(_ path: String) {
        #expect(PathText.deletingLastComponent(path) == (path as NSString).deletingLastPathComponent, "\(path)")
        #expect(PathText.appending("f.log", to: path) == (path as NSString).appendingPathComponent("f.log"), "\(path)")
    }

    /// Swift 6.3's Foundation stops the process (an assertion) on these: no parity to check.
    @Test func pathsWithoutADirectory() {
        #expect(PathText.deletingLastComponent("a") == "")
        #expect(PathText.deletingLastComponent("a/") == "")
        #expect(PathText.appending("f.log", to: "a") == "a/f.log")
    }

    @Test("trimming matches trimmingCharacters(in:)", arguments: [
        "  a b  ", "\t\na\r\n", "\u{00A0}x\u{2003}", "\u{2028}y\u{0085}", "", "   ", "é\u{0301} ", "\u{000B}z\u{000C}",
    ])
    func trimming(_ text: String) {
        #expect(text.trimmingWhitespaceAndNewlines == text.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(text.trimmingHorizontalWhitespace == text.trimmingCharacters(in: .whitespaces))
    }

    @Test("ISO 8601 text matches ISO8601DateFormatter", arguments: [0.0, 1_700_000_000.75, 1_767_225_599, -86_400.5])
    func iso8601(_ seconds: Double) {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(Date.ISO8601FormatStyle().format(date) == ISO8601DateFormatter().string(from: date))
    }
}
