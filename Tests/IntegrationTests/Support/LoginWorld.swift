import AccessTransport
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The names of the login protocol, all served by one emulator.
let loginTeamDomain = "emulator.cloudflareaccess.com"
let loginTransferHost = "login.cloudflareaccess.org"
/// The emulator's default application AUD (reference/EMULATOR.md).
let loginDefaultAUD = "4b1d6c0e8f2a93d57e6c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a098f7e6d5"

/// The names of the login protocol, each served on an address of its own.
let loginHosts = [testHost, loginTeamDomain, loginTransferHost]

/// Certificates for the app host, the team domain and the transfer service, per test process:
/// one for every name (the emulator's main listener, for admin calls and counters) and one per
/// name, valid for that name only (its `--site` listener).
let sharedLoginCerts: Result<CertSet, Error> = Result {
    try EdgeFixture.makeCerts(hosts: loginHosts, perHost: true)
}

/// A loopback address of this test's own, so that every emulator can listen on port 443: the
/// team domain's key set is fetched from `https://<auth_domain>/…` (port 443), as from Cloudflare.
private let loginAddressCounter = LockedBox(0)
private func nextLoginAddress() -> String {
    let n = loginAddressCounter.withLock { value -> Int in value += 1; return value }
    return "127.\(100 + Int(getpid()) % 150).\(1 + n / 250).\(1 + n % 250)"
}

/// An Access edge speaking the whole login protocol, a token directory, and a scripted browser
/// (`scripts/test-browser`) that logs the URLs it opens. The app host,
/// `<team>.cloudflareaccess.com` and `login.cloudflareaccess.org` each have an address of their
/// own (`127.x.y.z:443`, an emulator `--site`) with a certificate valid for that name only, and
/// clients reach them through `--resolve` with real TLS verification against the test CA: a
/// request sent to the wrong address, or with the wrong SNI, fails (issue 17). The emulator's
/// main listener, with a certificate for every name, serves the admin calls and counters.
final class LoginWorld: @unchecked Sendable {
    let edge: EdgeFixture
    let tokenDir: URL
    let browserLog: URL
    /// The address of each name's site.
    let siteAddresses: [String: String]
    private let scratch: URL

    /// - Parameters:
    ///   - target: the TCP target of the tunnel (`--target`); nil for a bastion (then
    ///     `edgeArguments` names `--allow-destination`s).
    ///   - edgeArguments: more `serve` options (login mode, faults, TTLs).
    init(target: String?, edgeArguments: [String] = []) throws {
        let certs = try sharedLoginCerts.get()
        var sites: [String: String] = [:]
        for host in loginHosts { sites[host] = nextLoginAddress() }
        siteAddresses = sites
        let siteArguments = loginHosts.flatMap { ["--site", "\($0)=\(sites[$0]!):443"] } + ["--site-certs", certs.dir.path]
        edge = try EdgeFixture(certs: certs, target: target, listen: "\(nextLoginAddress()):443",
                               extraArguments: siteArguments + edgeArguments)
        scratch = try makeTempDir("cfat-login")
        tokenDir = scratch.appendingPathComponent("tokens")
        browserLog = scratch.appendingPathComponent("browser.log")
    }

    deinit {
        edge.stop()
        try? FileManager.default.removeItem(at: scratch)
    }

    /// `HOST:443:ADDRESS` for every name of the login protocol, each to its own site.
    var resolveEntries: [String] {
        loginHosts.map { "\($0):443:\(siteAddresses[$0]!)" }
    }

    /// The flags every client command of these tests shares (no credential).
    var commonArguments: [String] {
        ["--ca-file", edge.certs.caFile.path, "--token-dir", tokenDir.path,
         "--transfer-poll-interval", "0.2", "--transfer-polls", "100"]
            + resolveEntries.flatMap { ["--resolve", $0] }
    }

    /// The flags of `token` and `logout`: the cache and the lookup only.
    var cacheArguments: [String] {
        ["--ca-file", edge.certs.caFile.path, "--token-dir", tokenDir.path] + resolveEntries.flatMap { ["--resolve", $0] }
    }

    /// `cf-access-tcp` tunnel arguments for the app host, with no credential.
    var tunnelArguments: [String] { ["--hostname", testHost] + commonArguments }

