// A runnable example of the library: open a tunnel with a service token, run `ssh` through the
// returned port; the tunnel is closed when the scope ends, whatever happens in it.
//
//   TUNNEL_SERVICE_TOKEN_ID=… TUNNEL_SERVICE_TOKEN_SECRET=… \
//   cf-access-tcp-example ssh.example.com [--connect-to HOST:PORT] [--ca-file CA] -- [ssh options] user@127.0.0.1 command
//
// Everything after `--` goes to ssh; the example adds `-p <port>`.
import CFAccessTCP
import Foundation

var arguments = Array(CommandLine.arguments.dropFirst())
guard let hostname = arguments.first, let separator = arguments.firstIndex(of: "--") else {
    FileHandle.standardError.write(Data("usage: cf-access-tcp-example HOSTNAME [--connect-to H:P] [--ca-file CA] -- SSH-ARGS…\n".utf8))
    exit(2)
}
let sshArguments = Array(arguments[(separator + 1)...])
arguments = Array(arguments[1..<separator])

var options = AccessTunnel.Options(connectTimeout: .seconds(15))
while let flag = arguments.first {
    arguments.removeFirst()
    guard let value = arguments.first else { break }
    arguments.removeFirst()
    switch flag {
    case "--connect-to": options.connectTo = try ConnectTarget.parse(value)
    case "--ca-file": options.caFile = value
    default: break
    }
}

let environment = ProcessInfo.processInfo.environment
let serviceToken = try ServiceToken(clientID: environment["TUNNEL_SERVICE_TOKEN_ID"] ?? "",
                                    clientSecret: environment["TUNNEL_SERVICE_TOKEN_SECRET"] ?? "")

do {
    let status = try await withAccessTunnel(options: options) { tunnel in
        // Watch the state as an app would (a GUI would show it).
        let watcher = Task {
            for await state in tunnel.state { FileHandle.standardError.write(Data("tunnel: \(state)\n".utf8)) }
        }
        defer { watcher.cancel() }
        let port = try await tunnel.connect(hostname: hostname, method: .serviceToken(serviceToken))
        let ssh = Process()
        ssh.executableURL = URL(fileURLWithPath: "/usr/bin/ssh")
        ssh.arguments = ["-p", String(port)] + sshArguments
        try ssh.run()
        ssh.waitUntilExit()
        return ssh.terminationStatus
    }
    // Here the listener and its connections are closed.
    exit(status)
} catch let failure as TunnelFailure {
    FileHandle.standardError.write(Data("cf-access-tcp-example: \(failure.message)\n".utf8))
    exit(1)
} catch {
    FileHandle.standardError.write(Data("cf-access-tcp-example: \(error)\n".utf8))
    exit(1)
}
