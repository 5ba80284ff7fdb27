import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1

/// `cf-access-edge`: a local stand-in for the Cloudflare Access edge, for tests and benchmarks.
@main
struct EdgeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cf-access-edge",
        abstract: "Local Cloudflare Access edge emulator: WebSocket-to-TCP tunnels behind Access-style checks.",
        subcommands: [Serve.self, Certs.self, Target.self]
    )
}

extension EdgeCommand {
    /// `serve`: the TLS WebSocket edge.
    struct Serve: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve WebSocket tunnels over TLS with Access-style credential checks."
        )

        @Option(help: "Address to listen on, HOST:PORT (port 0 picks a free one).")
        var listen = "127.0.0.1:0"

        @Option(help: "PEM certificate chain file.")
        var cert: String

        @Option(help: "PEM private key file.")
        var key: String

        @Option(help: "Fixed TCP target HOST:PORT. Without it, Cf-Access-Jump-Destination picks the target.")
        var target: String?

        @Option(name: .customLong("service-token"), help: "Accepted service token ID:SECRET (repeatable).")
        var serviceTokens: [String] = []

        @Option(name: .customLong("app-token"), help: "Accepted Cf-Access-Token value (repeatable).")
        var appTokens: [String] = []

        @Option(help: "Access team name used in login redirects.")
        var team = "emulator"

        @Option(name: .customLong("force-status"), help: "Answer every WebSocket upgrade with this HTTP status.")
        var forceStatus: Int?

        @Option(name: .customLong("idle-timeout"),
                help: "Close a tunnel after this many seconds without frames either way (0 = never).")
        var idleTimeout: Double = 0

        @Flag(help: "Log each upgrade and tunnel event to stderr.")
        var verbose = false

        func validate() throws {
            _ = try parsedConfiguration()
        }

        func run() throws {
            let configuration = try parsedConfiguration()
            try ServerLifecycle.run(
                address: configuration.listen,
                start: { group in
                    try EdgeServer(configuration: configuration, group: group).start()
                },
                announce: { "cf-access-edge listening on \($0)" }
            )
        }

        private func parsedConfiguration() throws -> EdgeServerConfiguration {
            guard let listenAddress = HostPort(parsing: listen, allowsZeroPort: true) else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            var fixedTarget: HostPort?
            if let target {
                guard let parsed = HostPort(parsing: target) else {
                    throw ValidationError("--target must be HOST:PORT with a port 1-65535, got '\(target)'")
                }
                fixedTarget = parsed
            }
            let tokens = try serviceTokens.map { text -> ServiceToken in
                guard let token = ServiceToken(parsing: text) else {
                    throw ValidationError("--service-token must be ID:SECRET, got '\(text)'")
                }
                return token
            }
            if appTokens.contains(where: \.isEmpty) {
                throw ValidationError("--app-token must not be empty")
            }
            guard !team.isEmpty, team.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                throw ValidationError("--team must be letters, digits and '-', got '\(team)'")
            }
            var forced: HTTPResponseStatus?
            if let forceStatus {
                guard (200...599).contains(forceStatus) else {
                    throw ValidationError("--force-status must be an HTTP status 200-599, got \(forceStatus)")
                }
                forced = HTTPResponseStatus(statusCode: forceStatus)
            }
            guard idleTimeout >= 0, idleTimeout.isFinite else {
                throw ValidationError("--idle-timeout must be a number of seconds >= 0")
            }
            let idle: TimeAmount? = idleTimeout > 0 ? .nanoseconds(Int64(idleTimeout * 1e9)) : nil
            let policy = AccessPolicy(fixedTarget: fixedTarget, serviceTokens: tokens,
                                      appTokens: Set(appTokens), team: team.lowercased(), forcedStatus: forced)
            return EdgeServerConfiguration(listen: listenAddress, certificatePath: cert, keyPath: key,
                                           policy: policy,
                                           tunnel: TunnelSettings(idleTimeout: idle, log: EdgeLog(verbose: verbose)))
        }
    }

    /// `certs`: a test CA and server certificate, made with openssl.
    struct Certs: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a test CA and a server certificate for the given hosts (uses openssl)."
        )

        @Option(help: "Directory to write ca.pem, ca-key.pem, server.pem and server-key.pem into.")
        var out: String

        @Option(name: .customLong("host"), help: "Host name or IP for the server certificate (repeatable).")
        var hosts: [String] = []

        func validate() throws {
            guard !out.isEmpty else { throw ValidationError("--out must not be empty") }
            guard !hosts.isEmpty else { throw ValidationError("at least one --host is required") }
            for host in hosts where !CertificateFactory.isValidHost(host) {
                throw ValidationError("--host '\(host)' is not a DNS name or IP address")
            }
        }

        func run() throws {
            let directory = URL(fileURLWithPath: out, isDirectory: true)
            try CertificateFactory(directory: directory, hosts: hosts).generate()
            Console.announce("certs written to \(out)")
        }
    }

    /// `target`: a plain TCP test server.
    struct Target: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a plain TCP test server: echo, sink, or source."
        )

        @Argument(help: "echo | sink | source")
        var kind: TargetKind

        @Option(help: "Address to listen on, HOST:PORT (port 0 picks a free one).")
        var listen = "127.0.0.1:0"

        @Option(help: "Bytes each source connection sends (default 1 GiB).")
        var bytes: Int = 1 << 30

        func validate() throws {
            guard HostPort(parsing: listen, allowsZeroPort: true) != nil else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            guard bytes >= 0 else { throw ValidationError("--bytes must be >= 0") }
        }

        func run() throws {
            guard let address = HostPort(parsing: listen, allowsZeroPort: true) else {
                throw ValidationError("--listen must be HOST:PORT, got '\(listen)'")
            }
            let server = TargetServer(kind: kind, listen: address, sourceBytes: bytes)
            let kind = self.kind
            try ServerLifecycle.run(
                address: address,
                start: { try server.start(group: $0) },
                announce: { "cf-access-edge target \(kind.rawValue) listening on \($0)" }
            )
        }
    }
}
