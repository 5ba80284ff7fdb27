/// One HTTP header to send on the WebSocket upgrade.
///
/// Its `description` and reflection show the value of a secret header as `[redacted]` (see
/// `isSecret`: a secret-sounding name, or a value that looks like a credential under any name),
/// so printing or logging a header never leaks a credential.
public struct HeaderField: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The header name as given (HTTP header names compare case-insensitively).
    public let name: String
    /// The header value.
    public let value: String

    /// Makes a header without checking it. `RequestBuilder` checks every header it sends;
    /// use `parse(_:)` for user input.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Names whose values are credentials: never logged, printed as `[redacted]`.
    /// Compared case-insensitively.
    public static let secretNames: [String] = [
        "Cf-Access-Client-Secret", "Cf-Access-Token", "Authorization", "Cookie", "Proxy-Authorization",
    ]

    /// Words that make any header name secret-looking (`X-Api-Key`, `X-Auth-Token`,
    /// `My-Password`, `Set-Cookie`…), so a custom `-H` credential is never logged either.
    public static let secretNameWords = ["key", "token", "secret", "auth", "password", "passwd", "cookie", "session"]

    /// More words that make a header name secret-looking (`X-Credential`, `X-Passphrase`,
    /// `X-Otp`, `X-Forwarded-Jwt`, `X-Signature`…). In free text (`Redaction.scrub`) they mark a
    /// header only in a name with a `-`, so a sentence such as "not a JWT: …" stays readable.
    public static let credentialNameWords = ["pass", "credential", "jwt", "otp", "signature", "private"]

    /// Whether a header called `name` carries a secret (case-insensitive): one of
    /// `secretNames`, or a name containing one of `secretNameWords` or `credentialNameWords`.
    public static func isSecretName(_ name: String) -> Bool {
        let lowered = name.asciiLowercased
        return secretNames.contains { $0.asciiLowercased == lowered }
            || secretNameWords.contains { lowered.contains($0) }
            || credentialNameWords.contains { lowered.contains($0) }
    }

    /// `isSecretName` for a `Name:` found in free text: a `credentialNameWords` word counts only
    /// in a name with a `-` (a header's shape).
    static func isSecretNameInText(_ name: String) -> Bool {
        let lowered = name.asciiLowercased
        return secretNames.contains { $0.asciiLowercased == lowered }
            || secretNameWords.contains { lowered.contains($0) }
            || (lowered.contains("-") && credentialNameWords.contains { lowered.contains($0) })
    }

    /// Authorization schemes whose next word is a credential (`Bearer …`, `Basic …`),
    /// compared case-insensitively.
    public static let credentialSchemes = ["bearer", "basic", "digest", "negotiate", "token", "bot", "apikey"]

    /// Whether a header value looks like a credential whatever its header's name: a JWT
    /// (`eyJ….….…`), an authorization scheme followed by a value (`Bearer x`, `Basic x`), or a
    /// long random token (a word of 20 or more letters, digits and `-_.+/=~` with both letters
    /// and digits). Host names, paths, dates and versions are shorter or have no such word.
    public static func looksLikeCredential(_ value: String) -> Bool {
        let words = value.split { $0 == " " || $0 == "\t" || $0 == "," || $0 == ";" }.map { Array($0.unicodeScalars) }
        if let first = words.first, words.count > 1,
           credentialSchemes.contains(String(scalars: first).asciiLowercased) {
            return true
        }
        for word in words {
            // Each `=`-separated piece too: `sid=<token>`.
            for piece in [word] + word.split(separator: "=").map(Array.init) {
                if Redaction.isJWTShaped(piece) || (piece.starts(with: "eyJ".unicodeScalars) && piece.contains(".")) {
                    return true
                }
            }
            if isRandomToken(word) { return true }
        }
        return false
    }

    /// 20+ token characters with letters and digits mixed.
    private static func isRandomToken(_ word: [Unicode.Scalar]) -> Bool {
        guard word.count >= 20 else { return false }
        var letters = false
        var digits = false
        for scalar in word {
            if scalar.isASCIILetter {
                letters = true
            } else if scalar.isASCIIDigit {
                digits = true
            } else if !"-_.+/=~".unicodeScalars.contains(scalar) {
                return false
            }
        }
        return letters && digits
    }

    /// Whether this header's value is a secret: its name says so (`isSecretName`), or its
    /// value looks like one (`looksLikeCredential`).
    public var isSecret: Bool { Self.isSecretName(name) || Self.looksLikeCredential(value) }

    /// `Name: value`, or `Name: [redacted]` for a secret header: the only form to log.
    public var redactedLine: String {
        name + ": " + (isSecret ? "[redacted]" : value)
    }

    /// The redacted line.
    public var description: String { redactedLine }

    /// The redacted line.
    public var debugDescription: String { "HeaderField(" + redactedLine + ")" }

    /// Reflection (`dump`) with the value of a secret header redacted.
    public var customMirror: Mirror {
        Mirror(self, children: ["name": name, "value": isSecret ? "[redacted]" : value], displayStyle: .struct)
    }

    /// Parses a user `-H "Name: value"` argument.
    ///
    /// The name is what comes before the first ":", with surrounding spaces and tabs
    /// trimmed; it must be a non-empty RFC 7230 token (letters, digits, a backtick and
    /// `!#$%&'*+-.^_|~`). The value is the rest, with surrounding spaces and tabs trimmed;
    /// it must not contain CR, LF or another control character except a tab. It may be
    /// empty. Error messages name the header but never show its value (it may be a secret).
    public static func parse(_ raw: String) throws(ConfigurationError) -> HeaderField {
        let scalars = raw.scalarArray
        guard let colon = scalars.firstIndex(of: ":") else {
            // Not shown: a header without a name may be a pasted secret.
            throw ConfigurationError("\(ConfigurationError.Setting.header.placeholder) needs the form \"Name: value\", but it has no \":\"")
        }
        let isBlank: (Unicode.Scalar) -> Bool = { $0 == " " || $0 == "\t" }
        let name = String(scalars: Array(scalars[..<colon]).trimming(isBlank))
        let value = String(scalars: Array(scalars[(colon + 1)...]).trimming(isBlank))
        try checkName(name, option: ConfigurationError.Setting.header.placeholder)
        try checkValue(value, label: "\(ConfigurationError.Setting.header.placeholder) \(shownName(name))")
        return HeaderField(name: name, value: value)
    }

    /// `"Name: …"`, for messages about a header whose value must not be shown.
    static func shownName(_ name: String) -> String {
        Display.quoted(name + ": …", limit: 80)
    }

    /// Checks a header name: a non-empty RFC 7230 token. `option` names the source.
    static func checkName(_ name: String, option: String) throws(ConfigurationError) {
        let scalars = name.scalarArray
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(option) has an empty header name: write it as \"Name: value\"")
        }
        guard let badIndex = scalars.firstIndex(where: { !$0.isHTTPTokenCharacter }) else { return }
        let bad = scalars[badIndex]
        // Show the name only up to the bad character: a mistyped header may hold a secret
        // after a space ("Authorization Bearer …").
        let shown = badIndex == 0 ? "" : " " + Display.quoted(String(scalars: scalars[..<badIndex]) + "…", limit: 60)
        let what: String
        if bad.isLineBreak {
            what = "a line break"
        } else if bad == "\0" {
            what = "a NUL character"
        } else if bad.isControl {
            what = "a control character (\(bad.codePointName))"
        } else if bad == " " || bad == "\t" {
            what = "white space"
        } else if !bad.isASCII {
            what = "a non-ASCII character (\(bad.codePointName))"
        } else {
            what = "\(Display.quoted(String(bad)))"
        }
        throw ConfigurationError(
            "\(option)\(shown): the header name contains \(what); names are ASCII letters, digits and !#$%&'*+-.^_`|~")
    }

    /// Checks a header value: no line break, no NUL, no other control character but a tab.
    /// `label` names the header in messages; the value itself is never shown.
    static func checkValue(_ value: String, label: String) throws(ConfigurationError) {
        for scalar in value.unicodeScalars {
            if scalar.isLineBreak {
                throw ConfigurationError("\(label): value contains a line break (CR or LF); give it on one line")
            }
            if scalar == "\0" {
                throw ConfigurationError("\(label): value contains a NUL character")
            }
            if scalar.isControl && scalar != "\t" {
                throw ConfigurationError("\(label): value contains a control character (\(scalar.codePointName))")
            }
        }
    }
}
