/// Where to dial instead of the origin's host (cloudflared's `connect-to`, a testing aid as in
/// cloudflared): `host`, `host:port`, `[IPv6]:port` (or a bare IPv6 address), or
/// `sni:port:host`. The origin URL, `Host` header and, except in the 3-part form, the TLS
/// server name stay those of the hostname.
public struct ConnectTarget: Sendable, Equatable, CustomStringConvertible {
    /// The host or IP address to dial: a lower-cased DNS name (IDN in Punycode), dotted-quad
    /// IPv4, or IPv6 without brackets (RFC 5952 form).
    public let address: String
    /// The port to dial; `nil` means the origin's port.
    public let port: Int?
    /// The TLS server name (SNI) to present; only set by the 3-part form.
    public let serverName: String?
    /// Whether certificate verification is off: true only for the 3-part form, as in
    /// cloudflared (the SNI no longer matches what is dialled).
    public let skipVerification: Bool

    init(address: String, port: Int?, serverName: String?, skipVerification: Bool) {
        self.address = address
        self.port = port
        self.serverName = serverName
        self.skipVerification = skipVerification
    }

    /// `address[:port]`, or `sni:port:address` for the 3-part form.
    public var description: String {
        let host = HostText.bracketed(address)
        if let serverName, let port { return serverName + ":" + String(port) + ":" + host }
        guard let port else { return host }
        return host + ":" + String(port)
    }

    /// Parses a connect-to value: `host`, `host:port`, `[IPv6]:port` or `sni:port:host`.
    ///
    /// - `host` → dial `host` on the origin's port;
    /// - `host:port`, `[IPv6]:port` → dial there;
    /// - a bare IPv6 address (`::1`) → dial it on the origin's port;
    /// - `sni:port:host` → dial `host:port`, present `sni` as the TLS server name and skip
    ///   certificate verification. `host` may be a bracketed IPv6 address.
    /// Ports are 1...65535.
    public static func parse(_ raw: String) throws(ConfigurationError) -> ConnectTarget {
        let flag = ConfigurationError.Setting.connectTarget.placeholder
        let scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        let shown = Display.quoted(String(scalars: scalars))
        let formError = ConfigurationError(
            "\(flag) \(shown) must be host, host:port, [IPv6]:port or sni:port:host")
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(flag) is empty: give host, host:port or sni:port:host")
        }

        if scalars.first == "[" {
            guard let close = scalars.firstIndex(of: "]"),
                  let v6 = IPv6Address(scalars: Array(scalars[1..<close])) else { throw formError }
            let after = Array(scalars[(close + 1)...])
            if after.isEmpty {
                return ConnectTarget(address: v6.text, port: nil, serverName: nil, skipVerification: false)
            }
            guard after.first == ":" else { throw formError }
            let port = try Port.parse(Array(after.dropFirst()), range: 1...65535, flag: flag, shown: shown)
            return ConnectTarget(address: v6.text, port: port, serverName: nil, skipVerification: false)
        }

        let parts = scalars.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(Array.init)
        switch parts.count {
        case 1:
            let host = try HostName.parse(parts[0], flag: flag)
            return ConnectTarget(address: host.text, port: nil, serverName: nil, skipVerification: false)
        case 2:
            guard !parts[0].isEmpty else { throw formError }
            let host = try HostName.parse(parts[0], flag: flag)
            let port = try Port.parse(parts[1], range: 1...65535, flag: flag, shown: shown)
            return ConnectTarget(address: host.text, port: port, serverName: nil, skipVerification: false)
        default:
            if let target = threePart(parts) { return target }
            if let v6 = IPv6Address(scalars: scalars) {
                return ConnectTarget(address: v6.text, port: nil, serverName: nil, skipVerification: false)
            }
            // Say what was wrong with the 3-part form, if it was meant.
            if scalars.count(of: ":") == 2 && !parts[0].isEmpty && !parts[1].isEmpty && !parts[2].isEmpty {
                _ = try HostName.parse(parts[0], flag: flag)
                _ = try Port.parse(parts[1], range: 1...65535, flag: flag, shown: shown)
                _ = try HostName.parse(parts[2], flag: flag)
            }
            throw formError
        }
    }

    /// `sni:port:host` (host may be `[IPv6]` or a bare IPv6 address), or `nil`.
    private static func threePart(_ parts: [[Unicode.Scalar]]) -> ConnectTarget? {
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, parts[1].allSatisfy(\.isASCIIDigit),
              case .name(let serverName)? = try? HostName.parse(parts[0], flag: ""),
              let port = try? Port.parse(parts[1], range: 1...65535, flag: "", shown: "")
        else { return nil }
        var hostPart = parts[2]
        let address: String
        if hostPart.first == "[" && hostPart.last == "]" {
            hostPart = Array(hostPart.dropFirst().dropLast())
            guard let v6 = IPv6Address(scalars: hostPart) else { return nil }
            address = v6.text
        } else if hostPart.contains(":") {
            guard let v6 = IPv6Address(scalars: hostPart) else { return nil }
            address = v6.text
        } else {
            guard !hostPart.isEmpty, let host = try? HostName.parse(hostPart, flag: "") else { return nil }
            address = host.text
        }
        return ConnectTarget(address: address, port: port, serverName: serverName, skipVerification: true)
    }
}
