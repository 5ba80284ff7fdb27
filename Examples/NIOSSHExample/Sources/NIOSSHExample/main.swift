// A swift-nio-ssh client that runs one command through a Cloudflare Access tunnel with no TCP
// port: `openStream` gives a connected socket, and NIO adopts it with
// `ClientBootstrap.withConnectedSocket`. The host key must be in a known_hosts file.
//
//   TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… SSH_PASSWORD=… \
//   nio-ssh-example HOSTNAME USER KNOWN_HOSTS [--connect-to HOST:PORT] [--ca-file CA] -- COMMAND
//
// The command's output is printed and its exit status becomes the example's; any other failure
// is one line on stderr and status 1 (2 for a usage error).
import CFAccessTCP
import Foundation
import NIOCore
import NIOPosix
import NIOSSH

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("nio-ssh-example: \(message)\n".utf8))
    exit(status)
}

// MARK: - Arguments

var arguments = Array(CommandLine.arguments.dropFirst())
guard let separator = arguments.firstIndex(of: "--"), separator >= 3, separator < arguments.count - 1 else {
    fail("usage: nio-ssh-example HOSTNAME USER KNOWN_HOSTS [--connect-to H:P] [--ca-file CA] -- COMMAND", status: 2)
}
let (hostname, user, knownHostsPath) = (arguments[0], arguments[1], arguments[2])
let command = arguments[(separator + 1)...].joined(separator: " ")
var flags = Array(arguments[3..<separator])
var options = AccessTunnel.Options()
while flags.count >= 2 {
    let (flag, value) = (flags.removeFirst(), flags.removeFirst())
    switch flag {
    case "--connect-to": options.connectTo = try ConnectTarget.parse(value)
    case "--ca-file": options.caFile = value
    default: fail("unknown flag \(flag)", status: 2)
    }
}
let environment = ProcessInfo.processInfo.environment
let password = environment["SSH_PASSWORD"] ?? ""
let token: ServiceToken
do {
    token = try ServiceToken(clientID: environment["TUNNEL_SERVICE_TOKEN_ID"] ?? "",
                             clientSecret: environment["TUNNEL_SERVICE_TOKEN_SECRET"] ?? "")
} catch {
    fail("set TUNNEL_SERVICE_TOKEN_ID and TUNNEL_SERVICE_TOKEN_SECRET", status: 2)
}

// The keys we trust for this host, read before anything is dialled.
let trusted: KnownHostKeys
do {
    trusted = try KnownHostKeys(file: knownHostsPath, host: hostname)
} catch {
    fail("\(error)")
}

// MARK: - Tunnel, then SSH over it

let authentication = PasswordAuthentication(user: user, password: password)
let tunnel = AccessTunnel(options: options)
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let status: Int32
do {
    // 1. The tunnel as a connected socket: no listening port anywhere.
    let stream = try await tunnel.openStream(hostname: hostname, method: .serviceToken(token))
    // 2. NIO adopts the socket and closes it with the channel: the stream gives up ownership.
    let descriptor = stream.releaseFileDescriptor().rawValue
    let channel = try await ClientBootstrap(group: group)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                let client = SSHClientConfiguration(
                    userAuthDelegate: authentication,
                    serverAuthDelegate: trusted)
                let ssh = NIOSSHHandler(role: .client(client), allocator: channel.allocator,
                                        inboundChildChannelInitializer: nil)
                try channel.pipeline.syncOperations.addHandlers(ssh, CloseOnError())
            }
        }
        .withConnectedSocket(descriptor).get()
    // 3. A session channel that runs the command (opened once the host key and the password
    //    are accepted; a refusal of either fails `opened`).
    let opened = channel.eventLoop.makePromise(of: Channel.self)
    let finished = channel.eventLoop.makePromise(of: CommandResult.self)
    channel.eventLoop.execute {
        do {
            let ssh = try channel.pipeline.syncOperations.handler(type: NIOSSHHandler.self)
            ssh.createChannel(opened, channelType: .session) { child, _ in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(ExecHandler(command: command, finished: finished))
                }
            }
        } catch {
            opened.fail(error)
        }
    }
    do {
        _ = try await opened.futureResult.get()
    } catch {
        if let refused = trusted.refusedKey {
            fail("Host key verification failed: \(hostname) offered \(refused), which is not in \(knownHostsPath)")
        }
        if let refusal = authentication.refusal {
            fail("Authentication failed: \(refusal)")
        }
        fail("SSH connection to \(hostname) failed: \(error)")
    }
    let result = try await finished.futureResult.get()
    FileHandle.standardOutput.write(Data(result.standardOutput))
    FileHandle.standardError.write(Data(result.standardError))
    try? await channel.close().get()
    status = result.exitStatus
} catch let failure as TunnelFailure {
    fail(failure.message)
} catch {
    fail("\(error)")
}
await tunnel.disconnect()
try? await group.shutdownGracefully()
exit(status)
