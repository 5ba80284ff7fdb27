// The program of the package scripts/build-outside-package makes outside this repository
// (issue 19 §1): it depends on CFAccessTCP and CFAccessSSH by URL and version, like any other
// package would, and uses each once against a real edge and sshd (Tests/IntegrationTests,
// OutsidePackageTests). Written against the public API only; keep it short.
//
//   TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \
//   outside-consumer HOSTNAME USER KEYFILE KNOWN_HOSTS CONNECT_TO CA_FILE COMMAND
//
// Prints `tunnel: <the first line the server sent through the port>`, then the command's output
// (run through CFAccessSSH over a port-less stream), and exits with the command's status.
import CFAccessSSH
import CFAccessTCP
import Foundation
#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("outside-consumer: \(message)\n".utf8))
    exit(1)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 7 else { fail("usage: outside-consumer HOSTNAME USER KEYFILE KNOWN_HOSTS CONNECT_TO CA_FILE COMMAND") }
let (hostname, user, keyFile, knownHosts) = (arguments[0], arguments[1], arguments[2], arguments[3])
let environment = ProcessInfo.processInfo.environment

/// The first line a TCP server on 127.0.0.1:`port` sends (an SSH server's banner).
func firstLine(port: UInt16) -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard fd >= 0, connected == 0 else { fail("cannot connect to the tunnel's port \(port)") }
    defer { close(fd) }
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while line.count < 256, read(fd, &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
    return String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
}

do {
    var options = AccessTunnel.Options()
    options.connectTo = try ConnectTarget.parse(arguments[4])
    options.caFile = arguments[5]
    let token = try ServiceToken(clientID: environment["TUNNEL_SERVICE_TOKEN_ID"] ?? "",
                                 clientSecret: environment["TUNNEL_SERVICE_TOKEN_SECRET"] ?? "")

    // CFAccessTCP: a tunnel behind a local port, for any TCP client.
    let tunnel = AccessTunnel(options: options)
    let port = try await tunnel.connect(hostname: hostname, method: .serviceToken(token))
    FileHandle.standardOutput.write(Data("tunnel: \(firstLine(port: port))\n".utf8))
    await tunnel.disconnect()

    // CFAccessSSH: an SSH session over a tunnel with no port at all.
    let streamTunnel = AccessTunnel(options: options)
    // The host-key delegate is required: the library's known_hosts policy, strict.
    let verifier = KnownHostsVerifier(configuration: .init(knownHosts: KnownHosts(path: knownHosts),
                                                           host: hostname, checking: .strict))
    let ssh = try SSHSession(stream: try await streamTunnel.openStream(hostname: hostname, method: .serviceToken(token)),
                             configuration: .init(hostKeyDelegate: verifier))
    try await ssh.handshake()
    try await ssh.authenticate(user: user, offer: .privateKey(path: keyFile))
    let result = try await ssh.exec(arguments[6])
    FileHandle.standardOutput.write(result.standardOutput)
    await ssh.disconnect()
    await streamTunnel.disconnect()
    exit(result.exitStatus ?? 255)
} catch let failure as TunnelFailure {
    fail(failure.message)
} catch let failure as SSHFailure {
    fail(failure.message)
} catch {
    fail("\(error)")
}
