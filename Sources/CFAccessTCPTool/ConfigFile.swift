import AccessCore
import AccessTransport
import ArgumentParser
import CFAccessTCP
import FoundationEssentials
import Glibc
import Logging

/// cloudflared's `config.yml` for the tunnel command (issue 26.3): `--config FILE`, else the first
/// of cloudflared's own places that exists (`~/.cloudflared/config.yml`, …). Its top-level keys
/// fill the flags the command line did not give; its `forwarders:` list, when no hostname is given,
/// runs one listener per entry in this one process.
enum ConfigFile {
    /// The top-level keys read, and the flag each gives.
    static let flags: [String: String] = [
        "hostname": "--hostname", "url": "--url", "service-token-id": "--service-token-id",
        "service-token-secret": "--service-token-secret", "destination": "--destination",
        "loglevel": "--loglevel", "logLevel": "--loglevel", "logfile": "--logfile",
        "log-directory": "--log-directory", "logDirectory": "--log-directory",
    ]
    /// Keys of cloudflared's tunnel daemon, which share its file: not for an access client, skipped.
    static let daemonKeys: Set<String> = [
        "tunnel", "credentials-file", "ingress", "warp-routing", "originRequest", "origincert", "metrics",
        "protocol", "no-autoupdate", "autoupdate-freq", "edge-ip-version", "region", "grace-period", "tunnels",
    ]
    /// The flags (every spelling) a key fills, for "already on the command line".
    static let spellings: [String: [String]] = [
        "--hostname": ["--hostname", "-T", "--tunnel-host"], "--url": ["--url", "-L", "--listener"],
        "--service-token-id": ["--service-token-id", "--id"], "--service-token-secret": ["--service-token-secret", "--secret"],
        "--loglevel": ["--loglevel", "--log-level"],
    ]

    /// What the command line becomes.
    enum Outcome {
        /// Run these arguments as usual.
        case arguments([String])
        /// Run one listener per argument list (`forwarders:`).
        case forwarders([[String]])
    }

    /// Applies the configuration file to `arguments` (already in our spelling) when they run the
    /// tunnel command; other commands are left alone.
    static func apply(to arguments: [String], environment: [String: String]) throws(ConfigurationError) -> Outcome {
        let tunnelCommand = arguments.isEmpty || arguments[0].hasPrefix("-") || arguments[0] == "tcp"
            || (["access", "forward"].contains(arguments[0]) && arguments.count > 1
                && ["tcp", "ssh", "rdp", "smb"].contains(arguments[1]))
        guard tunnelCommand else { return .arguments(arguments) }
        var rest = arguments
        var explicit: String?
        if let index = rest.firstIndex(where: { $0 == "--config" || $0.hasPrefix("--config=") }) {
            if rest[index] == "--config" {
                guard index + 1 < rest.count else { throw ConfigurationError("--config needs a file: --config ~/.cloudflared/config.yml") }
                explicit = rest[index + 1]
                rest.removeSubrange(index...(index + 1))
            } else {
                explicit = String(rest[index].dropFirst("--config=".count))
                rest.remove(at: index)
            }
        }
        guard let path = explicit ?? defaultPath(environment: environment) else { return .arguments(rest) }
        guard let bytes = FileDescriptors.readSmallFile(path, limit: 1 << 20) else {
            throw ConfigurationError("cannot read the configuration file \(path): \(SystemError.current().text)")
        }
        let config = try CloudflaredConfig.parse(String(decoding: bytes, as: UTF8.self), name: path)
        // A tunnel daemon's file found in cloudflared's directories is not ours to read.
        if explicit == nil, config.isTunnelDaemonConfig { return .arguments(rest) }
        var given: [(flag: String, value: String)] = []
        for setting in config.settings where setting.key != "forwarders" && !daemonKeys.contains(setting.key) {
            guard let flag = flags[setting.key] else {
                throw ConfigurationError("\(path) line \(setting.line): \(setting.key) is not a setting cf-access-tcp reads: "
                                         + "it reads hostname, url, service-token-id, service-token-secret, destination, "
                                         + "loglevel, logfile, log-directory and forwarders")
            }
            guard let value = setting.value, !value.isEmpty else {
                throw ConfigurationError("\(path) line \(setting.line): \(setting.key) needs one value, as \(flag) takes")
            }
            given.append((flag, value))
        }
        func present(_ flag: String, in list: [String]) -> Bool {
            let names = spellings[flag] ?? [flag]
            return list.contains { word in names.contains { word == $0 || word.hasPrefix($0 + "=") } }
        }
        let hostnameGiven = present("--hostname", in: rest) || given.contains { $0.flag == "--hostname" }
            || !(environment["TUNNEL_SERVICE_HOSTNAME"] ?? "").isEmpty
        if !config.forwarders.isEmpty, !hostnameGiven {
            // Each entry is a listener of its own; the other settings apply to every one.
            let common = rest + given.filter { !["--url", "--service-token-id", "--service-token-secret", "--destination"].contains($0.flag) }
                .flatMap { [$0.flag, $0.value] }
            return .forwarders(try config.forwarders.map { entry throws(ConfigurationError) in
                guard let hostname = entry.hostname, let listener = entry.listener else {
                    throw ConfigurationError("\(path) line \(entry.line): a forwarder needs url (the Access hostname) and listener (the local address)")
                }
                var list = ["--hostname", hostname, "--url", listener]
                if let id = entry.serviceTokenID { list += ["--service-token-id", id] }
                if let secret = entry.serviceTokenSecret { list += ["--service-token-secret", secret] }
                if let destination = entry.destination { list += ["--destination", destination] }
                if entry.fedRAMP { list.append("--fedramp") }
                return list + common
            })
        }
        return .arguments(rest + given.filter { !present($0.flag, in: rest) }.flatMap { [$0.flag, $0.value] })
    }

