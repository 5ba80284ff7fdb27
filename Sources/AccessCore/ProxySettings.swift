/// The HTTP proxy a WebSocket dial goes through, from the environment, as Go's
/// `ProxyFromEnvironment` (which cloudflared uses) reads it: `HTTPS_PROXY` / `https_proxy`,
/// except for hosts matched by `NO_PROXY` / `no_proxy`.
public struct ProxySettings: Sendable, Equatable, CustomStringConvertible {
    /// The proxy's host (a name or a numeric address, IPv6 without brackets).
    public let host: String
    /// The proxy's port (default 80 for `http://`, 443 is not supported: the proxy is spoken to
    /// in clear and tunnels TLS with `CONNECT`).
    public let port: Int

    /// `host:port`, for logs (never the proxy's credentials).
    public var description: String {
        HostText.withPort(host, port)
    }

    /// The proxy for a dial to `host`:`port`, or nil for a direct dial.
    ///
    /// - `HTTPS_PROXY` wins over `https_proxy`; the value is `[http://]host[:port][/]`.
    /// - `NO_PROXY` is a comma list: `*` (no proxy at all), names (`example.com` also matches
    ///   its subdomains; a leading `.` is allowed), IP addresses, each optionally with `:port`.
    /// - Credentials in the proxy URL are refused with a clear message: we do not send them.
    public static func fromEnvironment(_ environment: [String: String], host: String, port: Int)
        throws(ConfigurationError) -> ProxySettings? {
        let raw = nonEmpty(environment["HTTPS_PROXY"]) ?? nonEmpty(environment["https_proxy"])
        guard let raw else { return nil }
        let exclusions = nonEmpty(environment["NO_PROXY"]) ?? nonEmpty(environment["no_proxy"]) ?? ""
        if isExcluded(host: host.lowercased(), port: port, by: exclusions) { return nil }
        return try parse(raw)
    }

    /// Parses a proxy URL like `http://proxy.example:3128`.
    public static func parse(_ raw: String) throws(ConfigurationError) -> ProxySettings {
        var rest = Substring(raw.trimmingSpaces)
        let shown = Display.quoted(Redaction.url(String(rest)))
        if let colon = rest.firstIndex(of: ":"), rest[colon...].hasPrefix("://") {
            let scheme = rest[..<colon].lowercased()
            guard scheme == "http" else {
                throw ConfigurationError("HTTPS_PROXY \(shown) uses \(scheme)://: only http:// proxies (CONNECT) are supported")
            }
            rest = rest[rest.index(colon, offsetBy: 3)...]
        }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        guard !rest.contains("@") else {
            throw ConfigurationError("HTTPS_PROXY \(shown) holds credentials: cf-access-tcp does not send proxy credentials; use a proxy that needs none")
        }
        var hostPart = rest
        var port = 80
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw ConfigurationError("HTTPS_PROXY \(shown) has an unclosed [ in its address")
            }
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { port = try parsePort(after.dropFirst(), shown: shown) } else if !after.isEmpty {
                throw ConfigurationError("HTTPS_PROXY \(shown) is not a valid proxy address")
            }
        } else if let colon = rest.lastIndex(of: ":") {
            hostPart = rest[..<colon]
            port = try parsePort(rest[rest.index(after: colon)...], shown: shown)
        }
        guard !hostPart.isEmpty, hostPart.allSatisfy({ $0.isLetter || $0.isNumber || "-._:".contains($0) }) else {
            throw ConfigurationError("HTTPS_PROXY \(shown) has no valid host: give http://host:port")
        }
        return ProxySettings(host: hostPart.lowercased(), port: port)
    }

    private static func parsePort(_ text: Substring, shown: String) throws(ConfigurationError) -> Int {
        guard let port = Int(text), (1...65535).contains(port) else {
            throw ConfigurationError("HTTPS_PROXY \(shown) has an invalid port: use 1-65535")
        }
        return port
    }

    private static func nonEmpty(_ value: String?) -> String? {
        guard let value, !value.trimmingSpaces.isEmpty else { return nil }
        return value
    }

    private static func isExcluded(host: String, port: Int, by list: String) -> Bool {
        for entry in list.split(separator: ",") {
            var pattern = Substring(String(entry).trimmingSpaces.lowercased())
            if pattern == "*" { return true }
            if pattern.hasPrefix("["), let close = pattern.firstIndex(of: "]") {
                let after = pattern[pattern.index(after: close)...]
                if after.hasPrefix(":"), Int(after.dropFirst()) != port { continue }
                pattern = pattern[pattern.index(after: pattern.startIndex)..<close]
            } else if pattern.filter({ $0 == ":" }).count == 1, let colon = pattern.lastIndex(of: ":") {
                if Int(pattern[pattern.index(after: colon)...]) != port { continue }
                pattern = pattern[..<colon]
            }
            if pattern.hasPrefix(".") { pattern = pattern.dropFirst() }
            if pattern.isEmpty { continue }
            if host == pattern || host.hasSuffix("." + pattern) { return true }
        }
        return false
    }
}

extension String {
    /// Without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        var scalars = Substring(self)
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        return String(scalars)
    }
}
