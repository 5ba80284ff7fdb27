// The local Cloudflare Access edge emulator (`cf-access-edge`) and its TCP
// test targets, run as real processes.

import Foundation

/// A test CA and a server certificate made by `cf-access-edge certs`. The
/// directory is removed when the last reference goes away.
final class CertSet: Sendable {
    /// The directory holding the four files.
    let dir: URL
    /// The CA certificate clients trust (`ca.pem`).
    let caFile: URL
    /// The CA's private key (`ca-key.pem`).
    let caKeyFile: URL
    /// The server certificate chain (`server.pem`).
    let certFile: URL
    /// The server's private key (`server-key.pem`).
    let keyFile: URL
    /// The names the server certificate is valid for.
    let hosts: [String]

    /// The certificate and key valid for `host` only (`cf-access-edge certs --per-host`).
    func hostFiles(_ host: String) -> (certificate: URL, key: URL) {
        (dir.appendingPathComponent("\(host.lowercased()).pem"), dir.appendingPathComponent("\(host.lowercased())-key.pem"))
    }

    init(dir: URL, hosts: [String]) {
        self.dir = dir
        self.hosts = hosts
        caFile = dir.appendingPathComponent("ca.pem")
        caKeyFile = dir.appendingPathComponent("ca-key.pem")
        certFile = dir.appendingPathComponent("server.pem")
        keyFile = dir.appendingPathComponent("server-key.pem")
    }

    deinit {
        try? FileManager.default.removeItem(at: dir)
    }
}

/// The emulator's counters, from `GET /cdn-cgi/edge/stats`.
///
/// *In* is from the WebSocket client to the edge, *Out* from the edge to the
/// client.
struct EdgeStats: Decodable, Sendable, Equatable {
    var upgradesAccepted: Int
    var upgradesRejected: Int
    var activeTunnels: Int
    var binaryFramesIn: Int
    var bytesIn: Int
    var binaryFramesOut: Int
    var bytesOut: Int
    var textFrames: Int
    var closeFramesReceived: Int
    var pingsReceived: Int
    var idleClosed: Int
    /// The User-Agent of the last upgrade request ("" before the first).
    var lastUserAgent: String
    /// The header names (lower-cased, in order) of the last upgrade request.
    var lastHeaderNames: [String]

    private enum CodingKeys: String, CodingKey {
        case upgradesAccepted, upgradesRejected, activeTunnels, binaryFramesIn, bytesIn
        case binaryFramesOut, bytesOut, textFrames, closeFramesReceived, pingsReceived, idleClosed
        case lastUserAgent, lastHeaderNames
    }

    /// The counters are required; the two "last request" fields may be
    /// absent or null before any upgrade.
    init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        upgradesAccepted = try container.decode(Int.self, forKey: .upgradesAccepted)
        upgradesRejected = try container.decode(Int.self, forKey: .upgradesRejected)
        activeTunnels = try container.decode(Int.self, forKey: .activeTunnels)
        binaryFramesIn = try container.decode(Int.self, forKey: .binaryFramesIn)
        bytesIn = try container.decode(Int.self, forKey: .bytesIn)
        binaryFramesOut = try container.decode(Int.self, forKey: .binaryFramesOut)
        bytesOut = try container.decode(Int.self, forKey: .bytesOut)
        textFrames = try container.decode(Int.self, forKey: .textFrames)
        closeFramesReceived = try container.decode(Int.self, forKey: .closeFramesReceived)
        pingsReceived = try container.decode(Int.self, forKey: .pingsReceived)
        idleClosed = try container.decode(Int.self, forKey: .idleClosed)
        lastUserAgent = try container.decodeIfPresent(String.self, forKey: .lastUserAgent) ?? ""
        lastHeaderNames = try container.decodeIfPresent([String].self, forKey: .lastHeaderNames) ?? []
    }
}

/// A running `cf-access-edge serve` on 127.0.0.1, on a port it picked.
///
/// Clients reach it as `https://HOST:port` for any `HOST` in its `certs`,
/// resolved to 127.0.0.1 (curl `--resolve`, or the client's own override),
/// and trust `certs.caFile`.
final class EdgeFixture: @unchecked Sendable {
    /// The certificate set the edge serves.
    let certs: CertSet
    /// The port it listens on.
    let port: Int
    /// The loopback address it listens on (127.0.0.1 unless `listen` chose another).
    let address: String
    /// The emulator process (for its stderr, or to signal it).
    let process: ManagedProcess

