/// Text a server controls, made safe to show on a terminal before it becomes a value of the
/// library (issue 16 point 2), as OpenSSH does with `strnvis(3)`: printable UTF-8 stays as it
/// is, so names and prompts in any language read normally, while every byte that could drive a
/// terminal — C0 and C1 controls (ESC, CSI, OSC, BEL, CR, backspace), DEL, invisible format
/// characters that reorder or hide text (bidirectional overrides), line and paragraph
/// separators, and bytes that are not UTF-8 — is written as a visible octal escape (`\033`).
/// A backslash is doubled, so an escape can always be told from text that looks like one.
package enum ServerText {
    /// `bytes` from the server as visible text. Line feeds stay when `newlines` (an instruction
    /// of several lines); tabs always stay. At most `limit` bytes of the result; what is cut is
    /// said (`…[N more bytes]`).
    package static func visible<Bytes: Collection>(_ bytes: Bytes, newlines: Bool = false,
                                                   limit: Int = 8192) -> String where Bytes.Element == UInt8 {
        var out = ""
        var written = 0
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let (scalar, length) = decode(bytes, at: index)
            let end = bytes.index(index, offsetBy: length)
            let piece: String
            if let scalar, isShown(scalar, newlines: newlines) {
                piece = scalar == "\\" ? "\\\\" : String(Character(scalar))
            } else {
                piece = bytes[index..<end].map(octal).joined()
            }
            let size = piece.utf8.count
            if written + size > limit {
                out += "…[\(bytes.distance(from: index, to: bytes.endIndex)) more bytes]"
                return out
            }
            out += piece
            written += size
            index = end
        }
        return out
    }

    /// `text` (already decoded, e.g. by a library that handed it over as a C string) as
    /// visible text.
    package static func visible(_ text: String, newlines: Bool = false, limit: Int = 8192) -> String {
        visible(Array(text.utf8), newlines: newlines, limit: limit)
    }

    /// Whether `scalar` may be shown as itself.
    static func isShown(_ scalar: Unicode.Scalar, newlines: Bool) -> Bool {
        switch scalar {
        case "\t": return true
        case "\n": return newlines
        case "\u{200D}": return true   // zero-width joiner: part of emoji sequences
        default: break
        }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate:
            return false
        default:
            return !scalar.properties.isNoncharacterCodePoint
        }
    }

    /// `\ooo`: the byte in three octal digits.
    private static func octal(_ byte: UInt8) -> String {
        "\\" + String(byte >> 6) + String((byte >> 3) & 7) + String(byte & 7)
    }

    /// The scalar encoded at `index` and its length in bytes; nil (length 1) for a byte that
    /// does not start a well-formed UTF-8 sequence (overlong forms, surrogates and values
    /// past U+10FFFF included).
    private static func decode<Bytes: Collection>(_ bytes: Bytes, at index: Bytes.Index) -> (Unicode.Scalar?, Int)
    where Bytes.Element == UInt8 {
        let first = bytes[index]
        let length: Int
        var value: UInt32
        switch first {
        case 0x00...0x7F: return (Unicode.Scalar(first), 1)
        case 0xC2...0xDF: (length, value) = (2, UInt32(first & 0x1F))
        case 0xE0...0xEF: (length, value) = (3, UInt32(first & 0x0F))
        case 0xF0...0xF4: (length, value) = (4, UInt32(first & 0x07))
        default: return (nil, 1)
        }
        var position = bytes.index(after: index)
        for _ in 1..<length {
            guard position != bytes.endIndex, bytes[position] & 0xC0 == 0x80 else { return (nil, 1) }
            value = value << 6 | UInt32(bytes[position] & 0x3F)
            position = bytes.index(after: position)
        }
        let smallest: UInt32 = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000
        guard value >= smallest, let scalar = Unicode.Scalar(value) else { return (nil, 1) }
        return (scalar, length)
    }
}
