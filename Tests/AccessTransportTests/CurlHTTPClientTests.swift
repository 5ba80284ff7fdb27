import AccessTestSupport
import AccessCore
import AccessTransport
import Foundation
import Testing

/// libcurl against a local HTTPS server (python3 http.server + ssl, a throwaway CA made by
/// python `cryptography`), reached under real Access names through `--resolve`.
@Suite("CurlHTTPClient", .serialized)
final class CurlHTTPClientTests {
    let temp = TemporaryDirectory()
    let server = Process()
    var port = 0

    static let script = #"""
import sys, os, ssl, datetime, http.server, threading
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
d = sys.argv[1]
now = datetime.datetime.now(datetime.timezone.utc)
ca_key = ec.generate_private_key(ec.SECP256R1())
ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cf-access-tcp test CA")])
ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
      .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
key = ec.generate_private_key(ec.SECP256R1())
names = [x509.DNSName("team.cloudflareaccess.com"), x509.DNSName("login.cloudflareaccess.org")]
cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "team.cloudflareaccess.com")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False).sign(ca_key, hashes.SHA256()))
open(d + "/ca.pem", "wb").write(ca.public_bytes(serialization.Encoding.PEM))
other_key = ec.generate_private_key(ec.SECP256R1())
other_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "unrelated CA")])
other = (x509.CertificateBuilder().subject_name(other_name).issuer_name(other_name).public_key(other_key.public_key())
         .serial_number(3).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(other_key, hashes.SHA256()))
