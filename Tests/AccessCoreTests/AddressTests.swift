import AccessCore
import Testing

/// A `the listen address` that must parse.
struct ListenCase: Sendable, CustomTestStringConvertible {
    let raw: String
    let allowNonLoopback: Bool
    let host: String
    let port: Int
    let isLoopback: Bool
    let isIPv6: Bool
    var testDescription: String { "\"\(raw)\"" + (allowNonLoopback ? " allowed" : "") }
}

@Suite("ListenAddress.parse")
struct ListenAddressTests {
    static let acceptedCases: [ListenCase] = [
        ListenCase(raw: "127.0.0.1:2222", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: "localhost:2222", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: "LocalHost:2222", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: "tcp://localhost:2222", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: "TCP://127.0.0.1:2222", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: " 127.0.0.1:2222\n", allowNonLoopback: false, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
        ListenCase(raw: "[::1]:2222", allowNonLoopback: false, host: "::1", port: 2222, isLoopback: true, isIPv6: true),
        ListenCase(raw: "tcp://[::1]:2222", allowNonLoopback: false, host: "::1", port: 2222, isLoopback: true, isIPv6: true),
        // The schemes of Cloudflare's RDP, SMB and SSH client guides (issue 26.3).
        ListenCase(raw: "rdp://localhost:3389", allowNonLoopback: false, host: "127.0.0.1", port: 3389, isLoopback: true, isIPv6: false),
        ListenCase(raw: "rdp://localhost:3389/", allowNonLoopback: false, host: "127.0.0.1", port: 3389, isLoopback: true, isIPv6: false),
        ListenCase(raw: "SMB://127.0.0.1:8445", allowNonLoopback: false, host: "127.0.0.1", port: 8445, isLoopback: true, isIPv6: false),
        ListenCase(raw: "ssh://[::1]:2222", allowNonLoopback: false, host: "::1", port: 2222, isLoopback: true, isIPv6: true),
        ListenCase(raw: "[0:0:0:0:0:0:0:1]:2222", allowNonLoopback: false, host: "::1", port: 2222, isLoopback: true, isIPv6: true),
        ListenCase(raw: "[::ffff:127.0.0.1]:22", allowNonLoopback: false, host: "::ffff:7f00:1", port: 22, isLoopback: true, isIPv6: true),
        ListenCase(raw: "127.0.0.5:0", allowNonLoopback: false, host: "127.0.0.5", port: 0, isLoopback: true, isIPv6: false),
        ListenCase(raw: "127.255.255.254:65535", allowNonLoopback: false, host: "127.255.255.254", port: 65535, isLoopback: true, isIPv6: false),
        ListenCase(raw: "127.0.0.1:00022", allowNonLoopback: false, host: "127.0.0.1", port: 22, isLoopback: true, isIPv6: false),
        // Non-loopback, explicitly allowed.
        ListenCase(raw: "0.0.0.0:2222", allowNonLoopback: true, host: "0.0.0.0", port: 2222, isLoopback: false, isIPv6: false),
        ListenCase(raw: "192.168.1.2:22", allowNonLoopback: true, host: "192.168.1.2", port: 22, isLoopback: false, isIPv6: false),
        ListenCase(raw: "[::]:22", allowNonLoopback: true, host: "::", port: 22, isLoopback: false, isIPv6: true),
        ListenCase(raw: ":2222", allowNonLoopback: true, host: "0.0.0.0", port: 2222, isLoopback: false, isIPv6: false),
        ListenCase(raw: "127.0.0.1:2222", allowNonLoopback: true, host: "127.0.0.1", port: 2222, isLoopback: true, isIPv6: false),
    ]

    @Test("accepted", arguments: acceptedCases)
    func accepted(_ c: ListenCase) throws {
        let address = try ListenAddress.parse(c.raw, allowNonLoopback: c.allowNonLoopback)
        #expect(address.host == c.host)
        #expect(address.port == c.port)
        #expect(address.isLoopback == c.isLoopback)
        #expect(address.isIPv6 == c.isIPv6)
    }

    @Test func description() throws {
        #expect(try ListenAddress.parse("localhost:2222", allowNonLoopback: false).description == "127.0.0.1:2222")
        #expect(try ListenAddress.parse("[::1]:0", allowNonLoopback: false).description == "[::1]:0")
    }

    @Test("refused", arguments: [
        ("example.com:22", "the listen address must be a numeric loopback address like 127.0.0.1:2222"),
        ("localhost.example:22", "the listen address must be a numeric loopback address like 127.0.0.1:2222"),
        ("", "the listen address is empty"),
        ("127.0.0.1", "needs a port"),
        ("localhost", "needs a port"),
        ("[::1]", "needs a port"),
        ("127.0.0.1:", "empty port"),
        ("127.0.0.1:65536", "out of range"),
        ("127.0.0.1:x", "not a number"),
        ("127.0.0.1:-1", "not a number"),
        ("256.0.0.1:22", "not a valid IPv4 address"),
        ("1.2.3:22", "not a valid IPv4 address"),
        ("1.2.3.4.5:22", "not a valid IPv4 address"),
        ("01.2.3.4:22", "not a valid IPv4 address"),
        ("127.0.0.1.:22", "not a valid IPv4 address"),
        ("::1:2222", "in brackets"),
        ("[::1:2222", "without \"]\""),
        ("[zz::1]:22", "invalid IPv6 address"),
        ("http://127.0.0.1:22", "use tcp://, rdp://, smb://, ssh:// or no scheme"),
        ("rdp://localhost:3389/x", "which is not a number"),
        ("ftp://localhost:21", "has scheme \"ftp\""),
    ])
    func refused(_ raw: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) { try ListenAddress.parse(raw, allowNonLoopback: true) }
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
    }

