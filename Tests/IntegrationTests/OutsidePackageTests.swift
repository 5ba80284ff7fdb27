// Issue 19 §1 and §5: the libraries used by a package outside this repository, by URL and
// version, and a swift-nio-ssh client (Examples/NIOSSHExample) over a port-less tunnel, both run
// against the Access edge emulator and a real sshd.

import Foundation
import Testing

/// The directory holding `outside-consumer` and `nio-ssh-example`, built by
/// scripts/build-outside-package: `CF_ACCESS_TCP_OUTSIDE_BIN_DIR` when scripts/test built them
/// already, else built here once per process (minutes: a package outside the repository
/// resolves this one from a tagged clone and builds it, swift-nio and swift-nio-ssh from
/// scratch). A build failure — SwiftPM refusing the dependency, say — fails every test here.
private let outsideBuild: Result<URL, FixtureError> = {
    let environment = ProcessInfo.processInfo.environment
    if let dir = environment["CF_ACCESS_TCP_OUTSIDE_BIN_DIR"], !dir.isEmpty {
        return .success(URL(fileURLWithPath: dir, isDirectory: true))
    }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    do {
        let work = try makeTempDir("cfat-outside")
        let result = try run(root.appendingPathComponent("scripts/build-outside-package"), [work.path], timeout: 3600)
        guard result.status == 0, let last = result.stdout.split(separator: "\n").last else {
            return .failure(FixtureError("scripts/build-outside-package failed (status \(result.status)):\n"
                + String(result.stderr.suffix(6000))))
        }
        return .success(URL(fileURLWithPath: String(last), isDirectory: true))
    } catch let error as FixtureError {
        return .failure(error)
    } catch {
        return .failure(FixtureError("scripts/build-outside-package could not run: \(error)"))
    }
}()

private func outsideProgram(_ name: String) throws -> URL {
    let url = try outsideBuild.get().appendingPathComponent(name)
    try requireRealPart(FileManager.default.isExecutableFile(atPath: url.path),
                        "\(name) from scripts/build-outside-package at \(url.path)")
    return url
}

private let tokenEnvironment = ["TUNNEL_SERVICE_TOKEN_ID": testTokenID, "TUNNEL_SERVICE_TOKEN_SECRET": testTokenSecret]

/// A known_hosts file in a new directory naming `keyLine` (`type base64`) for `testHost`.
private func knownHosts(_ keyLine: String) throws -> URL {
    let file = try makeTempDir("cfat-outside-kh").appendingPathComponent("known_hosts")
    try "\(testHost) \(keyLine)\n".write(to: file, atomically: true, encoding: .utf8)
    return file
}

@Suite("a package outside the repository, and swift-nio-ssh over a tunnel", .serialized, .ownThreads)
struct OutsidePackageTests {
    @Test("a package depending on CFAccessTCP and CFAccessSSH by URL and version builds, tunnels, and runs an SSH command")
    func librariesByVersion() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let result = try run(try outsideProgram("outside-consumer"),
                             [testHost, sshd.keyUser, sshd.clientKeyPath.path, try knownHosts(sshd.hostKeyPublicLine).path,
                              "127.0.0.1:\(edge.port)", edge.certs.caFile.path, "echo outside-ok; exit 3"],
                             env: tokenEnvironment, timeout: 120)
        #expect(result.status == 3, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        // CFAccessTCP: the port led to sshd (its banner); CFAccessSSH: the command ran there.
        #expect(lines.first?.hasPrefix("tunnel: SSH-2.0-OpenSSH") == true, "\(result.stdout)")
        #expect(Array(lines.dropFirst()) == ["outside-ok", ""], "\(result.stdout)")
        #expect(sshd.logText.contains("Accepted publickey for \(sshd.keyUser)"))
    }

    @Test("the swift-nio-ssh example runs a command through the emulator with no TCP port")
    func nioSSHExample() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        var env = tokenEnvironment
        env["SSH_PASSWORD"] = sshd.password
        let result = try run(try outsideProgram("nio-ssh-example"),
                             [testHost, sshd.passwordUser, try knownHosts(sshd.hostKeyPublicLine).path,
                              "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path,
                              "--", "echo nio-ok; whoami; echo to-stderr >&2; exit 5"],
                             env: env, timeout: 120)
        #expect(result.status == 5, "\(result.stderr)")
        #expect(result.stdout == "nio-ok\n\(sshd.passwordUser)\n")
        #expect(result.stderr == "to-stderr\n")
        #expect(sshd.logText.contains("Accepted password for \(sshd.passwordUser)"))
        // Through the edge: the example was given the edge's address, never sshd's.
        let stats = try edge.stats(host: testHost)
        #expect(stats.upgradesAccepted == 1)
        #expect(stats.bytesIn > 0 && stats.bytesOut > 0)
    }

    @Test("the swift-nio-ssh example refuses a host key that known_hosts does not list, before sending the password")
    func nioSSHExampleRefusesUnknownHostKey() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        // Another real ed25519 key (the client's) in place of the host's.
        let otherKey = try String(contentsOf: sshd.clientKeyPath.appendingPathExtension("pub"), encoding: .utf8)
            .split(separator: " ").prefix(2).joined(separator: " ")
        var env = tokenEnvironment
        env["SSH_PASSWORD"] = sshd.password
        let result = try run(try outsideProgram("nio-ssh-example"),
                             [testHost, sshd.passwordUser, try knownHosts(otherKey).path,
                              "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path,
                              "--", "echo must-not-run"],
                             env: env, timeout: 120)
        #expect(result.status == 1)
        #expect(result.stdout == "")
        #expect(result.stderr.hasPrefix("nio-ssh-example: Host key verification failed: \(testHost) offered ssh-ed25519 "),
                "\(result.stderr)")
        #expect(!sshd.logText.contains("password for"), "the password must not be sent: \(sshd.logText)")
    }

    @Test("the swift-nio-ssh example reports a refused password in one line")
    func nioSSHExampleWrongPassword() throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        var env = tokenEnvironment
        env["SSH_PASSWORD"] = "not-the-password"
        let result = try run(try outsideProgram("nio-ssh-example"),
                             [testHost, sshd.passwordUser, try knownHosts(sshd.hostKeyPublicLine).path,
                              "--connect-to", "127.0.0.1:\(edge.port)", "--ca-file", edge.certs.caFile.path,
                              "--", "echo must-not-run"],
                             env: env, timeout: 120)
        #expect(result.status == 1)
        #expect(result.stdout == "")
        #expect(result.stderr == "nio-ssh-example: Authentication failed: the server refused the password for \(sshd.passwordUser)\n")
        #expect(sshd.logText.contains("Failed password for \(sshd.passwordUser)"))
    }
}
