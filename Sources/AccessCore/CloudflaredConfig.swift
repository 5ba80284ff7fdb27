/// cloudflared's `config.yml`, as far as an access client reads it: top-level `key: value` lines
/// (cloudflared reads any flag name there, and `logLevel`/`logDirectory`) and the `forwarders:`
/// list, one local listener per entry (`url`: the Access hostname, `listener`: the local address,
/// `serviceTokenID`, `serviceTokenSecret`, `destination`, `isFedramp`).
///
/// The YAML read is the subset such files use: comments, `key: value` with plain, single- or
/// double-quoted scalars, and block lists of such mappings. A top-level key whose value is a
/// nested block (cloudflared's tunnel daemon's `ingress:`, `originRequest:`, …) is kept as a block,
/// unread. Anything else is refused with its line number.
package struct CloudflaredConfig: Sendable, Equatable {
    /// A top-level setting.
    package struct Setting: Sendable, Equatable {
        package let key: String
        /// The scalar, or nil for a nested block (not read).
        package let value: String?
        package let line: Int
    }

    /// One entry of `forwarders:`.
    package struct Forwarder: Sendable, Equatable {
        /// The Access application's hostname (`url`).
        package var hostname: String?
        /// The local address (`listener`).
        package var listener: String?
        package var serviceTokenID: String?
        package var serviceTokenSecret: String?
        package var destination: String?
        /// `isFedramp: true`.
        package var fedRAMP = false
        /// The line the entry starts on.
        package let line: Int
    }

    package private(set) var settings: [Setting] = []
    package private(set) var forwarders: [Forwarder] = []

    /// Whether the file is a configuration of cloudflared's tunnel daemon (it names a `tunnel` or
    /// `ingress`): such a file found in cloudflared's directories is not for an access client.
    package var isTunnelDaemonConfig: Bool { settings.contains { $0.key == "tunnel" || $0.key == "ingress" } }

    /// Reads `text`; `name` is the file's name in messages.
    package static func parse(_ text: String, name: String) throws(ConfigurationError) -> CloudflaredConfig {
        var config = CloudflaredConfig()
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { String($0) }
        var index = 0
        func fail(_ line: Int, _ what: String) -> ConfigurationError {
            ConfigurationError("\(name) line \(line): \(what)")
        }
        while index < lines.count {
            let number = index + 1
            let line = Self.content(of: lines[index])
            index += 1
            guard !line.text.isEmpty else { continue }
            guard line.indent == 0 else { throw fail(number, "an indented line outside a list; write top-level settings as key: value") }
            guard let (key, rest) = Self.keyValue(line.text) else {
                throw fail(number, "cannot read \(Self.shown(line.text)); write key: value")
            }
            // What follows, more indented, belongs to this key.
            var block: [(number: Int, indent: Int, text: String)] = []
            while index < lines.count {
                let next = Self.content(of: lines[index])
                if !next.text.isEmpty && next.indent == 0 { break }
                if !next.text.isEmpty { block.append((index + 1, next.indent, next.text)) }
                index += 1
            }
            if !rest.isEmpty {
                guard block.isEmpty else { throw fail(block[0].number, "an indented line after \(key): \(Self.shown(rest))") }
                config.settings.append(Setting(key: key, value: try Self.scalar(rest, line: number, fail: fail), line: number))
            } else if key == "forwarders" {
                config.forwarders = try Self.forwarders(block, fail: fail)
                config.settings.append(Setting(key: key, value: nil, line: number))
            } else {
                config.settings.append(Setting(key: key, value: block.isEmpty ? "" : nil, line: number))
            }
        }
        return config
    }

    /// The `forwarders:` block: `- key: value` items, each continued by deeper `key: value` lines.
    private static func forwarders(_ block: [(number: Int, indent: Int, text: String)],
                                   fail: (Int, String) -> ConfigurationError) throws(ConfigurationError) -> [Forwarder] {
        var result: [Forwarder] = []
        for (number, _, text) in block {
            var entry = text
            if entry.hasPrefix("-") {
                entry = String(entry.dropFirst()).trimmingWhitespace
                result.append(Forwarder(line: number))
                if entry.isEmpty { continue }
            }
            guard !result.isEmpty else { throw fail(number, "forwarders: is a list: start each entry with - ") }
            guard let (key, rest) = keyValue(entry), !rest.isEmpty else {
                throw fail(number, "cannot read \(shown(entry)) in forwarders; write key: value")
            }
            let value = try scalar(rest, line: number, fail: fail)
            switch key {
            case "url": result[result.count - 1].hostname = value
            case "listener": result[result.count - 1].listener = value
            case "serviceTokenID": result[result.count - 1].serviceTokenID = value
            case "serviceTokenSecret": result[result.count - 1].serviceTokenSecret = value
            case "destination": result[result.count - 1].destination = value
            case "isFedramp":
                guard value == "true" || value == "false" else { throw fail(number, "isFedramp must be true or false") }
                result[result.count - 1].fedRAMP = value == "true"
            default:
                throw fail(number, "\(key) is not a forwarder setting: use url, listener, serviceTokenID, "
                               + "serviceTokenSecret, destination or isFedramp")
            }
        }
        return result
    }

    /// A line without its comment and trailing white space, and its indentation.
    private static func content(of raw: String) -> (indent: Int, text: String) {
        var text = ""
        var quote: Unicode.Scalar?
        var previous: Unicode.Scalar = " "
        for scalar in raw.unicodeScalars {
            if let open = quote {
                if scalar == open { quote = nil }
            } else if scalar == "\"" || scalar == "'" {
                quote = scalar
            } else if scalar == "#", previous == " " || previous == "\t" {
                break
            }
            text.unicodeScalars.append(scalar)
            previous = scalar
        }
        let indent = text.unicodeScalars.prefix { $0 == " " }.count
        return (indent, text.trimmingWhitespace)
    }

    /// `key: value` (or `key:`) split at the first `: ` or final `:`; nil if the line is no such pair.
    private static func keyValue(_ text: String) -> (String, String)? {
        let scalars = text.scalarArray
        for (position, scalar) in scalars.enumerated() where scalar == ":" {
            let end = position + 1 == scalars.count
            guard end || scalars[position + 1] == " " || scalars[position + 1] == "\t" else { continue }
            let key = String(scalars: scalars[..<position]).trimmingWhitespace
            guard !key.isEmpty, key.unicodeScalars.allSatisfy({ $0.properties.isAlphabetic || $0.isASCIIDigit || $0 == "-" || $0 == "_" })
            else { return nil }
            return (key, end ? "" : String(scalars: scalars[(position + 1)...]).trimmingWhitespace)
        }
        return nil
    }

    /// A plain, 'single'- or "double"-quoted scalar.
    private static func scalar(_ raw: String, line: Int, fail: (Int, String) -> ConfigurationError) throws(ConfigurationError) -> String {
        switch raw.unicodeScalars.first {
        case "'":
            guard raw.count >= 2, raw.hasSuffix("'") else { throw fail(line, "a quote ' that is not closed") }
            return String(raw.dropFirst().dropLast()).replacingAll("''", with: "'")
        case "\"":
            guard raw.count >= 2, raw.hasSuffix("\"") else { throw fail(line, "a quote \" that is not closed") }
            var out = ""
            var escaped = false
            for scalar in raw.unicodeScalars.dropFirst().dropLast() {
                if escaped {
                    switch scalar {
                    case "n": out.unicodeScalars.append("\n")
                    case "t": out.unicodeScalars.append("\t")
                    case "\\", "\"", "/": out.unicodeScalars.append(scalar)
                    default: throw fail(line, "the escape \\\(scalar) is not read here")
                    }
                    escaped = false
                } else if scalar == "\\" {
                    escaped = true
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
            return out
        case "{", "[", "&", "*", "|", ">", "!", "%", "@", "`":
            throw fail(line, "\(shown(raw)) is YAML this reader does not take: write a plain or quoted value")
        default:
            return raw
        }
    }

    private static func shown(_ text: String) -> String { Display.quoted(text, limit: 60) }
}

private extension String {
    /// Every `target` replaced by `replacement`, scalar by scalar.
    func replacingAll(_ target: String, with replacement: String) -> String {
        let pattern = target.scalarArray
        let scalars = scalarArray
        var out = String.UnicodeScalarView()
        var position = 0
        while position < scalars.count {
            if position + pattern.count <= scalars.count, Array(scalars[position..<(position + pattern.count)]) == pattern {
                out.append(contentsOf: replacement.unicodeScalars)
                position += pattern.count
            } else {
                out.append(scalars[position])
                position += 1
            }
        }
        return String(out)
    }
}
