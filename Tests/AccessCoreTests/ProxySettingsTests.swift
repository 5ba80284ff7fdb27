import AccessCore
import Testing

@Suite("HTTPS_PROXY / NO_PROXY")
struct ProxySettingsTests {
    typealias P = ProxySettings

    @Test("which proxy a dial uses", arguments: [
        ([:], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://proxy.corp:3128"], "ssh.example.com", 443, "proxy.corp:3128"),
        (["https_proxy": "proxy.corp:8080/"], "ssh.example.com", 443, "proxy.corp:8080"),
        (["HTTPS_PROXY": "proxy.corp", "https_proxy": "other:1"], "ssh.example.com", 443, "proxy.corp:80"),
        (["HTTPS_PROXY": "http://[::1]:3128"], "ssh.example.com", 443, "[::1]:3128"),
        (["HTTPS_PROXY": "http://[::1]"], "ssh.example.com", 443, "[::1]:80"),
        (["HTTPS_PROXY": "  "], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example.com"], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "EXAMPLE.com"], "example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "no_proxy": "other.com, ,example.com:443"], "ssh.example.com", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com:8443"], "ssh.example.com", 443, "p:1"),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "ample.com"], "ssh.example.com", 443, "p:1"),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1"], "127.0.0.1", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "[::1]:443"], "::1", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "[::1]:80"], "::1", 443, "p:1"),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "[::1]"], "::1", 443, nil),
        (["HTTPS_PROXY": "http://p:1", "NO_PROXY": "."], "ssh.example.com", 443, "p:1"),
    ] as [([String: String], String, Int, String?)])
    func selection(environment: [String: String], host: String, port: Int, expected: String?) throws {
        #expect(try P.fromEnvironment(environment, host: host, port: port)?.description == expected)
    }

    @Test("bad proxy values are refused with a message that never shows credentials", arguments: [
        ("socks5://p:1", "only http://"),
        ("https://p:1", "only http://"),
        ("http://user:hunter2@p:1", "credentials"),
        ("http://p:0", "invalid port"),
        ("http://p:http", "invalid port"),
        ("http://[::1", "unclosed"),
        ("http://[::1]x", "not a valid proxy address"),
        ("http://", "no valid host"),
        ("http://a b:1", "no valid host"),
    ])
    func refused(raw: String, expected: String) {
        do {
            _ = try P.fromEnvironment(["HTTPS_PROXY": raw], host: "h", port: 443)
            Issue.record("\(raw) was accepted")
        } catch {
            #expect(error.message.contains(expected), "\(error.message)")
            #expect(!error.message.contains("hunter2"))
        }
    }
}
