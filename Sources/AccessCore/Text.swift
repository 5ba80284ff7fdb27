// Small, internal text helpers. The parsers in this module work on Unicode scalars, not on
// Characters: a grapheme cluster may hide a ":" or a "\r" behind a combining mark, and an
// HTTP header or a URL is a sequence of code points, not of user-perceived characters.

extension String {
    /// Builds a string from a sequence of Unicode scalars.
    init<S: Sequence>(scalars: S) where S.Element == Unicode.Scalar {
        var view = String.UnicodeScalarView()
        view.append(contentsOf: scalars)
        self.init(view)
    }

    /// The string's Unicode scalars as an array, for index arithmetic.
    var scalarArray: [Unicode.Scalar] { Array(unicodeScalars) }

    /// The string without leading and trailing Unicode white space (including line breaks).
    var trimmingWhitespace: String {
        String(scalars: scalarArray.trimming { $0.properties.isWhitespace })
    }

    /// ASCII letters lower-cased; every other scalar unchanged.
    var asciiLowercased: String {
        String(scalars: unicodeScalars.map { $0.asciiLowercased })
    }

}

extension Array where Element == Unicode.Scalar {
    /// A copy without the leading and trailing scalars that match `predicate`.
    func trimming(_ predicate: (Unicode.Scalar) -> Bool) -> [Unicode.Scalar] {
        guard let first = firstIndex(where: { !predicate($0) }),
              let last = lastIndex(where: { !predicate($0) }) else { return [] }
        return Array(self[first...last])
    }

    /// The index of the first occurrence of the ASCII sequence `needle`, if any.
    func firstIndex(ofSequence needle: String) -> Int? {
        let pattern = needle.scalarArray
        guard !pattern.isEmpty, pattern.count <= count else { return nil }
        var start = 0
        while start + pattern.count <= count {
            if self[start..<(start + pattern.count)].elementsEqual(pattern) { return start }
            start += 1
        }
        return nil
    }

    /// How many elements equal `scalar`.
    func count(of scalar: Unicode.Scalar) -> Int {
        reduce(0) { $0 + ($1 == scalar ? 1 : 0) }
    }
}

extension Unicode.Scalar {
    /// "0"..."9".
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
    /// "a"..."z" or "A"..."Z".
    var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
    /// A hexadecimal digit, either case.
    var isASCIIHexDigit: Bool {
        isASCIIDigit || ("a"..."f").contains(self) || ("A"..."F").contains(self)
    }
    /// The scalar with an ASCII capital letter lower-cased.
    var asciiLowercased: Unicode.Scalar {
        ("A"..."Z").contains(self) ? Unicode.Scalar(value + 32)! : self
    }

    /// A line break of any kind: CR, LF, NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR,
    /// vertical tab and form feed. None may appear in a header or a log line.
    var isLineBreak: Bool {
        switch value {
        case 0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029: return true
        default: return false
        }
    }

    /// A C0 or C1 control character, or DEL.
    var isControl: Bool { value < 0x20 || (0x7F...0x9F).contains(value) }

    /// An RFC 7230 `tchar`: the characters a header name (a `token`) may hold.
    var isHTTPTokenCharacter: Bool {
        if isASCIILetter || isASCIIDigit { return true }
        switch self {
        case "!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~": return true
        default: return false
        }
    }

    /// "U+001B" style name, for messages about invisible characters.
    var codePointName: String {
        let hex = String(value, radix: 16, uppercase: true)
        return "U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }
}

/// Rendering of user input inside one-line messages.
enum Display {
    /// The text on one line: control characters and line breaks escaped (`\r`, `\n`,
    /// `\u{1B}`), and cut to `limit` scalars with "…" when longer.
    static func escaped(_ text: String, limit: Int = 120) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            if count >= limit {
                out += "…"
                break
            }
            count += 1
            switch scalar {
            case "\r": out += "\\r"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\0": out += "\\0"
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            default:
                if scalar.isControl || scalar.isLineBreak {
                    out += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }

    /// `escaped(text)` between double quotes.
    static func quoted(_ text: String, limit: Int = 120) -> String {
        "\"" + escaped(text, limit: limit) + "\""
    }

    /// The text on one line: every run of line breaks, control characters and white space
    /// becomes a single space, and the ends are trimmed.
    static func oneLine(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        var pendingSpace = false
        for scalar in text.unicodeScalars {
            if scalar.isControl || scalar.isLineBreak || scalar.properties.isWhitespace {
                pendingSpace = !out.isEmpty
                continue
            }
            if pendingSpace {
                out.append(" ")
                pendingSpace = false
            }
            out.append(scalar)
        }
        return String(out)
    }
}

extension StringProtocol {
    /// Without leading and trailing white space and line breaks: the Unicode White_Space
    /// scalars, the set Foundation's `trimmingCharacters(in: .whitespacesAndNewlines)` removes.
    package var trimmingWhitespaceAndNewlines: String {
        trimmingScalars { $0.properties.isWhitespace }
    }

    /// Without leading and trailing horizontal white space: tab and the space separators
    /// (Unicode category Zs), the set Foundation's `trimmingCharacters(in: .whitespaces)` removes.
    package var trimmingHorizontalWhitespace: String {
        trimmingScalars { $0 == "\t" || $0.properties.generalCategory == .spaceSeparator }
    }

    /// Without the leading and trailing scalars that match `predicate`.
    private func trimmingScalars(_ predicate: (Unicode.Scalar) -> Bool) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !predicate($0) }),
              let last = scalars.lastIndex(where: { !predicate($0) }) else { return "" }
        return String(scalars: scalars[first...last])
    }
}