    @Test("non-loopback needs allow a non-loopback address explicitly", arguments: [
        "0.0.0.0:2222", "192.168.1.2:22", "[::]:22", ":2222", "[2001:db8::1]:22", "10.0.0.1:0",
    ])
    func nonLoopback(_ raw: String) {
        let error = #expect(throws: ConfigurationError.self) { try ListenAddress.parse(raw, allowNonLoopback: false) }
        #expect(error?.message.contains("allow a non-loopback address explicitly") == true)
        #expect(error?.message.contains("expose the tunnel to the network") == true)
        #expect((try? ListenAddress.parse(raw, allowNonLoopback: true)) != nil)
    }
}

/// A `the connect-to address` that must parse.
struct ConnectCase: Sendable, CustomTestStringConvertible {
    let raw: String
    let address: String
    let port: Int?
    let serverName: String?
    var testDescription: String { "\"\(raw)\"" }
}

@Suite("ConnectTarget.parse")
struct ConnectTargetTests {
    static let acceptedCases: [ConnectCase] = [
        ConnectCase(raw: "edge.example.net", address: "edge.example.net", port: nil, serverName: nil),
        ConnectCase(raw: " EDGE.Example.net:8443 ", address: "edge.example.net", port: 8443, serverName: nil),
        ConnectCase(raw: "192.0.2.10", address: "192.0.2.10", port: nil, serverName: nil),
        ConnectCase(raw: "192.0.2.10:443", address: "192.0.2.10", port: 443, serverName: nil),
        ConnectCase(raw: "[2001:db8::1]:443", address: "2001:db8::1", port: 443, serverName: nil),
        ConnectCase(raw: "[::1]", address: "::1", port: nil, serverName: nil),
        ConnectCase(raw: "::1", address: "::1", port: nil, serverName: nil),
        ConnectCase(raw: "2001:db8::1", address: "2001:db8::1", port: nil, serverName: nil),
        ConnectCase(raw: "ssh.example.com:443:192.0.2.10", address: "192.0.2.10", port: 443, serverName: "ssh.example.com"),
        ConnectCase(raw: "SSH.example.com:8443:edge.local", address: "edge.local", port: 8443, serverName: "ssh.example.com"),
        ConnectCase(raw: "ssh.example.com:443:[2001:db8::1]", address: "2001:db8::1", port: 443, serverName: "ssh.example.com"),
        ConnectCase(raw: "ssh.example.com:443:::1", address: "::1", port: 443, serverName: "ssh.example.com"),
    ]

    @Test("accepted", arguments: acceptedCases)
    func accepted(_ c: ConnectCase) throws {
        let target = try ConnectTarget.parse(c.raw)
        #expect(target.address == c.address)
        #expect(target.port == c.port)
        #expect(target.serverName == c.serverName)
        #expect(target.skipVerification == (c.serverName != nil))
    }

    @Test func descriptions() throws {
        #expect(try ConnectTarget.parse("edge.example.net").description == "edge.example.net")
        #expect(try ConnectTarget.parse("[::1]:8443").description == "[::1]:8443")
        #expect(try ConnectTarget.parse("sni.example:443:10.0.0.1").description == "sni.example:443:10.0.0.1")
    }

    @Test("refused", arguments: [
        "", "   ", "host:0", "host:99999", "host:abc", "host:", ":443", "a b", "sni:abc:host", "sni::host",
        ":443:host", "sni:443:", "sni:0:host", "[::1]:x", "[::1", "[::1]x", "a:b:c:d", "1.2.3.4:443:host",
        "host:22\r\nX: y",
    ])
    func refused(_ raw: String) {
        let error = #expect(throws: ConfigurationError.self) { try ConnectTarget.parse(raw) }
        #expect(error?.message.hasPrefix("the connect-to address") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("\n") == false)
    }
}

/// Issue 13.4: one lookup of where a dial goes, for the carrier and the HTTPS client.
@Suite("address overrides")
struct AddressOverrideTests {
    static let origin = try! OriginURL.parse("ssh.example.com")

    @Test("the connect-to address wins over the resolve override; both match host (any case) and port only")
    func route() throws {
        let connect = ConnectOverride(origin: Self.origin, target: try ConnectTarget.parse("127.0.0.1:8443"))
        let pin = try ResolveOverride.parse("ssh.example.com:443:10.0.0.7")
        #expect(AddressOverride.route(host: "SSH.example.com", port: 443, connectTo: [connect], resolve: [pin])! == ("127.0.0.1", 8443))
        #expect(AddressOverride.route(host: "ssh.example.com", port: 443, resolve: [pin])! == ("10.0.0.7", 443))
        #expect(AddressOverride.route(host: "ssh.example.com", port: 8443, connectTo: [connect], resolve: [pin]) == nil)
        #expect(AddressOverride.route(host: "other.example.com", port: 443, connectTo: [connect], resolve: [pin]) == nil)
        // A the connect-to address without a port keeps the origin's.
        let hostOnly = ConnectOverride(origin: Self.origin, target: try ConnectTarget.parse("::1"))
        #expect(AddressOverride.route(host: "ssh.example.com", port: 443, connectTo: [hostOnly], resolve: [])! == ("::1", 443))
    }
}
