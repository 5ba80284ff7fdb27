// A runnable example of the embedded SSH API: a tunnel stream with a service token, an SSH
// session over it (no TCP port, no ssh binary), key authentication, one command.
//
//   TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \
//   cf-access-ssh-example ssh.example.com USER KEYFILE KNOWN_HOSTS [--connect-to HOST:PORT] [--ca-file CA] -- COMMAND
//
// The host key must already be in KNOWN_HOSTS under the hostname (strict checking, by the
// library's known_hosts policy); the command's output is printed and its exit status becomes the
// example's. Any failure is one line on stderr and status 255, as ssh does.
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
    // 2. SSH over it. The host-key delegate is required: here the library's known_hosts policy,
    //    strict (an unknown key is refused, as with StrictHostKeyChecking=yes).
    let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: knownHostsFile),
                                                           host: hostname, checking: .strict))
    let ssh = try SSHSession(stream: stream, configuration: .init(hostKeyDelegate: verifier))
    try await ssh.handshake()                   // the key was checked before any credential goes out
    // 3. Authenticate with the key (one offer; SSHOrderedAuthentication would try them all) and run.
    try await ssh.authenticate(user: user, offer: .privateKey(path: keyFile))
    let result = try await ssh.exec(command)
    FileHandle.standardOutput.write(result.standardOutput)
    FileHandle.standardError.write(result.standardError)
    await ssh.disconnect()
    await tunnel.disconnect()
    exit(result.exitStatus ?? 255)
} catch {
    fail("\(error)", 255)                        // SSHFailure and TunnelFailure print their plain message
}
