import AccessCore
import Testing

/// The upgrade answer as an edge may send it: the 101 (or a refusal) and what follows it.
private let answer101 = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    + "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
/// A binary frame carrying "SSH-2.0-x\r\n", right behind the head.
private let firstFrame: [UInt8] = [0x82, 11] + Array("SSH-2.0-x\r\n".utf8)

@Suite("ResponseHeadReader: an HTTP answer in any pieces")
struct ResponseHeadReaderTests {
    /// Feeds `bytes` in two pieces split at `split`; returns the head and the bytes after it.
    private func read(_ bytes: [UInt8], splitAt split: Int) -> (ResponseHeadReader.Outcome, [UInt8]) {
        var reader = ResponseHeadReader()
        let first = reader.feed(Array(bytes[..<split]))
        if case .complete(_, let consumed) = first {
            return (first, Array(bytes[consumed...]))
        }
        if case .needMore = first {} else { return (first, []) }
        let second = reader.feed(Array(bytes[split...]))
        if case .complete(_, let consumed) = second {
            return (second, Array(bytes[(split + consumed)...]))
        }
        return (second, [])
    }

    @Test("the 101 and the first frame in one piece or split at every offset: the head ends exactly at its empty line")
    func everySplit() {
        let bytes = Array(answer101.utf8) + firstFrame
        for split in 1..<bytes.count {
            let (outcome, after) = read(bytes, splitAt: split)
            guard case .complete(let head, _) = outcome else {
                Issue.record("split at \(split): \(outcome)")
                continue
            }
            #expect(head.status == 101)
            #expect(head.reason == "Switching Protocols")
            #expect(after == firstFrame, "split at \(split)")
        }
    }

    @Test("byte by byte, as a proxy's answer may come")
    func byteByByte() {
        var reader = ResponseHeadReader()
        let bytes = Array("HTTP/1.0 200 Connection established\r\n\r\n".utf8)
        for byte in bytes.dropLast() {
            #expect(reader.feed([byte]) == .needMore)
        }
        guard case .complete(let head, let consumed) = reader.feed([bytes.last!]) else {
            Issue.record("not complete")
            return
        }
        #expect(consumed == 1)
        #expect(head.status == 200)
        #expect(head.fields.isEmpty)
    }

    @Test("header fields: names as sent, values trimmed, looked up without regard to case; bare LF line ends")
    func fields() {
        var reader = ResponseHeadReader()
        let outcome = reader.feed(Array("HTTP/1.1 302\nLocation:  /cdn-cgi/access/login?x \t\nConnection: keep-alive, Upgrade\nX-Empty:\n\nbody".utf8))
        guard case .complete(let head, let consumed) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(consumed == 92)
        #expect(head.status == 302)
        #expect(head.reason.isEmpty)
        #expect(head.value("location") == "/cdn-cgi/access/login?x")
        #expect(head.value("X-EMPTY") == "")
        #expect(head.value("Set-Cookie") == nil)
        #expect(head.fields.first?.name == "Location")
        #expect(head.lists("connection", token: "UPGRADE"))
        #expect(!head.lists("Connection", token: "close"))
        #expect(!head.lists("Upgrade", token: "websocket"))
    }

    @Test("an answer that is not HTTP is named at its first wrong byte, with at most 7 bytes shown", arguments: [
        ("SSH-2.0-OpenSSH_9.2\r\n", "SSH-2.0"),
        ("HTTX/1.1 101", "HTTX/1."),
        ("HTT", nil),
        ("\u{16}\u{03}\u{01}", "\u{16}\u{03}\u{01}"),
    ])
    func notHTTP(_ text: String, _ expected: String?) {
        var reader = ResponseHeadReader()
        let outcome = reader.feed(Array(text.utf8))
        if let expected {
            #expect(outcome == .notHTTP(first: Array(expected.utf8)))
        } else {
            #expect(outcome == .needMore)
        }
    }

    @Test("a mismatch in a later piece still shows the bytes before it")
    func notHTTPAcrossPieces() {
        var reader = ResponseHeadReader()
        #expect(reader.feed(Array("HT".utf8)) == .needMore)
        #expect(reader.bufferedCount == 2)
        #expect(reader.feed(Array("ML>\n".utf8)) == .notHTTP(first: Array("HTML>\n".utf8)))
        // Once decided, the reader keeps its verdict.
        #expect(reader.feed(Array("more".utf8)) == .notHTTP(first: Array("HTML>\n".utf8)))
    }

    @Test("malformed heads are named", arguments: [
        ("HTTP/2 101 Switching\r\n\r\n", "a status line"),
        ("HTTP/1.1 1O1 Switching\r\n\r\n", "a status line"),
        ("HTTP/1.1\r\n\r\n", "a status line"),
        ("HTTP/1.1 1011 x\r\n\r\n", "a status line"),
        ("HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n continued\r\n\r\n", "a folded header line"),
        ("HTTP/1.1 101 OK\r\nno colon here\r\n\r\n", "not \"Name: value\""),
        ("HTTP/1.1 101 OK\r\n: empty name\r\n\r\n", "not \"Name: value\""),
        ("HTTP/1.1 101 OK\r\nBad Name: x\r\n\r\n", "not \"Name: value\""),
    ])
    func malformed(_ text: String, _ expected: String) {
        var reader = ResponseHeadReader()
        guard case .malformed(let why) = reader.feed(Array(text.utf8)) else {
            Issue.record("not malformed: \(text)")
            return
        }
        #expect(why.contains(expected), "\(why)")
    }

