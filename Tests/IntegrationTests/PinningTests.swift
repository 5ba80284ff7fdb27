import AccessCore
import Foundation
import Testing

/// Issue 26.4: `--pin sha256//…` (curl's `--pinnedpubkey` form). The dial succeeds only when the
/// edge's leaf, or another certificate of its chain, carries a pinned key — checked against the
/// emulator, and against a hostile edge whose certificate is valid (same CA, same name) but holds
/// another key, which only the pin can tell apart.
@Suite("pinned edge keys", .serialized, .ownThreads)
struct PinningTests {
    /// `sha256//BASE64` of the SubjectPublicKeyInfo in the PEM certificate `file`, computed by
    /// openssl (an independent implementation of the pin).
    private func pin(ofCertificate file: URL) throws -> String {
        let script = "openssl x509 -in '\(file.path)' -pubkey -noout | openssl pkey -pubin -outform der"
            + " | openssl dgst -sha256 -binary | base64"
        let result = try run(URL(fileURLWithPath: "/bin/sh"), ["-c", script], timeout: 30)
        try #require(result.status == 0, "\(result.stderr)")
        return "sha256//" + result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A certificate for `testHost` from the test CA with a key of its own; its chain file holds
    /// the leaf and the CA.
    private func otherCertificate(in directory: URL) throws -> (chain: URL, key: URL, leaf: URL) {
        let certs = try certs()
        let key = directory.appendingPathComponent("other-key.pem")
        let leaf = directory.appendingPathComponent("other.pem")
        let chain = directory.appendingPathComponent("other-chain.pem")
        let extensions = directory.appendingPathComponent("ext.cnf")
        try "subjectAltName=DNS:\(testHost)\n".write(to: extensions, atomically: true, encoding: .utf8)
        let script = """
            set -e
            openssl ecparam -name prime256v1 -genkey -noout -out '\(key.path)'
            openssl req -new -key '\(key.path)' -subj '/CN=\(testHost)' -out '\(directory.path)/other.csr'
            openssl x509 -req -in '\(directory.path)/other.csr' -CA '\(certs.caFile.path)' -CAkey '\(certs.caKeyFile.path)' \
              -CAcreateserial -days 2 -extfile '\(extensions.path)' -out '\(leaf.path)'
            cat '\(leaf.path)' '\(certs.caFile.path)' > '\(chain.path)'
            """
        let result = try run(URL(fileURLWithPath: "/bin/sh"), ["-c", script], timeout: 60)
        try #require(result.status == 0, "\(result.stderr)")
        return (chain, key, leaf)
    }

    @Test("the emulator's key pinned: the tunnel carries bytes; a list with one matching pin does too")
    func matchingPin() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let pinned = try pin(ofCertificate: try certs().certFile)
        for value in [pinned, "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,\(pinned)"] {
            let result = try run(try TestPaths.binary("cf-access-tcp"), try clientArguments(edge: edge, extra: ["--pin", value]),
                                 stdin: Data("pinned\n".utf8), timeout: 30)
            #expect(result.status == 0, "\(value): \(result.stderr)")
            #expect(result.stdout == "pinned\n")
        }
    }

    @Test("another key pinned: exit 69 and one line naming the key the emulator presented")
    func mismatchWithEmulator() throws {
        let echo = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: echo.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let presented = try pin(ofCertificate: try certs().certFile)
        let result = try run(try TestPaths.binary("cf-access-tcp"),
                             try clientArguments(edge: edge, extra: ["--pin", "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]),
                             stdin: Data("never\n".utf8), timeout: 30)
        #expect(result.status == ExitStatus.unavailable.rawValue, "\(result.stderr)")
        #expect(result.stderr == "cf-access-tcp: the edge for \(testHost) presented no pinned key: it showed \(presented) (leaf); "
            + "check the pins, or whether something on the path (a TLS-inspecting proxy) replaced the edge's certificate (--pin)\n")
        #expect(result.stdout.isEmpty)
    }

    @Test("a hostile edge with a valid certificate for the name but another key: refused by the pin, accepted without it; its CA pinned: accepted (certificate 2 of the chain)")
    func hostileEdgeWithAnotherKey() throws {
        let directory = try makeTempDir("cfat-pin")
        defer { try? FileManager.default.removeItem(at: directory) }
        let other = try otherCertificate(in: directory)
        let hostile = try HostileEdge(mode: "coalesce", extra: ["--cert", other.chain.path, "--key", other.key.path])
        let binary = try TestPaths.binary("cf-access-tcp")

        // The certificate is valid: without a pin the tunnel opens (the edge says hello, then closes).
        let unpinned = try run(binary, try hostile.clientArguments(), stdin: Data(), timeout: 30)
        #expect(unpinned.status == 0, "\(unpinned.stderr)")
        #expect(unpinned.stdout == "hello from the edge\n")

        // Pinned to the real edge's key: refused, naming both certificates it presented.
        let realPin = try pin(ofCertificate: try certs().certFile)
        let refused = try run(binary, try hostile.clientArguments(extra: ["--pin", realPin]), stdin: Data(), timeout: 30)
        #expect(refused.status == ExitStatus.unavailable.rawValue, "\(refused.stderr)")
        let leafPin = try pin(ofCertificate: other.leaf)
        let caPin = try pin(ofCertificate: try certs().caFile)
        #expect(refused.stderr.contains("it showed \(leafPin) (leaf), \(caPin) (certificate 2 of the chain)"), "\(refused.stderr)")
        #expect(refused.stdout.isEmpty, "no byte of a refused edge reaches stdout")

        // The CA's key pinned: the chain carries it.
        let byCA = try run(binary, try hostile.clientArguments(extra: ["--pin", caPin, "--loglevel", "debug"]), stdin: Data(), timeout: 30)
        #expect(byCA.status == 0, "\(byCA.stderr)")
        #expect(byCA.stderr.contains("the pinned key \(caPin) is the key of certificate 2 of the chain"), "\(byCA.stderr)")
    }
}
