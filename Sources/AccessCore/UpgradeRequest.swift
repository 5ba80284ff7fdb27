/// Header names of the Access carrier protocol (PROTOCOL.md §1).
package enum AccessHeaderName {
    /// `User-Agent`.
    package static let userAgent = "User-Agent"
    /// `Cf-Access-Token`: the application token (JWT) of the browser login path.
    package static let accessToken = "Cf-Access-Token"
    /// `Cf-Access-Client-Id`: the service token's Client ID.
    package static let clientID = "Cf-Access-Client-Id"
    /// `Cf-Access-Client-Secret`: the service token's Client Secret.
    package static let clientSecret = "Cf-Access-Client-Secret"
    /// `Cf-Access-Jump-Destination`: the `host:port` a bastion should connect to.
    package static let jumpDestination = "Cf-Access-Jump-Destination"

    /// Names the WebSocket library owns; a user header with one of them is refused.
    /// Also refused: any name starting with `Sec-WebSocket-`.
    package static let reserved: [String] = ["Host", "Connection", "Upgrade", "Content-Length", "Transfer-Encoding"]

    /// Whether a user may not set a header called `name` (case-insensitive).
    package static func isReserved(_ name: String) -> Bool {
        let lowered = name.asciiLowercased
        return reserved.contains { $0.asciiLowercased == lowered } || lowered.hasPrefix("sec-websocket-")
    }
}

/// The WebSocket upgrade request for one tunnel connection, built purely by `RequestBuilder`.
///
/// `description`, `debugDescription` and reflection show secret header values as
/// `[redacted]`.
package struct UpgradeRequest: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The origin to dial; the carrier sends `Host: origin.hostHeader` and requests
    /// `origin.webSocketURL`.
    package let origin: OriginURL
    /// The headers to send, in order: each built-in name once, and every value of a `-H` name
    /// that repeats (one line each, as cloudflared sends them). Neither `Host` nor the WebSocket
    /// protocol headers (`Upgrade`, `Connection`, `Sec-WebSocket-*`): the carrier adds those.
    package let headers: [HeaderField]

    init(origin: OriginURL, headers: [HeaderField]) {
        self.origin = origin
        self.headers = headers
    }

    /// `Name: value` lines with secret values replaced by `[redacted]`: the only form that
    /// may be logged.
    package var redactedHeaderLines: [String] { headers.map(\.redactedLine) }

    /// The (first) value of the header called `name` (case-insensitive), if present.
    package func value(forHeader name: String) -> String? {
        let lowered = name.asciiLowercased
        return headers.first { $0.name.asciiLowercased == lowered }?.value
    }

    /// `GET wss://host/path` followed by the redacted header lines, on one line.
    package var description: String {
        "GET " + origin.webSocketURL + " [" + redactedHeaderLines.joined(separator: "; ") + "]"
    }

    /// Same as `description`.
    package var debugDescription: String { "UpgradeRequest(" + description + ")" }

    /// Reflection with secret header values redacted.
    package var customMirror: Mirror {
        Mirror(self, children: ["origin": origin, "headers": redactedHeaderLines], displayStyle: .struct)
    }
}