    @Test("an endless head stops at the limit")
    func endless() {
        var reader = ResponseHeadReader(limit: 1024)
        #expect(reader.feed(Array("HTTP/1.1 101 Switching Protocols\r\n".utf8)) == .needMore)
        var outcome = ResponseHeadReader.Outcome.needMore
        var fed = 0
        while outcome == .needMore, fed < 4096 {
            outcome = reader.feed(Array("X-Filler: yyyyyyyyyyyyyyyyyyyy\r\n".utf8))
            fed += 32
        }
        #expect(outcome == .tooLarge(limit: 1024))
        #expect(fed < 1100)
        // A head that ends, but past the limit, in one piece.
        var whole = ResponseHeadReader(limit: 1024)
        let long = "HTTP/1.1 101 x\r\nX-Long: " + String(repeating: "y", count: 1100) + "\r\n\r\n"
        #expect(whole.feed(Array(long.utf8)) == .tooLarge(limit: 1024))
    }
}

@Suite("WebSocketUpgrade: the request we write and the verdict on its answer")
struct WebSocketUpgradeTests {
    private func request(extra: [HeaderField] = []) throws -> UpgradeRequest {
        try RequestBuilder.upgradeRequest(origin: try OriginURL.parse("ssh.example.com/path"), userAgent: "ua/1",
                                          serviceToken: nil, accessToken: "tok.en.x", destination: nil,
                                          extraHeaders: extra)
    }

    private func head(_ text: String) -> ResponseHead {
        var reader = ResponseHeadReader()
        guard case .complete(let head, _) = reader.feed(Array(text.utf8)) else { fatalError("bad fixture: \(text)") }
        return head
    }

    @Test("the request: GET path, Host, the protocol headers, then ours in order, and an empty line")
    func requestHead() throws {
        let bytes = WebSocketUpgrade.requestHead(try request(extra: [HeaderField(name: "X-A", value: "1")]),
                                                 host: "ssh.example.com", key: "dGhlIHNhbXBsZSBub25jZQ==")
        #expect(String(decoding: bytes, as: UTF8.self) == "GET /path HTTP/1.1\r\nHost: ssh.example.com\r\n"
            + "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            + "Sec-WebSocket-Version: 13\r\nUser-Agent: ua/1\r\nCf-Access-Token: tok.en.x\r\nX-A: 1\r\n\r\n")
    }

    @Test("a 101 with the accept value of RFC 6455's example opens the WebSocket")
    func accepted() {
        #expect(WebSocketUpgrade.judge(head(answer101), expectedAccept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") == .accepted)
        let lowerCase = "HTTP/1.1 101 x\r\nupgrade: WebSocket\r\nconnection: keep-alive, upgrade\r\n"
            + "sec-websocket-accept: A=\r\nSec-WebSocket-Extensions:\r\n\r\n"
        #expect(WebSocketUpgrade.judge(head(lowerCase), expectedAccept: "A=") == .accepted)
    }

    @Test("a 101 that does not open a WebSocket says what is wrong", arguments: [
        ("HTTP/1.1 101 x\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: A=\r\n\r\n", "without \"Upgrade: websocket\""),
        ("HTTP/1.1 101 x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: A=\r\n\r\n", "without \"Upgrade: websocket\""),
        ("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: A=\r\n\r\n", "without \"Connection: Upgrade\""),
        ("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: B=\r\n\r\n", "a wrong Sec-WebSocket-Accept"),
        ("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", "a wrong Sec-WebSocket-Accept"),
        ("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: A=\r\n"
            + "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n", "an extension we did not ask for"),
        ("HTTP/1.1 101 x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: A=\r\n"
            + "Sec-WebSocket-Protocol: chat\r\n\r\n", "a subprotocol we did not ask for"),
    ])
    func broken(_ text: String, _ expected: String) {
        guard case .broken(let what) = WebSocketUpgrade.judge(head(text), expectedAccept: "A=") else {
            Issue.record("not broken: \(text)")
            return
        }
        #expect(what.contains(expected), "\(what)")
    }

    @Test("any other status is a refusal, with its Location")
    func refused() {
        let login = "HTTP/1.1 302 Found\r\nLocation: https://t.cloudflareaccess.com/cdn-cgi/access/login/x\r\n\r\n"
        #expect(WebSocketUpgrade.judge(head(login), expectedAccept: "A=")
            == .refused(status: 302, location: "https://t.cloudflareaccess.com/cdn-cgi/access/login/x"))
        #expect(WebSocketUpgrade.judge(head("HTTP/1.1 403 Forbidden\r\n\r\n"), expectedAccept: "A=")
            == .refused(status: 403, location: nil))
    }

    @Test("CONNECT asks the proxy for host:port")
    func proxyConnect() {
        #expect(String(decoding: WebSocketUpgrade.proxyConnectHead(target: "[::1]:443"), as: UTF8.self)
            == "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\nUser-Agent: \(Version.userAgent)\r\n\r\n")
    }
}
