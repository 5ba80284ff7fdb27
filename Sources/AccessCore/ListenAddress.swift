/// The local address to listen on, in the forms
/// cloudflared accepts: `127.0.0.1:2222`, `localhost:2222`, `tcp://localhost:2222`,
/// `[::1]:2222`, and the schemes of Cloudflare's client guides (`rdp://localhost:3389`,
/// `smb://localhost:8445`, `ssh://localhost:2222`).
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    /// A numeric address: dotted-quad IPv4 (`localhost` becomes `127.0.0.1`) or IPv6 without
    /// brackets, in RFC 5952 form (`::1`).
    public let host: String
    /// The port, 0...65535; 0 asks the system for a free port.
    public let port: Int

    /// Whether `host` is a loopback address: 127.0.0.0/8, `::1`, or 127.0.0.0/8 mapped into
    /// IPv6 (`::ffff:127.0.0.1`). Decided by `parse`, which knows the address's family.
    public let isLoopback: Bool

    init(host: String, port: Int, isLoopback: Bool) {
        self.host = host
        self.port = port
        self.isLoopback = isLoopback
    }

    /// The schemes a listen address may carry: the listener carries TCP whatever the service.
    static let schemes: Set<String> = ["tcp", "rdp", "smb", "ssh"]

    /// `127.0.0.1` on a port the system picks when the listener binds.
    public static let loopbackAnyPort = ListenAddress(host: "127.0.0.1", port: 0, isLoopback: true)

    /// Whether `host` is an IPv6 address.
    public var isIPv6: Bool { host.unicodeScalars.contains(":") }

    /// `host:port`, IPv6 in brackets: `127.0.0.1:2222`, `[::1]:2222`.
    public var description: String {
        HostText.withPort(host, port)
    }

    /// Parses a listen address.
    ///
    /// An optional scheme of those the listener serves (`tcp`, `rdp`, `smb`, `ssh`: the bytes are
    /// TCP whatever it names, as in cloudflared) is dropped, and so is a `/` after the port; any
    /// other scheme is refused. The port is
    /// required (0...65535). The host must be numeric, or `localhost` (taken as
    /// `127.0.0.1`); IPv6 goes in brackets. IPv4 must be four numbers 0-255 without leading
    /// zeros. An empty host (`:2222`) means every IPv4 interface (`0.0.0.0`).
    /// A non-loopback address would expose the tunnel to the network, so it is refused
    /// unless `allowNonLoopback` is true.
    public static func parse(_ raw: String, allowNonLoopback: Bool) throws(ConfigurationError) -> ListenAddress {
        let flag = ConfigurationError.Setting.listenAddress.placeholder
        var scalars = raw.scalarArray.trimming { $0.properties.isWhitespace }
        let shown = Display.quoted(String(scalars: scalars))
        let example = "like 127.0.0.1:2222"
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(flag) is empty: give a local address \(example)")
        }
        if let schemeEnd = scalars.firstIndex(ofSequence: "://") {
            let scheme = String(scalars: scalars[..<schemeEnd]).asciiLowercased
            guard Self.schemes.contains(scheme) else {
                throw ConfigurationError(
                    "\(flag) \(shown) has scheme \(Display.quoted(scheme, limit: 20)): use tcp://, rdp://, smb://, ssh:// or no scheme, \(example)")
            }
            scalars = Array(scalars[(schemeEnd + 3)...])
            // `rdp://localhost:3389/`: a URL's empty path.
            if scalars.last == "/" { scalars.removeLast() }
        }

        let hostScalars: [Unicode.Scalar]
        let portScalars: [Unicode.Scalar]
        var bracketed = false
        if scalars.first == "[" {
            guard let close = scalars.firstIndex(of: "]") else {
                throw ConfigurationError("\(flag) \(shown) has \"[\" without \"]\": write IPv6 like [::1]:2222")
            }
            guard close + 1 < scalars.count, scalars[close + 1] == ":" else {
                throw ConfigurationError("\(flag) \(shown) needs a port: write it like [::1]:2222")
            }
            bracketed = true
            hostScalars = Array(scalars[1..<close])
            portScalars = Array(scalars[(close + 2)...])
        } else {
            let colons = scalars.count(of: ":")
            if colons == 0 {
                throw ConfigurationError("\(flag) \(shown) needs a port: write it \(example)")
            }
            if colons > 1 {
                throw ConfigurationError("\(flag) \(shown): put an IPv6 address in brackets, like [::1]:2222")
            }
            let colon = scalars.firstIndex(of: ":")!
            hostScalars = Array(scalars[..<colon])
            portScalars = Array(scalars[(colon + 1)...])
        }

        let port = try Port.parse(portScalars, range: 0...65535, flag: flag, shown: shown)
        let host: String
        let loopback: Bool
        if bracketed {
            guard let v6 = IPv6Address(scalars: hostScalars) else {
                throw ConfigurationError("\(flag) \(shown) has an invalid IPv6 address in brackets")
            }
            host = v6.text
            loopback = v6.isLoopback || (v6.mappedIPv4?.isLoopback ?? false)
        } else if hostScalars.isEmpty {
            host = "0.0.0.0"
            loopback = false
        } else if String(scalars: hostScalars).asciiLowercased == "localhost" {
            host = "127.0.0.1"
            loopback = true
        } else if let v4 = IPv4Address(scalars: hostScalars) {
            host = v4.text
            loopback = v4.isLoopback
        } else if hostScalars.allSatisfy({ $0.isASCIIDigit || $0 == "." }) {
            throw ConfigurationError(
                "\(flag) \(shown) is not a valid IPv4 address: use four numbers 0-255 without leading zeros, \(example)")
        } else {
            throw ConfigurationError("\(flag) must be a numeric loopback address \(example) (got \(shown))")
        }

        let address = ListenAddress(host: host, port: port, isLoopback: loopback)
        if !loopback && !allowNonLoopback {
            throw ConfigurationError(
                "\(flag) \(address) is not a loopback address and would expose the tunnel to the network: "
                    + "use 127.0.0.1, or \(ConfigurationError.Setting.allowNonLoopback.placeholder) if you mean it")
        }
        return address
    }
}
