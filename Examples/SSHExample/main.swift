// A runnable example of the embedded SSH API: a tunnel stream with a service token, an SSH
// session over it (no TCP port, no ssh binary), key authentication, one command.
//
//   TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \
//   cf-access-ssh-example ssh.example.com USER KEYFILE KNOWN_HOSTS [--connect-to HOST:PORT] [--ca-file CA] -- COMMAND
//
// The host key must already be in KNOWN_HOSTS under the hostname; the command's output is
// printed and its exit status becomes the example's.
import CFAccessSSH
import CFAccessTCP
import Foundation

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 4, let separator = arguments.firstIndex(of: "--"), separator >= 4 else {
    FileHandle.standardError.write(Data(
        "usage: cf-access-ssh-example HOSTNAME USER KEYFILE KNOWN_HOSTS [--connect-to H:P] [--ca-file CA] -- COMMAND\n".utf8))
    exit(64)
}
let (hostname, user, keyFile, knownHostsFile) = (arguments[0], arguments[1], arguments[2], arguments[3])
let command = arguments[(separator + 1)...].joined(separator: " ")
var flags = Array(arguments[4..<separator])

var options = AccessTunnel.Options()
while flags.count >= 2 {
    let (flag, value) = (flags.removeFirst(), flags.removeFirst())
    switch flag {
    case "--connect-to": options.connectTo = try ConnectTarget.parse(value)
    case "--ca-file": options.caFile = value
    default: break
    }
}

func fail(_ message: String, _ status: Int32) -> Never {
    FileHandle.standardError.write(Data("cf-access-ssh-example: \(message)\n".utf8))
    exit(status)
}

let environment = ProcessInfo.processInfo.environment
let token = try ServiceToken(clientID: environment["TUNNEL_SERVICE_TOKEN_ID"] ?? "",
                             clientSecret: environment["TUNNEL_SERVICE_TOKEN_SECRET"] ?? "")
let tunnel = AccessTunnel(options: options)
do {
    // 1. The tunnel as a connected socket: no listening port.
    let stream = try await tunnel.openStream(hostname: hostname, method: .serviceToken(token))
    // 2. SSH over it: handshake, then check the host key before sending any credential.
    let ssh = try SSHSession(stream: stream)
    let hostKey = try await ssh.handshake()
    let knownHosts = KnownHosts(path: knownHostsFile)
    guard case .match = try knownHosts.check(host: hostname, port: 22, key: hostKey) else {
        fail("the host key \(hostKey.fingerprint) of \(hostname) is not in \(knownHostsFile)", 77)
    }
    // 3. Authenticate and run the command.
    try await ssh.authenticate(user: user, privateKeyFile: keyFile)
    let result = try await ssh.exec(command)
    FileHandle.standardOutput.write(result.standardOutput)
    FileHandle.standardError.write(result.standardError)
    await ssh.disconnect()
    await tunnel.disconnect()
    exit(result.exitStatus ?? 255)
} catch let failure as SSHFailure {
    fail(failure.message, 1)
} catch let failure as TunnelFailure {
    fail(failure.message, 1)
}
