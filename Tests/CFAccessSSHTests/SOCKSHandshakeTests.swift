@testable import CFAccessSSH
import Testing

/// The SOCKS side of a dynamic forward (issue 25.2.3): what ssh's -D accepts, byte for byte.
@Suite("SOCKS handshake of -D")
struct SOCKSHandshakeTests {
    @Test("SOCKS5: the greeting answered with no authentication, then CONNECT by IPv4, name or IPv6; bytes split anywhere; data after the request kept")
    func socks5() {
        var split = SOCKSHandshake()
        let greeting: [UInt8] = [5, 2, 2, 0]
        let request: [UInt8] = [5, 1, 0, 3, 8] + Array("intranet".utf8) + [0x1f, 0x90] + Array("GET".utf8)
        #expect(split.feed(greeting.prefix(1)) == .needMore(send: []))
        #expect(split.feed(greeting.dropFirst(1)) == .needMore(send: [5, 0]))
        #expect(split.feed(request.prefix(6)) == .needMore(send: []))
        #expect(split.feed(request.dropFirst(6)) == .connect(host: "intranet", port: 8080))
        #expect(split.takeRest() == Array("GET".utf8))
        #expect(split.reply(succeeded: true) == [5, 0, 0, 1, 0, 0, 0, 0, 0, 0])
        #expect(split.reply(succeeded: false)[1] == 5)

        var together = SOCKSHandshake()
        #expect(together.feed([5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 7, 0, 22]) == .connect(host: "10.0.0.7", port: 22))
        #expect(together.reply(succeeded: true) == [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0], "the method reply first, since it was not sent")

        var v6 = SOCKSHandshake()
        _ = v6.feed([5, 1, 0])
        let address: [UInt8] = [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1]
        #expect(v6.feed([5, 1, 0, 4] + address + [0, 80]) == .connect(host: "2001:db8:0:0:0:0:0:1", port: 80))
    }

    @Test("SOCKS4 and 4a: CONNECT by address or by name after the user id")
    func socks4() {
        var plain = SOCKSHandshake()
        #expect(plain.feed([4, 1, 0, 80, 192, 168, 1, 2] + Array("me".utf8) + [0]) == .connect(host: "192.168.1.2", port: 80))
        #expect(plain.reply(succeeded: true) == [0, 0x5a, 0, 0, 0, 0, 0, 0])
        var named = SOCKSHandshake()
        #expect(named.feed([4, 1, 0, 22, 0, 0, 0, 1, 0] + Array("git.internal".utf8)) == .needMore(send: []))
        #expect(named.feed([0]) == .connect(host: "git.internal", port: 22))
    }

    @Test("refused: not SOCKS, no acceptable method, another command, another address type; each with its reply")
    func refusals() {
        var http = SOCKSHandshake()
        guard case .refused(let nothing, _) = http.feed(Array("GET / HTTP/1.1\r\n".utf8)) else { Issue.record("accepted HTTP"); return }
        #expect(nothing.isEmpty)
        var password = SOCKSHandshake()
        guard case .refused(let noMethod, _) = password.feed([5, 1, 2]) else { Issue.record("accepted a password method"); return }
        #expect(noMethod == [5, 0xff])
        var bind = SOCKSHandshake()
        guard case .refused(let bindReply, let reason) = bind.feed([5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80]) else {
            Issue.record("accepted BIND"); return
        }
        #expect(bindReply.starts(with: [5, 0, 5, 7]) && reason.contains("only CONNECT"))
        var odd = SOCKSHandshake()
        guard case .refused(let typeReply, _) = odd.feed([5, 1, 0, 5, 1, 0, 9, 0, 0]) else { Issue.record("accepted type 9"); return }
        #expect(typeReply.starts(with: [5, 0, 5, 8]))
    }

    @Test("-D [bind_address:]port parses as ssh's; a forward says it is dynamic")
    func parsing() throws {
        let plain = try SSHLocalForward(parsingDynamic: "1080")
        #expect(plain.isDynamic && plain.port == 1080 && plain.bindAddress == nil && plain.description == "1080")
        #expect(try SSHLocalForward(parsingDynamic: "*:1080").bindAddress == "*")
        #expect(try SSHLocalForward(parsingDynamic: "[::1]:1080").bindAddress == "::1")
        #expect(throws: SSHFailure.self) { try SSHLocalForward(parsingDynamic: "socks") }
    }
}