    /// The environment that makes `scripts/test-browser` the browser.
    func browserEnvironment(extra: [String: String] = [:]) throws -> [String: String] {
        var environment = [
            "BROWSER": try testBrowserPath(),
            "CF_ACCESS_TEST_CA": edge.certs.caFile.path,
            "CF_ACCESS_TEST_RESOLVE": resolveEntries.joined(separator: ","),
            "CF_ACCESS_TEST_BROWSER_LOG": browserLog.path,
        ]
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// The URLs the scripted browser was asked to open.
    var browserOpens: [String] {
        ((try? String(contentsOf: browserLog, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// The app token's file, named as cloudflared names it.
    var appTokenFile: URL { tokenDir.appendingPathComponent("\(testHost)-\(loginDefaultAUD)-token") }
    /// The org token's file.
    var orgTokenFile: URL { tokenDir.appendingPathComponent("\(loginTeamDomain)-org-token") }

    /// The token files in the directory (names ending in `-token`).
    var tokenFileNames: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: tokenDir.path)) ?? []).filter { $0.hasSuffix("-token") }.sorted()
    }

    /// Lock and login-URL files in the directory: none may outlive a login.
    var loginLeftovers: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: tokenDir.path)) ?? [])
            .filter { $0.hasSuffix(".lock") || $0.hasSuffix(".url") }.sorted()
    }

    /// One login counter of the emulator.
    func counter(_ name: String) throws -> Int {
        let data = try edge.statsJSON(host: testHost)
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              let value = object[name] as? Int else {
            throw FixtureError("no counter \(name) in \(String(decoding: data, as: UTF8.self))")
        }
        return value
    }

    /// `POST /cdn-cgi/edge/admin/<path>` on the emulator; returns the body.
    @discardableResult
    func admin(_ path: String) throws -> String {
        let curl = which("curl")
        try requireRealPart(curl != nil, "curl (package curl)")
        let arguments = ["-sS", "--fail-with-body", "--max-time", "10", "-X", "POST"] + edge.curlArguments(host: testHost)
            + ["https://\(testHost):443/cdn-cgi/edge/admin/\(path)"]
        let result = try run(URL(fileURLWithPath: curl!), arguments, timeout: 20)
        guard result.status == 0 else {
            throw FixtureError("admin \(path) failed (\(result.status)): \(result.stdout) \(result.stderr)")
        }
        return result.stdout
    }

    /// Writes `content` as a token file with `mode` (the directory is made 0700 first).
    func writeTokenFile(_ url: URL, _ content: String, mode: mode_t = 0o600) throws {
        try FileManager.default.createDirectory(at: tokenDir, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try Data(content.utf8).write(to: url)
        chmod(url.path, mode)
    }
}

/// The file mode bits of `url`.
func fileMode(_ url: URL) -> mode_t? {
    var info = stat()
    guard stat(url.path, &info) == 0 else { return nil }
    return info.st_mode & 0o777
}

/// `scripts/test-browser` of this checkout (the package root is above `.build`).
func testBrowserPath() throws -> String {
    var directory = TestPaths.binDir
    for _ in 0..<6 {
        let candidate = directory.appendingPathComponent("scripts/test-browser")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate.path }
        directory = directory.deletingLastPathComponent()
    }
    let fromSource = URL(fileURLWithPath: #filePath).deletingLastPathComponent()   // Tests/IntegrationTests/Support
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("scripts/test-browser")
    if FileManager.default.isExecutableFile(atPath: fromSource.path) { return fromSource.path }
    throw FixtureError("scripts/test-browser not found above \(TestPaths.binDir.path)")
}

/// Runs `cf-access-tcp` in stdin/stdout mode, sends `payload` and expects it echoed; returns
/// the process after it exited (for its stderr).
@discardableResult
func echoThroughStdio(arguments: [String], environment: [String: String], payload: String,
                      timeout: TimeInterval = 60) throws -> ManagedProcess {
    let process = try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, environment: environment,
                                     stdin: .pipe)
    try process.writeStdin(Data(payload.utf8))
    let echoed: Data
    do {
        echoed = try process.waitForStdout(byteCount: payload.utf8.count, timeout: timeout)
    } catch {
        process.terminate()
        throw FixtureError("no echo: \(error)\n\(process.outputReport())")
    }
    guard echoed == Data(payload.utf8) else {
        throw FixtureError("echo mismatch: \(String(decoding: echoed, as: UTF8.self))\n\(process.outputReport())")
    }
    process.closeStdin()
    let status = try process.waitForExit(timeout: 20)
    guard status == 0 else { throw FixtureError("exit status \(status)\n\(process.outputReport())") }
    return process
}