open(d + "/other-ca.pem", "wb").write(other.public_bytes(serialization.Encoding.PEM))
open(d + "/cert.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open(d + "/key.pem", "wb").write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, body=b""):
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/cdn-cgi/access/login/x?kid=1")
            self.send_header("Set-Cookie", "CF_AppSession=s1; Path=/")
            self.send_header("Set-Cookie", "other=2; Path=/")
            body = b""
        elif self.path == "/hold":
            import time; time.sleep(60)
            self.send_response(200); body = b"held"
        elif self.path == "/big":
            self.send_response(200); body = b"x" * (2 * 1024 * 1024)
        elif self.path == "/big-header":
            self.send_response(200); self.send_header("cf-access-metadata", "a" * (2 * 1024 * 1024)); body = b""
        elif self.path == "/many-headers":
            self.send_response(200)
            for i in range(2000): self.send_header("X-Filler-%d" % i, "y" * 60)
            body = b""
        else:
            self.send_response(200)
            self.send_header("X-Echo-Cookie", self.headers.get("Cookie", ""))
            self.send_header("X-Echo-Meta", self.headers.get("cf-access-metadata-request", ""))
            self.send_header("X-Echo-Method", self.command)
            self.send_header("X-Echo-Host", self.headers.get("Host", ""))
            body = b"hello"
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD": self.wfile.write(body)
    do_GET = reply
    do_HEAD = reply
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(d + "/cert.pem", d + "/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""#

    init() throws {
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", Self.script, temp.path]
        let out = Pipe()
        server.standardOutput = out
        try server.run()
        var text = ""
        while !text.contains("\n") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        port = Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    deinit {
        // SIGKILL: the test threads block SIGTERM, and a child spawned by Foundation inherits that mask.
        kill(server.processIdentifier, SIGKILL)
        server.waitUntilExit()
        temp.remove()
    }

    func client(ca: String = "ca.pem") throws -> CurlHTTPClient {
        CurlHTTPClient(caFile: temp.path + "/" + ca,
                       resolve: [try ResolveOverride.parse("team.cloudflareaccess.com:\(port):127.0.0.1")])
    }

    var base: String { "https://team.cloudflareaccess.com:\(port)" }

    @Test func resolvesRealNameVerifiesAndSendsHeadersAndCookies() async throws {
        #expect(port > 0)
        let answer = try await client().send(HTTPRequest(
            method: "HEAD", url: base + "/", headers: [("cf-access-metadata-request", "true")],
            cookies: [("CF_Authorization", "tok"), ("CF_AppSession", "s")], timeoutSeconds: 10))
        #expect(answer.status == 200)
        #expect(answer.value(of: "x-echo-method") == "HEAD")
        #expect(answer.value(of: "X-Echo-Meta") == "true")
        #expect(answer.value(of: "X-Echo-Cookie") == "CF_Authorization=tok; CF_AppSession=s")
        #expect(answer.value(of: "X-Echo-Host") == "team.cloudflareaccess.com:\(port)")
        let get = try await client().send(HTTPRequest(method: "GET", url: base + "/", timeoutSeconds: 10))
        #expect(get.body == Array("hello".utf8))
    }

    /// `sha256//…` of the server certificate's key, computed by openssl.
    func serverPin() throws -> PublicKeyPin {
        let script = "openssl x509 -in '\(temp.path)/cert.pem' -pubkey -noout | openssl pkey -pubin -outform der"
            + " | openssl dgst -sha256 -binary | base64"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return try #require(try PublicKeyPin.parseList("sha256//" + text.trimmingCharacters(in: .whitespacesAndNewlines)).first)
    }

    @Test("pins (issue 26.4): the host's pinned key passes, another key fails as a pin mismatch, another host is not pinned")
    func pinnedKeys() async throws {
        let right = try serverPin()
        let wrong = try #require(PublicKeyPin(sha256: [UInt8](repeating: 7, count: 32)))
        let resolve = [try ResolveOverride.parse("team.cloudflareaccess.com:\(port):127.0.0.1")]
        func client(_ pins: [PublicKeyPin], host: String) -> CurlHTTPClient {
            CurlHTTPClient(caFile: temp.path + "/ca.pem", resolve: resolve, pins: pins, pinnedHost: host)
        }
        let request = HTTPRequest(method: "GET", url: base + "/", timeoutSeconds: 10)
        #expect(try await client([wrong, right], host: "team.cloudflareaccess.com").send(request).status == 200)
        #expect(try await client([wrong], host: "other.example").send(request).status == 200)
        do {
            _ = try await client([wrong], host: "TEAM.cloudflareaccess.com").send(request)
            Issue.record("a request to a host with other pinned keys went through")
        } catch {
            #expect(error.kind == .tls && error.subject == .pins, "\(error)")
            #expect(error.message.hasPrefix("the edge for team.cloudflareaccess.com presented no pinned key; check the pins"), "\(error.message)")
        }
    }

    @Test func doesNotFollowRedirectsAndKeepsEverySetCookie() async throws {
        let answer = try await client().send(HTTPRequest(method: "GET", url: base + "/redirect", timeoutSeconds: 10))
        #expect(answer.status == 302)
        #expect(answer.value(of: "Location") == "/cdn-cgi/access/login/x?kid=1")
        #expect(answer.values(of: "set-cookie") == ["CF_AppSession=s1; Path=/", "other=2; Path=/"])
    }

    @Test("cancelling the task stops a request the server holds (a transfer poll): kind cancelled, not the answer")
    func cancellationAbortsAHeldRequest() async throws {
        let client = try client()
        let request = HTTPRequest(method: "GET", url: base + "/hold", timeoutSeconds: 90)
        let task = Task { () -> Result<HTTPResponse, TunnelFailure> in
            do throws(TunnelFailure) {
                return .success(try await client.send(request))
            } catch {
                return .failure(error)
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        task.cancel()
        switch await task.value {
        case .success(let answer): Issue.record("the held request ran to its answer (HTTP \(answer.status))")
        case .failure(let failure): #expect(failure.kind == .cancelled, "\(failure)")
        }
        // A cancelled task never starts a transfer.
        let plain = HTTPRequest(method: "GET", url: base + "/", timeoutSeconds: 10)
        let again = Task { () -> TunnelFailure? in
            withUnsafeCurrentTask { $0?.cancel() }
            do throws(TunnelFailure) {
                _ = try await client.send(plain)
                return nil
            } catch {
                return error
            }
        }
        #expect(await again.value?.kind == .cancelled)
    }

    @Test func refusesBodiesOverOneMebibyte() async throws {
        await #expect(throws: TunnelFailure.self) {
            _ = try await self.client().send(HTTPRequest(method: "GET", url: self.base + "/big", timeoutSeconds: 10))
        }
    }

    @Test("a 2 MB header, or 120 KB of headers, is 'response headers over 64 KiB', not 'Out of memory' (12.6)",
          arguments: ["/big-header", "/many-headers"])
    func refusesOversizedHeaders(path: String) async throws {
        do {
            _ = try await client().send(HTTPRequest(method: "GET", url: base + path, timeoutSeconds: 20))
            Issue.record("the answer was accepted")
        } catch let failure as TunnelFailure {
            #expect(failure.message.contains("sent response headers over 64 KiB"), "\(failure.message)")
            #expect(!failure.message.contains("memory"))
            #expect(failure.category == .protocolViolation)
        }
    }

    @Test func refusesAnUntrustedCertificate() async throws {
        let untrusting = try client(ca: "other-ca.pem")
        do {
            _ = try await untrusting.send(HTTPRequest(method: "GET", url: base + "/", timeoutSeconds: 10))
            Issue.record("an untrusted certificate was accepted")
        } catch {
            #expect(error.message.hasPrefix("TLS with team.cloudflareaccess.com failed"), "\(error.message)")
        }
    }

    @Test func withoutResolveTheNameIsNotReached() async throws {
        let plain = CurlHTTPClient(caFile: temp.path + "/ca.pem")
        await #expect(throws: TunnelFailure.self) {
            _ = try await plain.send(HTTPRequest(method: "GET", url: "https://unresolvable.invalid:\(self.port)/", timeoutSeconds: 5))
        }
    }
}
