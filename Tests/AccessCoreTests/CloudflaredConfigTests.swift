import AccessCore
import Testing

/// cloudflared's config.yml as an access client reads it (issue 26.3).
@Suite("CloudflaredConfig")
struct CloudflaredConfigTests {
    @Test("top-level settings in order, quoted and plain, comments and blank lines skipped; forwarders with every key")
    func reads() throws {
        let text = """
            # cloudflared access settings
            hostname: ssh.example.com   # the application
            url: "127.0.0.1:2222"
            service-token-id: 'id''s.access'
            destination: "a\\"b\\\\c\\/d\\te\\nf"
            empty:

            forwarders:
              - url: one.example.com
                listener: 127.0.0.1:2201
                serviceTokenID: id1
                serviceTokenSecret: "s#1"
                destination: inner:22
                isFedramp: true
              -
                url: two.example.com
                isFedramp: false
            """
        let config = try CloudflaredConfig.parse(text, name: "config.yml")
        #expect(config.settings.map(\.key) == ["hostname", "url", "service-token-id", "destination", "empty", "forwarders"])
        #expect(config.settings.map(\.value) == ["ssh.example.com", "127.0.0.1:2222", "id's.access", "a\"b\\c/d\te\nf", "", nil])
        #expect(config.settings[0].line == 2)
        #expect(config.forwarders.count == 2)
        let first = config.forwarders[0]
        #expect(first.hostname == "one.example.com" && first.listener == "127.0.0.1:2201")
        #expect(first.serviceTokenID == "id1" && first.serviceTokenSecret == "s#1" && first.destination == "inner:22")
        #expect(first.fedRAMP && first.line == 9)
        #expect(config.forwarders[1].hostname == "two.example.com" && !config.forwarders[1].fedRAMP)
        #expect(!config.isTunnelDaemonConfig)
    }

    @Test("a tunnel daemon's file: nested blocks kept unread, recognised by tunnel or ingress")
    func tunnelDaemon() throws {
        let text = """
            tunnel: 6ff42ae2-765d-4adf-8112-31c55c1551ef
            credentials-file: /root/.cloudflared/x.json
            ingress:
              - hostname: app.example.com
                service: http://localhost:8000
              - service: http_status:404
            """
        let config = try CloudflaredConfig.parse(text, name: "config.yml")
        #expect(config.isTunnelDaemonConfig)
        #expect(config.settings.last?.key == "ingress" && config.settings.last?.value == nil)
        #expect(config.forwarders.isEmpty)
    }

    @Test("refused with the line number and what to write", arguments: [
        ("  hostname: x", "line 1: an indented line outside a list"),
        ("just words", "line 1: cannot read \"just words\"; write key: value"),
        ("a key: b", "cannot read"),
        ("url: x\n  more: y", "line 2: an indented line after url"),
        ("forwarders:\n  url: x", "line 2: forwarders: is a list"),
        ("forwarders:\n  - url", "line 2: cannot read \"url\" in forwarders"),
        ("forwarders:\n  - port: 22", "port is not a forwarder setting"),
        ("forwarders:\n  - isFedramp: yes", "isFedramp must be true or false"),
        ("url: 'open", "a quote ' that is not closed"),
        ("url: \"open", "a quote \" that is not closed"),
        ("url: \"a\\qb\"", "the escape \\q is not read here"),
        ("url: {a: b}", "is YAML this reader does not take"),
        ("url: &anchor x", "is YAML this reader does not take"),
    ])
    func refused(_ text: String, _ message: String) {
        let error = #expect(throws: ConfigurationError.self) { try CloudflaredConfig.parse(text, name: "config.yml") }
        #expect(error?.message.hasPrefix("config.yml line") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "")")
    }

    @Test("a key: value whose value holds a colon; a tab after the colon; a comment needs white space before #")
    func colons() throws {
        let config = try CloudflaredConfig.parse("url: 127.0.0.1:2222\nhostname: a#b.example\nlogLevel: debug\ndestination:\tinner:22",
                                                 name: "c")
        #expect(config.settings.map(\.value) == ["127.0.0.1:2222", "a#b.example", "debug", "inner:22"])
    }
}
