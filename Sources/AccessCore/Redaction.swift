/// Removing secrets from text before it reaches a message or a log.
///
/// Messages in this module are built from our own words plus inputs that were checked; the
/// functions here are for inputs we do not control (a TLS library's reason, a `Location`
/// header, a server's error text).
package enum Redaction {
    /// What a removed secret is replaced with.
    package static let placeholder = "[redacted]"

    /// A URL reduced to what identifies a place: scheme, host and path. User information,
    /// query and fragment (where tokens travel: `?token=…`, `kid`, `redirect_url`) are
    /// removed. The result is on one line.
    ///
    /// `https://u:p@team.cloudflareaccess.com/cdn-cgi/access/login/app?kid=1&token=x` →
    /// `https://team.cloudflareaccess.com/cdn-cgi/access/login/app`.
    package static func url(_ raw: String) -> String {
        var scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        var prefix: [Unicode.Scalar] = []
        if let schemeEnd = scalars.firstIndex(ofSequence: "://"),
           !scalars[..<schemeEnd].contains(where: { $0 == "/" || $0 == "?" || $0 == "#" }) {
            prefix = Array(scalars[..<(schemeEnd + 3)])
            scalars = Array(scalars[(schemeEnd + 3)...])
            let authorityEnd = scalars.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? scalars.count
            var authority = Array(scalars[..<authorityEnd])
            if let at = authority.lastIndex(of: "@") {
                authority = Array(authority[(at + 1)...])
            }
            prefix += authority
            scalars = Array(scalars[authorityEnd...])
        }
        let pathEnd = scalars.firstIndex { $0 == "?" || $0 == "#" } ?? scalars.count
        return Display.oneLine(String(scalars: prefix + scalars[..<pathEnd]))
    }

    /// Free text on one line with anything that looks like a credential replaced by
    /// `[redacted]`:
    /// - the query, fragment and user information of URLs;
    /// - JWTs (`eyJ….….…`) and long opaque tokens (32+ letters and digits, mixed);
    /// - the value of `key=value` pairs whose key names a token, secret, password, session,
    ///   cookie, signature or authorization;
    /// - the word after a secret header name (`Cf-Access-Client-Secret: x`), `Bearer` or
    ///   `Basic`.
    package static func scrub(_ text: String) -> String {
        let words = Display.oneLine(text).split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        var output: [String] = []
        // After a secret header name, every word up to the next "Name:" is its value.
        var inSecretHeaderValue = false
        var redactNextWord = false
        for word in words {
            // A "Name:" word that itself holds something scrubbing removes is not a name:
            // otherwise its scrubbed form would read as a secret header's value next time.
            let isHeaderName = word.count > 1 && word.hasSuffix(":")
                && word.dropLast().unicodeScalars.allSatisfy(\.isHTTPTokenCharacter)
                && scrubWord(word) == word
            if inSecretHeaderValue && !isHeaderName {
                if output.last != placeholder { output.append(placeholder) }
                continue
            }
            inSecretHeaderValue = false
            if redactNextWord {
                redactNextWord = false
                output.append(placeholder)
                continue
            }
            if isHeaderName && HeaderField.isSecretNameInText(String(word.dropLast())) {
                output.append(word)
                inSecretHeaderValue = true
                continue
            }
            let lowered = word.asciiLowercased
            if lowered == "bearer" || lowered == "basic" {
                output.append(word)
                redactNextWord = true
                continue
            }
            output.append(scrubWord(word))
        }
        return output.joined(separator: " ")
    }

    /// One word scrubbed until nothing more changes: removing one secret can expose another
    /// shape (a URL whose authority now reaches an `@`), and scrubbing must be idempotent. A word
    /// that has not settled after a few rounds is replaced whole.
    static func scrubWord(_ word: String, maxRounds: Int = 6) -> String {
        var current = word
        for _ in 0..<maxRounds {
            let next = scrubWordOnce(current)
            if next == current { return current }
            current = next
        }
        return placeholder
    }

    private static func scrubWordOnce(_ word: String) -> String {
        var scalars = word.scalarArray
        // Every URL in the word, not only the first: a second one's user information would
        // otherwise survive until the first one's removal made it the first (not idempotent).
        var searchFrom = 0
        while searchFrom < scalars.count,
              let found = Array(scalars[searchFrom...]).firstIndex(ofSequence: "://") {
            let schemeEnd = searchFrom + found
            scalars = scrubURL(scalars, schemeEnd: schemeEnd)
            searchFrom = schemeEnd + 3
        }
        scalars = scrubPairs(scalars)
        scalars = scrubTokens(scalars)
        return String(scalars: scalars)
    }

    /// Replaces userinfo, query and fragment of a URL inside a word.
    private static func scrubURL(_ scalars: [Unicode.Scalar], schemeEnd: Int) -> [Unicode.Scalar] {
        let start = schemeEnd + 3
        var rest = Array(scalars[start...])
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.count
        if let at = rest[..<authorityEnd].lastIndex(of: "@") {
            rest = placeholder.scalarArray + Array(rest[at...])
        }
        if let queryStart = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) {
            rest = Array(rest[...queryStart]) + placeholder.scalarArray
        }
        return Array(scalars[..<start]) + rest
    }

    private static let secretKeyWords = [
        "token", "secret", "password", "passwd", "session", "cookie", "authorization", "jwt", "sig", "key", "auth",
    ]

    /// Replaces the value of `key=value` pairs whose key names a secret.
    private static func scrubPairs(_ scalars: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var output: [Unicode.Scalar] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            output.append(scalar)
            index += 1
            guard scalar == "=" else { continue }
            // The key: the run of name characters before "=".
            var keyStart = output.count - 1
            while keyStart > 0, isKeyCharacter(output[keyStart - 1]) { keyStart -= 1 }
            let key = String(scalars: output[keyStart..<(output.count - 1)]).asciiLowercased
            guard !key.isEmpty, secretKeyWords.contains(where: { key.contains($0) }) else { continue }
            // Already redacted (scrubbing twice changes nothing).
            if scalars[index...].starts(with: placeholderScalars) {
                output += placeholderScalars
                index += placeholderScalars.count
                continue
            }
            var valueEnd = index
            while valueEnd < scalars.count, !isValueTerminator(scalars[valueEnd]) {
                // A placeholder inside the value (from a URL in it) is part of the value: its
                // "]" does not end it.
                valueEnd += scalars[valueEnd...].starts(with: placeholderScalars) ? placeholderScalars.count : 1
            }
            if valueEnd > index {
                output += placeholder.scalarArray
                index = valueEnd
            }
        }
        return output
    }

    private static func isKeyCharacter(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCIILetter || scalar.isASCIIDigit || scalar == "_" || scalar == "-" || scalar == "."
    }

    private static func isValueTerminator(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "&", ";", ",", "\"", "'", ")", "]", "}", " ": return true
        default: return false
        }
    }

    /// Replaces JWT-like and long opaque runs of token characters.
    private static func scrubTokens(_ scalars: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var output: [Unicode.Scalar] = []
        var run: [Unicode.Scalar] = []
        func flush() {
            output += redactRun(run)
            run = []
        }
        for scalar in scalars {
            if scalar.isASCIILetter || scalar.isASCIIDigit || "-_.+/=".unicodeScalars.contains(scalar) {
                run.append(scalar)
            } else {
                flush()
                output.append(scalar)
            }
        }
        flush()
        return output
    }

    private static let placeholderScalars = placeholder.scalarArray

    /// Replaces a run of token characters, piece by piece between `=` signs (`a=<jwt>`), when
    /// it looks like a credential.
    private static func redactRun(_ run: [Unicode.Scalar]) -> [Unicode.Scalar] {
        if looksLikeToken(run) { return placeholderScalars }
        guard run.contains("=") else { return run }
        var output: [Unicode.Scalar] = []
        var piece: [Unicode.Scalar] = []
        for scalar in run {
            if scalar == "=" {
                output += looksLikeToken(piece) ? placeholderScalars : piece
                output.append(scalar)
                piece = []
            } else {
                piece.append(scalar)
            }
        }
        output += looksLikeToken(piece) ? placeholderScalars : piece
        return output
    }

    /// Three dot-separated base64url segments whose first is a JSON object (`ey…`): a JWT,
    /// however short its segments.
    static func isJWTShaped(_ run: [Unicode.Scalar]) -> Bool {
        let segments = run.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, segments.allSatisfy({ !$0.isEmpty }) else { return false }
        let base64url = { (s: Unicode.Scalar) in s.isASCIILetter || s.isASCIIDigit || s == "-" || s == "_" }
        guard segments.allSatisfy({ $0.allSatisfy(base64url) }) else { return false }
        return segments[0].starts(with: "ey".unicodeScalars) && segments[0].count >= 4
    }

    private static func looksLikeToken(_ run: [Unicode.Scalar]) -> Bool {
        if run.starts(with: "eyJ".unicodeScalars) && run.contains(".") { return true }
        if isJWTShaped(run) { return true }
        // A stretch of 32+ without "." or "/" (so host names and paths survive).
        var current = 0
        var hasLetter = false
        var hasDigit = false
        var mixed = false
        for scalar in run {
            if scalar == "." || scalar == "/" {
                current = 0
                hasLetter = false
                hasDigit = false
                continue
            }
            current += 1
            hasLetter = hasLetter || scalar.isASCIILetter
            hasDigit = hasDigit || scalar.isASCIIDigit
            if current >= 32 && hasLetter && hasDigit { mixed = true }
        }
        return mixed
    }
}
