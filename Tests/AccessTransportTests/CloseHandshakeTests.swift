@testable import AccessTransport
import Testing

/// The Close handshake decisions without sockets (issues 11.6, 13.2).
@Suite("Close handshake")
struct CloseHandshakeTests {
    @Test("we close first: one Close with our code, then the edge's answer completes it")
    func weCloseFirst() {
        var close = CloseHandshake()
        #expect(close.close(code: 1000) == .sendClose([0x03, 0xE8]))
        #expect(close.close(code: 1001) == .none, "only one Close is sent")
        #expect(!close.isComplete)
        let (verdict, action) = close.receive([0x03, 0xE8])
        #expect(verdict == .valid(code: 1000))
        #expect(action == .none)
        #expect(close.isComplete)
    }

    @Test("the edge closes first: its code is echoed")
    func edgeClosesFirst() {
        var close = CloseHandshake()
        let (verdict, action) = close.receive([0x03, 0xE9] + Array("bye".utf8))
        #expect(verdict == .valid(code: 1001))
        #expect(action == .sendClose([0x03, 0xE9]))
        #expect(close.isComplete)
    }

    @Test("an empty Close is valid and answered with an empty Close")
    func emptyClose() {
        var close = CloseHandshake()
        let (verdict, action) = close.receive([])
        #expect(verdict == .valid(code: nil))
        #expect(action == .sendClose([]))
    }

    @Test("malformed Close frames are answered with 1002", arguments: [
        [0x03] as [UInt8], [0x03, 0xED], [0x03, 0xEE], [0x03, 0xEC], [0x03, 0xF7], [0x00, 0x00], [0x03, 0xE8, 0xFF],
    ])
    func malformed(payload: [UInt8]) {
        var close = CloseHandshake()
        let (verdict, action) = close.receive(payload)
        if case .malformed = verdict {} else { Issue.record("\(payload) should be malformed, got \(verdict)") }
        #expect(action == .sendClose([0x03, 0xEA]))
    }

    @Test("codes a peer may send", arguments: [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999] as [UInt16])
    func allowedCodes(code: UInt16) {
        #expect(CloseHandshake.check(CloseHandshake.payload(code)) == .valid(code: code))
    }
}