/// Builds the upgrade request from checked configuration. Pure: no I/O, no login.
package enum RequestBuilder {
    /// Builds the header list of the WebSocket upgrade.
    ///
    /// Order: `User-Agent`, `Cf-Access-Token` (if `accessToken`), `Cf-Access-Client-Id` and
    /// `Cf-Access-Client-Secret` (if `serviceToken`), `Cf-Access-Jump-Destination` (if
    /// `destination`), then `extraHeaders` in the order given. Built-in headers beat `-H`
    /// headers of the same name (case-insensitive), which are dropped; a `-H` name given more
    /// than once sends every value, each on its own line, in order (as cloudflared does).
    ///
    /// - Parameters:
    ///   - userAgent: usually `Version.userAgent`; must be non-empty.
    ///   - accessToken: the Access application token, if known; must be non-empty.
    ///   - destination: `--destination`, `host:port` or `[IPv6]:port` (an optional scheme
    ///     such as `tcp://` is dropped, as the bastion would); sent normalized
    ///     (lower-cased host, IDN in Punycode).
    ///   - extraHeaders: the `-H` headers. Names are checked again (they may come from
    ///     `HeaderField.init`); `Host`, `Connection`, `Upgrade`, `Content-Length`,
    ///     `Transfer-Encoding` and `Sec-WebSocket-*` are refused.
    /// - Throws: `ConfigurationError` for an invalid or reserved name, a value with a line
    ///   break or control character, an empty token, or a malformed destination. Messages
    ///   never show a header value.
    package static func upgradeRequest(
        origin: OriginURL,
        userAgent: String,
        serviceToken: ServiceToken?,
        accessToken: String?,
        destination: String?,
        extraHeaders: [HeaderField]
    ) throws(ConfigurationError) -> UpgradeRequest {
        var headers: [HeaderField] = []
        var seen: Set<String> = []
        func add(_ field: HeaderField) {
            let key = field.name.asciiLowercased
            guard !seen.contains(key) else { return }
            seen.insert(key)
            headers.append(field)
        }

        guard !userAgent.isEmpty else {
            throw ConfigurationError("The User-Agent is empty: give a product name like \(Version.userAgent)")
        }
        try HeaderField.checkValue(userAgent, label: "User-Agent")
        add(HeaderField(name: AccessHeaderName.userAgent, value: userAgent))

        if let accessToken {
            let token = accessToken.trimmingWhitespace
            guard !token.isEmpty else {
                throw ConfigurationError(
                    "The Access token is empty: log in again with `cf-access-tcp login \(origin.host)`")
            }
            try HeaderField.checkValue(token, label: "The Access token")
            add(HeaderField(name: AccessHeaderName.accessToken, value: token))
        }

        if let serviceToken {
            // ServiceToken's initializer checked both values; check again since they are
            // about to become header lines.
            try HeaderField.checkValue(serviceToken.clientID, label: ConfigurationError.Setting.serviceTokenID.placeholder)
            try HeaderField.checkValue(serviceToken.clientSecret, label: ConfigurationError.Setting.serviceTokenSecret.placeholder)
            add(HeaderField(name: AccessHeaderName.clientID, value: serviceToken.clientID))
            add(HeaderField(name: AccessHeaderName.clientSecret, value: serviceToken.clientSecret))
        }

        if let destination {
            add(HeaderField(name: AccessHeaderName.jumpDestination, value: try parseDestination(destination)))
        }

        let builtIn = seen
        for field in extraHeaders {
            try HeaderField.checkName(field.name, option: ConfigurationError.Setting.header.placeholder)
            if AccessHeaderName.isReserved(field.name) {
                throw ConfigurationError(
                    "\(ConfigurationError.Setting.header.placeholder) \(HeaderField.shownName(field.name)) is not allowed: the WebSocket library sets \(field.name) itself")
            }
            try HeaderField.checkValue(field.value, label: "\(ConfigurationError.Setting.header.placeholder) \(HeaderField.shownName(field.name))")
            // Built-in names are taken; a user name may repeat.
            if !builtIn.contains(field.name.asciiLowercased) { headers.append(field) }
        }
        return UpgradeRequest(origin: origin, headers: headers)
    }

    /// Checks `--destination` and returns it normalized as `host:port` (`[v6]:port`).
    static func parseDestination(_ raw: String) throws(ConfigurationError) -> String {
        let flag = ConfigurationError.Setting.destination.placeholder
        var scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        let shown = Display.quoted(String(scalars: scalars))
        let formError = ConfigurationError(
            "\(flag) \(shown) must look like host:port, e.g. ssh.internal.example.com:22 or [2001:db8::1]:22")
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(flag) is empty: give host:port, e.g. ssh.internal.example.com:22")
        }
        // The bastion drops a scheme and a path (`tcp://host:22/path`, as cloudflared accepts it);
        // so do we, and send host:port only.
        if let schemeEnd = scalars.firstIndex(ofSequence: "://") {
            let scheme = scalars[..<schemeEnd]
            guard let first = scheme.first, first.isASCIILetter,
                  scheme.allSatisfy({ $0.isASCIILetter || $0.isASCIIDigit || $0 == "+" || $0 == "-" || $0 == "." })
            else { throw formError }
            scalars = Array(scalars[(schemeEnd + 3)...])
        }
        if let slash = scalars.firstIndex(of: "/") { scalars = Array(scalars[..<slash]) }

        let host: ParsedHost
        let portScalars: [Unicode.Scalar]
        if scalars.first == "[" {
            guard let close = scalars.firstIndex(of: "]"),
                  let address = IPv6Address(scalars: Array(scalars[1..<close])),
                  close + 1 < scalars.count, scalars[close + 1] == ":"
            else { throw formError }
            host = .ipv6(address)
            portScalars = Array(scalars[(close + 2)...])
        } else {
            guard scalars.count(of: ":") == 1, let colon = scalars.firstIndex(of: ":"), colon > 0 else {
                throw formError
            }
            host = try HostName.parse(Array(scalars[..<colon]), flag: flag)
            portScalars = Array(scalars[(colon + 1)...])
        }
        let port = try Port.parse(portScalars, range: 1...65535, flag: flag, shown: shown)
        return host.bracketedText + ":" + String(port)
    }
}