    /// Makes a CA and a server certificate for `hosts` in a new temporary
    /// directory with `cf-access-edge certs`.
    /// With `perHost`, also a certificate per host, valid for that host only (`CertSet.hostFiles`).
    static func makeCerts(hosts: [String], perHost: Bool = false) throws -> CertSet {
        precondition(!hosts.isEmpty, "makeCerts needs at least one host")
        let edge = try TestPaths.binary("cf-access-edge")
        let dir = try makeTempDir("cfat-certs")
        let certs = CertSet(dir: dir, hosts: hosts)  // removes dir on failure too
        let result = try run(edge, ["certs", "--out", dir.path] + hosts.flatMap { ["--host", $0] }
                                 + (perHost ? ["--per-host"] : []), timeout: 120)
        guard result.status == 0 else {
            throw FixtureError(
                "cf-access-edge certs exited with status \(result.status)\n"
                    + "stdout: \(result.stdout)\nstderr: \(result.stderr)")
        }
        for file in [certs.caFile, certs.caKeyFile, certs.certFile, certs.keyFile]
        where !FileManager.default.fileExists(atPath: file.path) {
            throw FixtureError(
                "cf-access-edge certs did not write \(file.lastPathComponent) into \(dir.path)\n"
                    + "stdout: \(result.stdout)\nstderr: \(result.stderr)")
        }
        return certs
    }

    /// Starts `cf-access-edge serve --listen 127.0.0.1:0` and waits (bounded)
    /// for its "listening" line.
    ///
    /// - Parameters:
    ///   - target: fixed TCP target `HOST:PORT` (`--target`); without it the
    ///     client's `Cf-Access-Jump-Destination` picks it.
    ///   - serviceTokens: accepted service tokens, `(id, secret)`.
    ///   - appTokens: accepted `Cf-Access-Token` values.
    ///   - team: Access team name used in login redirects.
    ///   - forceStatus: answer every upgrade with this HTTP status.
    ///   - idleTimeout: close a tunnel after this many idle seconds.
    ///   - verbose: log each upgrade and tunnel event to stderr.
    ///   - extraArguments: appended to the `serve` command line as is.
    init(
        certs: CertSet, target: String? = nil, serviceTokens: [(String, String)] = [],
        appTokens: [String] = [], team: String? = nil, forceStatus: Int? = nil, idleTimeout: Int? = nil,
        verbose: Bool = false, listen: String = "127.0.0.1:0", extraArguments: [String] = []
    ) throws {
        var arguments = [
            "serve", "--listen", listen, "--cert", certs.certFile.path, "--key", certs.keyFile.path,
        ]
        if let target { arguments += ["--target", target] }
        for (id, secret) in serviceTokens { arguments += ["--service-token", "\(id):\(secret)"] }
        for token in appTokens { arguments += ["--app-token", token] }
        if let team { arguments += ["--team", team] }
        if let forceStatus { arguments += ["--force-status", String(forceStatus)] }
        if let idleTimeout { arguments += ["--idle-timeout", String(idleTimeout)] }
        if verbose { arguments.append("--verbose") }
        arguments += extraArguments

        let process = try ManagedProcess(try TestPaths.binary("cf-access-edge"), arguments)
        let prefix = "cf-access-edge listening on "
        let line = try process.waitForLine(matching: prefix, timeout: 30)
        (self.address, self.port) = try parseLoopbackAddress(line, after: prefix)
        self.process = process
        self.certs = certs
    }

    deinit {
        stop()
    }

    /// Stops the emulator (SIGTERM, then SIGKILL). Idempotent.
    func stop() {
        process.terminate()
    }

    /// `https://host:port`.
    func url(host: String) -> String {
        "https://\(host):\(port)"
    }

    /// The curl arguments that reach this edge as `host` with real TLS
    /// verification: the test CA, `host:port` resolved to 127.0.0.1, no proxy.
    func curlArguments(host: String) -> [String] {
        ["--cacert", certs.caFile.path, "--resolve", "\(host):\(port):\(address)", "--noproxy", "*"]
    }

