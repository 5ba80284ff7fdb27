// Host-name checks and IDNA conversion shared by every parser that takes a host.

/// A host as given on the command line, once checked.
enum ParsedHost: Equatable {
    /// A DNS name, lower-cased ASCII (IDN labels already in `xn--` form), no trailing dot.
    case name(String)
    /// A dotted-quad IPv4 address.
    case ipv4(IPv4Address)
    /// An IPv6 address (no brackets).
    case ipv6(IPv6Address)

    /// The text to dial or to put in a URL authority (IPv6 without brackets).
    var text: String {
        switch self {
        case .name(let name): return name
        case .ipv4(let address): return address.text
        case .ipv6(let address): return address.text
        }
    }

    /// The text with an IPv6 address in brackets, for `host:port` forms.
    var bracketedText: String {
        if case .ipv6(let address) = self { return "[" + address.text + "]" }
        return text
    }
}

enum HostName {
    /// Longest DNS name in text form without the trailing dot (RFC 1035 §2.3.4, 255 octets
    /// on the wire).
    static let maxLength = 253
    /// Longest DNS label (RFC 1035 §2.3.4).
    static let maxLabelLength = 63

    /// Dots that IDNA treats as label separators (UTS #46 maps them to ".").
    private static let dots: Set<Unicode.Scalar> = [".", "\u{3002}", "\u{FF0E}", "\u{FF61}"]

    /// Checks a host that is not in brackets: an IPv4 address, or a DNS name converted to
    /// its ASCII (IDNA) form. `flag` names the option in error messages.
    ///
    /// Rules: one trailing dot is removed; no empty label; labels are letters, digits, "-"
    /// and "_", not starting or ending with "-", at most 63 octets; the whole name at most
    /// 253; a name whose last label is all digits must be a valid dotted quad. Non-ASCII
    /// labels are lower-cased, put in Unicode NFC, checked (letters, marks, digits and "-"
    /// only) and encoded with Punycode behind `xn--`, one label at a time.
    static func parse(_ raw: [Unicode.Scalar], flag: String) throws(ConfigurationError) -> ParsedHost {
        let shown = Display.quoted(String(scalars: raw))
        var scalars = raw
        if let last = scalars.last, dots.contains(last) {
            scalars.removeLast()
        }
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(flag) \(shown) has no host name: give a name like ssh.example.com")
        }
        if let bad = scalars.first(where: { $0.isLineBreak || $0.isControl || $0.properties.isWhitespace }) {
            let what = bad == " " ? "a space" : "an invisible character (\(bad.codePointName))"
            throw ConfigurationError("\(flag) \(shown) is not a valid host name: it contains \(what)")
        }

        var labels: [String] = []
        var current: [Unicode.Scalar] = []
        var rawLabels: [[Unicode.Scalar]] = []
        for scalar in scalars {
            if dots.contains(scalar) {
                rawLabels.append(current)
                current = []
            } else {
                current.append(scalar)
            }
        }
        rawLabels.append(current)

        for label in rawLabels {
            guard !label.isEmpty else {
                throw ConfigurationError("\(flag) \(shown) is not a valid host name: it has an empty label (two dots in a row?)")
            }
            labels.append(try asciiLabel(label, flag: flag, shown: shown))
        }

        if let last = labels.last, last.unicodeScalars.allSatisfy(\.isASCIIDigit) {
            let joined = labels.joined(separator: ".")
            guard let address = IPv4Address(joined) else {
                throw ConfigurationError("\(flag) \(shown) is not a valid IPv4 address: use four numbers 0-255, like 192.0.2.1")
            }
            return .ipv4(address)
        }

        let name = labels.joined(separator: ".")
        guard name.utf8.count <= maxLength else {
            throw ConfigurationError("\(flag) \(shown) is too long: a host name has at most \(maxLength) characters")
        }
        return .name(name)
    }

    /// One label in its ASCII form (lower-cased; Punycode for non-ASCII), checked.
    private static func asciiLabel(_ label: [Unicode.Scalar], flag: String, shown: String) throws(ConfigurationError) -> String {
        let result: String
        if label.allSatisfy(\.isASCII) {
            let lowered = label.map(\.asciiLowercased)
            if let bad = lowered.first(where: { !($0.isASCIILetter || $0.isASCIIDigit || $0 == "-" || $0 == "_") }) {
                throw ConfigurationError("\(flag) \(shown) is not a valid host name: \(Display.quoted(String(bad))) is not allowed (use letters, digits, \"-\" and \".\")")
            }
            result = String(scalars: lowered)
        } else {
            let text = normalizedUnicodeLabel(label)
            let scalars = text.scalarArray
            for (index, scalar) in scalars.enumerated() {
                guard isAllowedInUnicodeLabel(scalar, atStart: index == 0) else {
                    throw ConfigurationError("\(flag) \(shown) is not a valid host name: \(scalar.codePointName) \(Display.quoted(String(scalar))) is not allowed in an international domain name")
                }
            }
            if scalars.first == "-" || scalars.last == "-" {
                throw ConfigurationError("\(flag) \(shown) is not a valid host name: a label may not start or end with \"-\"")
            }
            guard let encoded = Punycode.encode(scalars: scalars) else {
                throw ConfigurationError("\(flag) \(shown) is not a valid host name: a label is too long")
            }
            result = "xn--" + encoded
        }
        if result.hasPrefix("-") || result.hasSuffix("-") {
            throw ConfigurationError("\(flag) \(shown) is not a valid host name: a label may not start or end with \"-\"")
        }
        guard result.utf8.count <= maxLabelLength else {
            throw ConfigurationError("\(flag) \(shown) is not a valid host name: a label is longer than \(maxLabelLength) characters")
        }
        return result
    }

    /// IDNA mapping for one label, the part this module implements: Unicode lower-casing,
    /// then canonical composition (NFC), as UTS #46 does before Punycode.
    private static func normalizedUnicodeLabel(_ label: [Unicode.Scalar]) -> String {
        let lowered = String(scalars: label).lowercased()
        // `_nfcCodeUnits` is the standard library's own NFC (the one String comparison uses);
        // the standard library has no other public door to it, and this module takes no
        // Foundation dependency for one call.
        return String(decoding: lowered._nfcCodeUnits, as: UTF8.self)
    }

    /// Letters, combining marks (not first), decimal digits and "-": the code points
    /// IDNA 2008 allows in practice. Symbols, punctuation, spaces, joiners and unassigned
    /// code points are refused.
    private static func isAllowedInUnicodeLabel(_ scalar: Unicode.Scalar, atStart: Bool) -> Bool {
        if scalar.isASCII {
            return scalar.isASCIILetter || scalar.isASCIIDigit || scalar == "-"
        }
        switch scalar.properties.generalCategory {
        case .lowercaseLetter, .otherLetter, .modifierLetter, .titlecaseLetter, .uppercaseLetter:
            return true
        case .nonspacingMark, .spacingMark, .enclosingMark:
            return !atStart
        case .decimalNumber:
            return true
        default:
            return false
        }
    }
}
