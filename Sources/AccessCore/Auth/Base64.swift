import FoundationEssentials

/// Base64 in the two alphabets Access uses (RFC 4648 §4 standard, §5 URL-safe), with or
/// without `=` padding.
package enum Base64 {
    /// The alphabet of an encoding.
    package enum Alphabet: Sendable {
        /// `A–Z a–z 0–9 + /` (RFC 4648 §4).
        case standard
        /// `A–Z a–z 0–9 - _` (RFC 4648 §5).
        case url
    }

    /// Decodes `text` in `alphabet`; padding is optional. Returns nil for any character
    /// outside the alphabet (white space included), a wrong length or misplaced padding.
    package static func decode(_ text: String, alphabet: Alphabet) -> [UInt8]? {
        var scalars = Array(text.unicodeScalars)
        var padding = 0
        while scalars.last == "=" {
            scalars.removeLast()
            padding += 1
        }
        guard padding <= 2, scalars.count % 4 != 1 else { return nil }
        if padding > 0, (scalars.count + padding) % 4 != 0 { return nil }
        var standard = String.UnicodeScalarView()
        for scalar in scalars {
            switch scalar {
            case "A"..."Z", "a"..."z", "0"..."9":
                standard.append(scalar)
            case "+", "/":
                guard alphabet == .standard else { return nil }
                standard.append(scalar)
            case "-":
                guard alphabet == .url else { return nil }
                standard.append("+")
            case "_":
                guard alphabet == .url else { return nil }
                standard.append("/")
            default:
                return nil
            }
        }
        while standard.count % 4 != 0 { standard.append("=") }
        guard let data = Data(base64Encoded: String(standard)) else { return nil }
        return [UInt8](data)
    }

    /// Encodes `bytes` in `alphabet`, with `=` padding when `padded`.
    package static func encode(_ bytes: [UInt8], alphabet: Alphabet, padded: Bool) -> String {
        var text = Data(bytes).base64EncodedString()
        if alphabet == .url {
            text = String(String.UnicodeScalarView(text.unicodeScalars.map { scalar -> Unicode.Scalar in
                switch scalar {
                case "+": return "-"
                case "/": return "_"
                default: return scalar
                }
            }))
        }
        if !padded {
            while text.hasSuffix("=") { text.removeLast() }
        }
        return text
    }
}