    /// cloudflared's search: `config.yml` or `config.yaml` in `~/.cloudflared`, `~/.cloudflare-warp`,
    /// `~/cloudflare-warp`, `/etc/cloudflared`, `/usr/local/etc/cloudflared`; the first that exists.
    static func defaultPath(environment: [String: String]) -> String? {
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 }
        let directories = (home.map { ["\($0)/.cloudflared", "\($0)/.cloudflare-warp", "\($0)/cloudflare-warp"] } ?? [])
            + ["/etc/cloudflared", "/usr/local/etc/cloudflared"]
        for directory in directories {
            for name in ["config.yml", "config.yaml"] where access("\(directory)/\(name)", F_OK) == 0 {
                return "\(directory)/\(name)"
            }
        }
        return nil
    }
}

extension TCPCommand {
    /// `forwarders:`: one listener per entry, in this process, until SIGINT or SIGTERM (exit 0).
    /// Every entry is checked before any listens; one that cannot start stops them all, with its
    /// line and exit status.
    static func runForwarders(_ lists: [[String]]) async throws {
        signal(SIGPIPE, SIG_IGN)
        let environment = ProcessInfo.processInfo.environment
        var commands: [TCPCommand] = []
        for list in lists { commands.append(try TCPCommand.parse(list)) }
        var settings: [TunnelSettings] = []
        let logging: LoggingSetup
        do {
            for command in commands {
                settings.append(try TunnelSettings(flags: command.flags, environment: environment,
                                                   logger: Logger(label: "cf-access-tcp", factory: { _ in SwiftLogNoOpLogHandler() })))
            }
            let flags = commands[0].flags
            try LoggingSetup.checkLevel(flags.loglevel)
            logging = try LoggingSetup(level: flags.loglevel, file: flags.logfile, directory: flags.logDirectory)
        } catch {
            throw usageFailure(error.withFlags)
        }
        let report = FailureReport(logger: logging.logger, toLogFile: commands[0].flags.writesLogFile)
        let stop = OneShot<Void>()
        let signals = handleInterrupts { _ in stop.signal() }
        defer { withExtendedLifetime(signals) {} }
        var tunnels: [AccessTunnel] = []
        for setting in settings {
            let transport = LiveTunnelTransport(logger: logging.logger) { message in report.line(message) }
            let tunnel = AccessTunnel(options: setting.options, logger: logging.logger, transport: transport)
            tunnels.append(tunnel)
            do {
                let port = try await tunnel.connect(hostname: setting.hostname, method: setting.method)
                let shown = setting.listen.map { HostText.withPort($0.host, Int(port)) } ?? "port \(port)"
                writeStderr("cf-access-tcp: listening on \(shown) for \(setting.origin.host)")
            } catch {
                report.failure(error)
                for running in tunnels { await running.disconnect() }
                throw ExitStatus(error).code
            }
        }
        ServiceNotification.send("READY=1\nSTATUS=listening for \(tunnels.count) applications", environment: environment)
        await stop.wait()
        ServiceNotification.send("STOPPING=1", environment: environment)
        for tunnel in tunnels { await tunnel.disconnect() }
    }
}
