import ArgumentParser
import CFAccessTCP
import Foundation
import Logging

/// `cf-access-tcp`: reach a TCP service (SSH above all) protected by Cloudflare Access.
@main
struct RootCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cf-access-tcp",
        abstract: "Reach TCP services (SSH above all) protected by Cloudflare Access.",
        discussion: """
        A drop-in for `cloudflared access tcp|ssh`: every local connection gets its own WebSocket \
        to the Access-protected hostname.

        Examples:
          ssh_config:   ProxyCommand cf-access-tcp --hostname %h
          listener:     cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:2222
                        ssh -p 2222 user@127.0.0.1
          service token: TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \\
                        cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:0
          cloudflared spelling: cf-access-tcp access ssh --hostname ssh.example.com
        """,
        version: Version.string,
        subcommands: [TCPCommand.self, AccessCommand.self],
        defaultSubcommand: TCPCommand.self
    )
}

/// `cf-access-tcp access tcp|ssh|rdp|smb …`, the spelling of `cloudflared access …`.
struct AccessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "access",
        abstract: "cloudflared-compatible spelling: `access tcp|ssh|rdp|smb`.",
        subcommands: [TCPCommand.self]
    )
}

/// The tunnel itself.
struct TCPCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tcp",
        abstract: "Bridge stdin/stdout (ProxyCommand) or a local listener to the Access-protected host.",
        discussion: """
        Without --url, stdin/stdout is the connection (ssh ProxyCommand); with --url, a listener on \
        127.0.0.1 bridges every accepted connection. Environment: TUNNEL_SERVICE_HOSTNAME, \
        TUNNEL_SERVICE_URL, TUNNEL_SERVICE_TOKEN_ID, TUNNEL_SERVICE_TOKEN_SECRET, \
        TUNNEL_SERVICE_DESTINATION, CF_ACCESS_TOKEN.

        Examples:
          cf-access-tcp --hostname ssh.example.com                       (ProxyCommand)
          cf-access-tcp --hostname ssh.example.com --url 127.0.0.1:2222  (listener)
          cf-access-tcp --hostname ssh.example.com --id ID --secret SECRET --url localhost:0
        """,
        aliases: ["ssh", "rdp", "smb"]
    )

    @OptionGroup var flags: TunnelFlags

    func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let environment = ProcessInfo.processInfo.environment
        let logging: LoggingSetup
        do {
            logging = try LoggingSetup(level: flags.loglevel, file: flags.logfile, directory: flags.logDirectory)
        } catch {
            throw usageFailure(error.message)
        }
        let settings: TunnelSettings
        do {
            settings = try TunnelSettings(flags: flags, environment: environment)
        } catch {
            throw usageFailure(error.message)
        }
        let logger = logging.logger
        let runner = TunnelRunner(configuration: settings.carrier, logger: logger) { message in
            writeStderr("cf-access-tcp: \(message)")
        }
        switch settings.listen {
        case nil:
            let status = runner.runStdio()
            throw ExitCode(status)
        case let address?:
            let stop = DispatchSemaphore(value: 0)
            let signals = [SIGINT, SIGTERM].map { sig -> DispatchSourceSignal in
                signal(sig, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
                source.setEventHandler { stop.signal() }
                source.resume()
                return source
            }
            do {
                try runner.runListener(on: address, stop: stop) { bound in
                    writeStderr("cf-access-tcp: listening on \(bound) for \(settings.carrier.request.origin.host)")
                }
            } catch {
                writeStderr("cf-access-tcp: \(error.message)")
                throw ExitCode(1)
            }
            withExtendedLifetime(signals) {}
        }
    }
}

/// Reports a bad flag or environment value as one plain line and gives the usage exit status.
func usageFailure(_ message: String) -> ExitCode {
    writeStderr("cf-access-tcp: \(message)")
    return ExitCode.validationFailure
}

/// Writes one line to stderr, unbuffered.
func writeStderr(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}
