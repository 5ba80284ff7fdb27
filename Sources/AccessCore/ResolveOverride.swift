/// A `HOST:PORT:ADDR` override, like curl's `--resolve`: connections to HOST on PORT go to
/// ADDR while Host, SNI and certificate checks keep HOST.
public struct ResolveOverride: Sendable, Equatable, CustomStringConvertible {
    /// The host name, lower-cased (IDN in Punycode).
    public let host: String
    /// The port, 1...65535.
    public let port: Int
    /// The address: dotted-quad IPv4 or IPv6 without brackets.
    public let address: String

    /// `host:port:addr`, an IPv6 address in brackets: the form `CURLOPT_RESOLVE` takes.
    public var description: String {
        host + ":" + String(port) + ":" + HostText.bracketed(address)
    }

    /// Parses `HOST:PORT:ADDR`. HOST is a DNS name; PORT 1...65535; ADDR an IPv4 address or
    /// an IPv6 address, bracketed or not (`[::1]`, `::1`).
    public static func parse(_ raw: String) throws(ConfigurationError) -> ResolveOverride {
        let flag = ConfigurationError.Setting.resolveOverride.placeholder
        let scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        let shown = Display.quoted(String(scalars: scalars))
        let usage = "give HOST:PORT:ADDRESS, e.g. team.cloudflareaccess.com:443:127.0.0.1"
        guard let firstColon = scalars.firstIndex(of: ":") else {
            throw ConfigurationError("\(flag) \(shown) is not HOST:PORT:ADDRESS: \(usage)")
        }
        let rest = Array(scalars[(firstColon + 1)...])
        guard let secondColon = rest.firstIndex(of: ":") else {
            throw ConfigurationError("\(flag) \(shown) is not HOST:PORT:ADDRESS: \(usage)")
        }
        let hostPart = Array(scalars[..<firstColon])
        guard !hostPart.isEmpty else { throw ConfigurationError("\(flag) \(shown) has no host: \(usage)") }
        let host = try HostName.parse(hostPart, flag: flag)
        let port = try Port.parse(Array(rest[..<secondColon]), range: 1...65535, flag: flag, shown: shown)
        var addressPart = Array(rest[(secondColon + 1)...])
        if addressPart.first == "[" && addressPart.last == "]" { addressPart = Array(addressPart.dropFirst().dropLast()) }
        let address: String
        if let v4 = IPv4Address(scalars: addressPart) {
            address = v4.text
        } else if let v6 = IPv6Address(scalars: addressPart) {
            address = v6.text
        } else {
            throw ConfigurationError("\(flag) \(shown) has no valid IP address after the port: \(usage)")
        }
        return ResolveOverride(host: host.text, port: port, address: address)
    }
}