    /// The emulator's counters, fetched over HTTPS as `host` (which must be
    /// one of the certificate's names) with the `curl` CLI.
    func stats(host: String) throws -> EdgeStats {
        let data = try statsJSON(host: host)
        do {
            return try JSONDecoder().decode(EdgeStats.self, from: data)
        } catch {
            throw FixtureError(
                "cannot decode edge stats: \(error)\nbody: \(String(decoding: data, as: UTF8.self))")
        }
    }

    /// The raw JSON body of `GET /cdn-cgi/edge/stats`.
    func statsJSON(host: String) throws -> Data {
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let arguments =
            ["-sS", "--fail-with-body", "--max-time", "10"] + curlArguments(host: host)
            + ["\(url(host: host))/cdn-cgi/edge/stats"]
        let result = try run(URL(fileURLWithPath: curl!), arguments, timeout: 20)
        guard result.status == 0 else {
            throw FixtureError(
                "curl \(arguments.joined(separator: " ")) exited with status \(result.status)\n"
                    + "stdout: \(result.stdout)\nstderr: \(result.stderr)\n"
                    + "--- edge stderr ---\n\(process.stderrText)")
        }
        return Data(result.stdout.utf8)
    }

    /// Polls the counters (every 50 ms) until `predicate` holds and returns
    /// them; throws with the last counters after `timeout` seconds. Counters
    /// change asynchronously (a close frame lands after the client exits).
    @discardableResult
    func waitForStats(
        host: String, timeout: TimeInterval = 10, _ predicate: (EdgeStats) -> Bool
    ) throws -> EdgeStats {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            let current = try stats(host: host)
            if predicate(current) { return current }
            if Date() >= deadline {
                throw FixtureError("edge stats did not reach the expected state within \(timeout) s: \(current)")
            }
            usleep(50_000)
        }
    }
}

/// A running `cf-access-edge target echo|sink|source` on 127.0.0.1.
final class TargetFixture: @unchecked Sendable {
    /// What the target does with a connection.
    enum Mode: String, Sendable {
        /// Sends back everything it receives.
        case echo
        /// Reads and discards everything.
        case sink
        /// Sends `bytes` bytes, then closes.
        case source
    }

    let mode: Mode
    /// The port it listens on, on 127.0.0.1.
    let port: Int
    /// The target process (for its stderr, or to signal it).
    let process: ManagedProcess

    /// `127.0.0.1:port`, e.g. for `EdgeFixture(target:)`.
    var address: String { "127.0.0.1:\(port)" }

    /// Starts the target and waits (bounded) for its "listening" line.
    /// `bytes` is what each `source` connection sends.
    init(_ mode: Mode, bytes: Int? = nil) throws {
        var arguments = ["target", mode.rawValue, "--listen", "127.0.0.1:0"]
        if let bytes { arguments += ["--bytes", String(bytes)] }
        let process = try ManagedProcess(try TestPaths.binary("cf-access-edge"), arguments)
        let prefix = "cf-access-edge target \(mode.rawValue) listening on "
        let line = try process.waitForLine(matching: prefix, timeout: 30)
        self.port = try parseLoopbackPort(line, after: prefix)
        self.process = process
        self.mode = mode
    }

    deinit {
        stop()
    }

    /// Stops the target (SIGTERM, then SIGKILL). Idempotent.
    func stop() {
        process.terminate()
    }
}

/// The port of a "… listening on 127.0.0.1:PORT" line.
private func parseLoopbackPort(_ line: String, after prefix: String) throws -> Int {
    let (address, port) = try parseLoopbackAddress(line, after: prefix)
    guard address == "127.0.0.1" else { throw FixtureError("cannot read a 127.0.0.1 port from \"\(line)\"") }
    return port
}

/// The loopback address and port of a "… listening on 127.x.y.z:PORT" line.
private func parseLoopbackAddress(_ line: String, after prefix: String) throws -> (String, Int) {
    let address = line.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces)
    guard let colon = address.lastIndex(of: ":"),
        address[..<colon].hasPrefix("127."),
        let port = Int(address[address.index(after: colon)...]),
        (1...65535).contains(port)
    else {
        throw FixtureError("cannot read a loopback address and port from \"\(line)\"")
    }
    return (String(address[..<colon]), port)
}
