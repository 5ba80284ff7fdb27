import CFAccessSSH
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `-L` specifications (``SSHLocalForward``) and the listening sockets (``SSHForwardListener``).
@Suite("Local forwards: specifications and listeners")
struct LocalForwardTests {
    @Test("[bind_address:]port:host:hostport as OpenSSH reads it, IPv6 in brackets; the text round-trips")
    func parsing() throws {
        let plain = try SSHLocalForward(parsing: "8080:intranet.example:80")
        #expect(plain == SSHLocalForward(bindAddress: nil, port: 8080, host: "intranet.example", hostPort: 80))
        #expect(plain.description == "8080:intranet.example:80")
        #expect(try SSHLocalForward(parsing: "127.0.0.1:8080:localhost:5432")
                == SSHLocalForward(bindAddress: "127.0.0.1", port: 8080, host: "localhost", hostPort: 5432))
        let six = try SSHLocalForward(parsing: "[::1]:8080:[2001:db8::1]:443")
        #expect(six == SSHLocalForward(bindAddress: "::1", port: 8080, host: "2001:db8::1", hostPort: 443))
        #expect(six.description == "[::1]:8080:[2001:db8::1]:443")
        #expect(try SSHLocalForward(parsing: ":8080:h:80").bindAddress == "*")
        #expect(try SSHLocalForward(parsing: "*:8080:h:80").bindAddress == "*")
        #expect(try SSHLocalForward(parsing: "0:h:80").port == 0)
    }

    @Test("bad specifications are refused with OpenSSH's words")
    func badSpecifications() {
        for bad in ["8080:host", "8080", "x:host:80", "8080::80", "70000:h:80", "8080:h:0", "8080:h:http",
                    "[::1:8080:h:80", "a:b:8080:h:80", "8080:two words:80", ""] {
            #expect(throws: SSHFailure(.configuration, "Bad local forwarding specification '\(bad)'"), "\(bad)") {
                _ = try SSHLocalForward(parsing: bad)
            }
        }
    }

    @Test("a listener binds the loopback addresses by default (a free port for 0); a taken port is refused with the reason")
    func listening() throws {
        let first = try SSHForwardListener(SSHLocalForward(port: 0, host: "h", hostPort: 80))
        defer { first.close() }
        #expect(first.port > 0)
        #expect(first.addresses.contains("127.0.0.1:\(first.port)"))
        #expect(first.addresses.allSatisfy { $0.hasPrefix("127.0.0.1:") || $0.hasPrefix("[::1]:") }, "\(first.addresses)")
        do {
            _ = try SSHForwardListener(SSHLocalForward(bindAddress: "127.0.0.1", port: first.port, host: "h", hostPort: 80))
            Issue.record("a second listener got the same port")
        } catch {
            #expect(error.kind == .localIO)
            #expect(error.message == "Cannot listen on 127.0.0.1:\(first.port): Address already in use", "\(error.message)")
        }
        // A connection reaches the listening socket (the session accepts it later).
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(first.port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(connected == 0)
        first.close()
        first.close()
    }
}

/// `-R` specifications (``SSHRemoteForward``).
@Suite("Remote forwards: specifications")
struct RemoteForwardTests {
    @Test("[bind_address:]port:host:hostport as OpenSSH reads it, IPv6 in brackets, port 0 for one the server picks; the text round-trips")
    func parsing() throws {
        let plain = try SSHRemoteForward(parsing: "8080:localhost:3000")
        #expect(plain == SSHRemoteForward(port: 8080, host: "localhost", hostPort: 3000))
        #expect(plain.description == "8080:localhost:3000")
        let six = try SSHRemoteForward(parsing: "[::1]:0:[2001:db8::1]:443")
        #expect(six == SSHRemoteForward(bindAddress: "::1", port: 0, host: "2001:db8::1", hostPort: 443))
        #expect(six.description == "[::1]:0:[2001:db8::1]:443")
        #expect(try SSHRemoteForward(parsing: "*:80:h:80").bindAddress == "*")
        #expect(try SSHRemoteForward(parsing: ":80:h:80").bindAddress == "*")
    }

    @Test("bad specifications are refused with OpenSSH's words; a remote dynamic forward (SOCKS) is refused by name")
    func badSpecifications() {
        for bad in ["8080:host", "x:host:80", "8080::80", "70000:h:80", "8080:h:0", "[::1:8080:h:80", "a:b:8080:h:80", ""] {
            #expect(throws: SSHFailure(.configuration, "Bad remote forwarding specification '\(bad)'"), "\(bad)") {
                _ = try SSHRemoteForward(parsing: bad)
            }
        }
        for dynamic in ["1080", "127.0.0.1:1080"] {
            do {
                _ = try SSHRemoteForward(parsing: dynamic)
                Issue.record("\(dynamic) was accepted")
            } catch {
                #expect(error.message.hasPrefix("Remote dynamic forwarding (-R '\(dynamic)'"), "\(error.message)")
            }
        }
    }
}
