/// The Access-protected origin, parsed from a hostname (PROTOCOL.md §1).
///
/// Always HTTPS: the WebSocket URL is the same origin with `wss`.
public struct OriginURL: Sendable, Equatable, CustomStringConvertible {
    /// The host: lower-cased ASCII, an IDN already in Punycode (`xn--…`) form, no trailing
    /// dot; a dotted-quad IPv4 address; or an IPv6 address without brackets, in RFC 5952
    /// canonical form (`2001:db8::1`).
    public let host: String
    /// The explicit port, if one was given; `nil` means 443.
    public let port: Int?
    /// The path, "/" if none was given. Never holds a query or a fragment.
    public let path: String

    init(host: String, port: Int?, path: String) {
        self.host = host
        self.port = port
        self.path = path
    }

    /// Whether `host` is an IPv6 address.
    public var isIPv6: Bool { host.unicodeScalars.contains(":") }

    /// The `Host` header value (and URL authority): `host` or `host:port`, an IPv6 address
    /// in brackets (`[::1]:8443`).
    public var hostHeader: String {
        guard let port else { return HostText.bracketed(host) }
        return HostText.withPort(host, port)
    }

    /// The port to dial: `port`, or 443.
    public var effectivePort: Int { port ?? 443 }

    /// `https://` + `hostHeader` + `path`.
    public var httpsURL: String { "https://" + hostHeader + path }

    /// `wss://` + `hostHeader` + `path`: the URL of the WebSocket upgrade.
    public var webSocketURL: String { "wss://" + hostHeader + path }

    /// The HTTPS URL.
    public var description: String { httpsURL }

    /// Parses a hostname (`ssh.example.com`, `https://ssh.example.com/path`, an IDN, an IP address).
    ///
    /// - Surrounding white space is trimmed.
    /// - No scheme means `https://`; `http://` is upgraded to `https://`; `https://`,
    ///   `ws://` and `wss://` are accepted (both mean `wss` for the tunnel). Any other scheme
    ///   is refused.
    /// - A bare IPv6 address (`::1`, `2001:db8::1`, also after a scheme) is taken as an
    ///   IPv6 host; with a port it must be bracketed (`[::1]:2222`).
    /// - The port, if any, is 1...65535 in decimal digits.
    /// - User information (`user@host`) is refused, and so are a query (`?…`) and a
    ///   fragment (`#…`): Access applications are addressed by host and path only, and a
    ///   query silently dropped would hide a mistake.
    /// - The host is checked and converted: see the rules on `host`. Labels longer than 63
    ///   characters and names longer than 253 are refused.
    /// - The path, if given, is kept as written; it may only hold RFC 3986 path characters
    ///   and `%XX` escapes.
    public static func parse(_ raw: String) throws(ConfigurationError) -> OriginURL {
        let flag = ConfigurationError.Setting.hostname.placeholder
        let emptyError = ConfigurationError(
            "\(flag) is empty: give the Access application's hostname, e.g. ssh.example.com")
        var scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        guard !scalars.isEmpty else { throw emptyError }

        if let schemeEnd = scalars.firstIndex(ofSequence: "://") {
            let scheme = String(scalars: scalars[..<schemeEnd]).asciiLowercased
            switch scheme {
            case "https", "http", "wss", "ws":
                break
            default:
                let shownScheme = Display.quoted(scheme, limit: 20)
                throw ConfigurationError(
                    "\(flag) has scheme \(shownScheme), which is not supported: use https:// or no scheme, e.g. ssh.example.com")
            }
            scalars = Array(scalars[(schemeEnd + 3)...])
        }

        // Split authority and path; refuse query and fragment outright.
        let authorityEnd = scalars.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? scalars.count
        let authority = Array(scalars[..<authorityEnd])
        let rest = Array(scalars[authorityEnd...])
        if rest.contains("?") || rest.contains("#") {
            throw ConfigurationError(
                "\(flag) must not have a query (?…) or fragment (#…): give the host and, if needed, a path, e.g. ssh.example.com/path")
        }
        if authority.contains("@") {
            // Not shown: what comes before "@" may be a password.
            throw ConfigurationError(
                "\(flag) must not contain a user name or password (user@host): give only the host, e.g. ssh.example.com")
        }
        guard !authority.isEmpty else { throw emptyError }
        let shown = Display.quoted(String(scalars: authority))

        let host: ParsedHost
        var port: Int?
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else {
                throw ConfigurationError("\(flag) \(shown) has \"[\" without \"]\": write an IPv6 address as [2001:db8::1]")
            }
            guard let address = IPv6Address(scalars: Array(authority[1..<close])) else {
                throw ConfigurationError("\(flag) \(shown) has an invalid IPv6 address in brackets")
            }
            host = .ipv6(address)
            let after = Array(authority[(close + 1)...])
            if !after.isEmpty {
                guard after.first == ":" else {
                    throw ConfigurationError("\(flag) \(shown) has text after \"]\": only \":port\" may follow an IPv6 address")
                }
                port = try Port.parse(Array(after.dropFirst()), range: 1...65535, flag: flag, shown: shown)
            }
        } else {
            switch authority.count(of: ":") {
            case 0:
                host = try HostName.parse(authority, flag: flag)
            case 1:
                let colon = authority.firstIndex(of: ":")!
                let hostPart = Array(authority[..<colon])
                guard !hostPart.isEmpty else { throw emptyError }
                host = try HostName.parse(hostPart, flag: flag)
                port = try Port.parse(Array(authority[(colon + 1)...]), range: 1...65535, flag: flag, shown: shown)
            default:
                guard let address = IPv6Address(scalars: authority) else {
                    throw ConfigurationError(
                        "\(flag) \(shown) is neither a host name nor an IPv6 address: with a port, write IPv6 as [2001:db8::1]:443")
                }
                host = .ipv6(address)
            }
        }

        let path = try checkedPath(rest)
        return OriginURL(host: host.text, port: port, path: path)
    }

    /// The path as written, or "/"; RFC 3986 `pchar`s, "/" and `%XX` only.
    private static func checkedPath(_ scalars: [Unicode.Scalar]) throws(ConfigurationError) -> String {
        guard !scalars.isEmpty else { return "/" }
        let flag = ConfigurationError.Setting.hostname.placeholder
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "%" {
                guard index + 2 < scalars.count,
                      scalars[index + 1].isASCIIHexDigit, scalars[index + 2].isASCIIHexDigit else {
                    throw ConfigurationError(
                        "\(flag) path has a \"%\" that is not followed by two hex digits: write a literal % as %25")
                }
                index += 3
                continue
            }
            guard isPathCharacter(scalar) else {
                let what = scalar == " " ? "a space" : Display.quoted(String(scalar))
                throw ConfigurationError(
                    "\(flag) path contains \(what), which must be percent-encoded (e.g. a space as %20)")
            }
            index += 1
        }
        return String(scalars: scalars)
    }

    /// RFC 3986 unreserved, sub-delims, ":", "@" and "/".
    private static func isPathCharacter(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.isASCIILetter || scalar.isASCIIDigit { return true }
        switch scalar {
        case "-", ".", "_", "~", "!", "$", "&", "'", "(", ")", "*", "+", ",", ";", "=", ":", "@", "/":
            return true
        default:
            return false
        }
    }
}
