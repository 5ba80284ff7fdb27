@testable import AccessTransport
import AccessCore
import Testing

/// The bridge's decisions without sockets (issue 19.6): events in, actions out.
@Suite("bridge state machine")
struct BridgeStateMachineTests {
    static let second: UInt64 = 1_000_000_000
    static let settings: BridgeStateMachine.Settings = {
        var s = BridgeStateMachine.Settings()
        s.highWatermark = 1000
        s.lowWatermark = 200
        s.keepaliveSeconds = 10
        s.lingerNanoseconds = 5 * second
        s.closeWaitNanoseconds = 2 * second
        return s
    }()

    /// A machine with an open WebSocket, at t = 0.
    private func open(_ settings: BridgeStateMachine.Settings = settings) -> BridgeStateMachine {
        var machine = BridgeStateMachine(settings: settings)
        _ = machine.handle(.established, now: 0)
        return machine
    }

    private static let close1000: BridgeStateMachine.Action = .sendControl(opcode: WebSocketFrames.opClose, payload: [0x03, 0xE8])
    private static let close1001: BridgeStateMachine.Action = .sendControl(opcode: WebSocketFrames.opClose, payload: [0x03, 0xE9])

    @Test("dialling: nothing is read; the WebSocket opens with the keepalive armed")
    func established() {
        var machine = BridgeStateMachine(settings: Self.settings)
        #expect(!machine.readsLocal && !machine.readsEdge)
        #expect(machine.handle(.established, now: 7) == [.armTimer])
        #expect(machine.keepaliveDeadline == 7 + 10 * Self.second)
        #expect(machine.readsLocal && machine.readsEdge)
        // A second `established` (a late callback) changes nothing.
        #expect(machine.handle(.established, now: 9) == [])
    }

    @Test("one watermark rule for both queues: pause at the high mark, resume at the low one, not in between")
    func watermarks() {
        var machine = open()
        #expect(machine.handle(.toOriginWritten(count: 999, appendedData: true), now: 1) == [])
        #expect(machine.readsLocal)
        _ = machine.handle(.toOriginWritten(count: 1000, appendedData: true), now: 1)
        #expect(!machine.readsLocal, "the local side is paused above the high watermark")
        _ = machine.handle(.toOriginFlushed(count: 500), now: 2)
        #expect(!machine.readsLocal, "still paused between the marks")
        _ = machine.handle(.toOriginFlushed(count: 200), now: 3)
        #expect(machine.readsLocal)

        _ = machine.handle(.toLocalWritten(count: 1500), now: 4)
        #expect(!machine.readsEdge && machine.edgeReadPaused)
        #expect(machine.handle(.toLocalFlushed(count: 300), now: 5) == [])
        // Back at the low mark: reading resumes at once (OpenSSL may hold bytes).
        #expect(machine.handle(.toLocalFlushed(count: 100), now: 6) == [.readEdge])
        #expect(machine.readsEdge)
    }

    @Test("a ping is answered at once when nothing waits for the edge")
    func pingAnswered() {
        var machine = open()
        #expect(machine.handle(.ping([1, 2]), now: 1) == [.sendControl(opcode: WebSocketFrames.opPong, payload: [1, 2])])
    }

    @Test("pings while our bytes wait: only the newest is owed, answered when the queue drains; reading pauses only without data queued")
    func owedPong() {
        var machine = open()
        // Only control frames wait (our earlier pong): reading the edge pauses while a pong is owed.
        _ = machine.handle(.toOriginWritten(count: 50, appendedData: false), now: 1)
        #expect(machine.handle(.ping([1]), now: 1) == [])
        #expect(machine.handle(.ping([2]), now: 1) == [])
        #expect(machine.owedPong == [2])
        #expect(!machine.readsEdge, "a flood of pings from an edge that does not read stops at the socket buffers")
        #expect(machine.handle(.toOriginFlushed(count: 0), now: 2)
            == [.sendControl(opcode: WebSocketFrames.opPong, payload: [2]), .readEdge])
        #expect(machine.owedPong == nil && machine.readsEdge)

        // Data of ours waits: the pause is not taken (it could deadlock an echo-shaped flow).
        _ = machine.handle(.toOriginWritten(count: 500, appendedData: true), now: 3)
        _ = machine.handle(.ping([3]), now: 3)
        #expect(machine.readsEdge)
    }

    @Test("a valid Close from the edge is echoed; the TLS stream ends (close_notify) once the echo has left")
    func edgeClose() {
        var machine = open()
        let actions = machine.handle(.close([0x03, 0xE8]), now: 1)
        #expect(actions == [Self.close1000, .armTimer])
        #expect(machine.readerStopped)
        #expect(machine.end == .closedByEdge(code: 1000))
        #expect(machine.closeDeadline == 1 + 2 * Self.second)
        // The echo left in full: the edge's side is torn down, then the local side closes.
        #expect(machine.handle(.toOriginWritten(count: 0, appendedData: false), now: 1)
            == [.tearDownEdge(closeNotify: true), .killConnection, .closeLocal])
        #expect(machine.handle(.edgeReleased, now: 2) == [.finished(.closedByEdge(code: 1000))])
    }

    @Test("a malformed Close is answered with 1002 and ends as a protocol violation")
    func malformedClose() {
        var machine = open()
        #expect(machine.handle(.close([0x03]), now: 1)
            == [.sendControl(opcode: WebSocketFrames.opClose, payload: [0x03, 0xEA]), .armTimer])
        #expect(machine.end == .protocolViolation(detail: "a Close frame with a 1-byte payload"))
    }

    @Test("our Close first, the edge's answer second: torn down when it comes and nothing waits")
    func closeAnswered() {
        var machine = open()
        _ = machine.handle(.localEOF(peerGone: true), now: 1)
        #expect(machine.closeSent)
        _ = machine.handle(.toOriginWritten(count: 0, appendedData: false), now: 1)
        #expect(machine.edgeIsOpen, "only our Close is out")
        #expect(machine.handle(.close([0x03, 0xE8]), now: 2) == [.tearDownEdge(closeNotify: true), .killConnection])
        #expect(machine.end == .closedByLocal(code: 1000))
    }

    @Test("local EOF: the Close waits for the linger while the edge's bytes still arrive; then Close 1000")
    func halfCloseLinger() {
        var machine = open()
        #expect(machine.handle(.localEOF(peerGone: false), now: Self.second) == [.armTimer])
        #expect(machine.local == .inputEnded)
        #expect(!machine.readsLocal && machine.readsEdge && machine.acceptsEdgeData)
        #expect(machine.lingerDeadline == 6 * Self.second)
        #expect(machine.handle(.timer, now: 5 * Self.second) == [.armTimer])
        #expect(machine.handle(.timer, now: 6 * Self.second) == [.closeLocal, Self.close1000, .armTimer])
        #expect(machine.end == .closedByLocal(code: 1000))
        #expect(!machine.acceptsEdgeData)
    }

    @Test("local EOF, then the edge's reply cut short: the tunnel ends as it would with the local side open (issue 28.2)",
          arguments: [
              (BridgeStateMachine.Event.edgeReadEnded("the connection ended without a WebSocket Close"),
               TunnelEnd.reset(detail: "the connection ended without a WebSocket Close")),
              (.edgeReadEnded("Connection reset by peer"), .reset(detail: "Connection reset by peer")),
              (.close([0x03, 0xF3]), .closedByEdge(code: 1011)),
              (.violation("a masked frame"), .protocolViolation(detail: "a masked frame")),
              (.edgeWriteFailed(.writeFailed(detail: "Broken pipe")), .writeFailed(detail: "Broken pipe")),
          ])
    func halfCloseThenFailure(event: BridgeStateMachine.Event, expected: TunnelEnd) {
        var machine = open()
        _ = machine.handle(.localEOF(peerGone: false), now: Self.second)
        #expect(machine.end == nil, "a half-close is not an end yet")
        _ = machine.handle(event, now: 2 * Self.second)
        #expect(machine.end == expected)
        #expect(machine.end?.isClean == false)
    }

    @Test("local EOF, then the edge's clean Close or the linger's end: a clean end")
    func halfCloseThenCleanEnd() {
        var byEdge = open()
        _ = byEdge.handle(.localEOF(peerGone: false), now: Self.second)
        _ = byEdge.handle(.close([0x03, 0xE8]), now: 2 * Self.second)
        #expect(byEdge.end == .closedByEdge(code: 1000))
        #expect(byEdge.end?.isClean == true)
        var lingered = open()
        _ = lingered.handle(.localEOF(peerGone: false), now: Self.second)
        _ = lingered.handle(.timer, now: 6 * Self.second)
        #expect(lingered.end == .closedByLocal(code: 1000))
    }

    @Test("local EOF without a linger, or a local side that hung up, closes at once")
    func noLinger() {
        var settings = Self.settings
        settings.lingerNanoseconds = 0
        var machine = open(settings)
        #expect(machine.handle(.localEOF(peerGone: false), now: 1) == [.closeLocal, Self.close1000, .armTimer])
        var other = open()
        #expect(other.handle(.localHungUp, now: 1) == [.closeLocal, Self.close1000, .armTimer])
    }

    @Test("a failed local write ends the tunnel as a local I/O failure")
    func localFailure() {
        var machine = open()
        _ = machine.handle(.localFailed("writing to the local connection failed: Broken pipe"), now: 1)
        #expect(machine.end == .localIOFailed(detail: "writing to the local connection failed: Broken pipe"))
        #expect(machine.local == .closed && machine.closeSent)
    }

    @Test("a text frame closes with 1003; a violation with 1002 and stops the reader")
    func badFrames() {
        var machine = open()
        #expect(machine.handle(.text, now: 1) == [.sendControl(opcode: WebSocketFrames.opClose, payload: [0x03, 0xEB]), .armTimer])
        #expect(machine.end == .protocolViolation(detail: "a text frame; only binary frames carry tunnel bytes"))
        #expect(!machine.readerStopped)
        var other = open()
        _ = other.handle(.violation("a frame with unknown opcode 3"), now: 1)
        #expect(other.readerStopped)
        #expect(other.end == .protocolViolation(detail: "a frame with unknown opcode 3"))
    }

    @Test("the edge that never answers our Close is cut after the close wait")
    func closeWait() {
        var machine = open()
        _ = machine.handle(.shutdown, now: Self.second)
        #expect(machine.handle(.timer, now: 2 * Self.second) == [.armTimer])
        #expect(machine.handle(.timer, now: 3 * Self.second) == [.tearDownEdge(closeNotify: true), .killConnection])
        #expect(machine.end == .shutdown)
    }

    @Test("keepalive: a ping per silent interval; three unanswered pings close the tunnel with 1001")
    func keepalive() {
        var machine = open()
        let ping: BridgeStateMachine.Action = .sendControl(opcode: WebSocketFrames.opPing, payload: [])
        #expect(machine.handle(.timer, now: 10 * Self.second) == [ping, .armTimer])
        #expect(machine.handle(.timer, now: 20 * Self.second) == [ping, .armTimer])
        #expect(machine.handle(.timer, now: 30 * Self.second) == [ping, .armTimer])
        let last = machine.handle(.timer, now: 40 * Self.second)
        #expect(last.contains(Self.close1001))
        #expect(machine.end == .keepaliveTimeout(after: .seconds(30)))
        // A live edge answers: no close.
        var live = open()
        for tick in 1...5 {
            _ = live.handle(.heardFromEdge, now: UInt64(tick) * 10 * Self.second - 1)
            #expect(live.handle(.timer, now: UInt64(tick) * 10 * Self.second) == [ping, .armTimer])
        }
        #expect(live.end == nil)
    }

    @Test("a TLS stream that ends: a reset, unless the edge's Close came first; a failed write notes its reason")
    func edgeEnds() {
        var machine = open()
        #expect(machine.handle(.edgeReadEnded("Connection reset by peer"), now: 1)
            == [.tearDownEdge(closeNotify: false), .killConnection, .closeLocal])
        #expect(machine.end == .reset(detail: "Connection reset by peer"))
        var written = open()
        _ = written.handle(.edgeWriteFailed(.writeFailed(detail: "TLS error 1")), now: 1)
        #expect(written.end == .writeFailed(detail: "TLS error 1"))
    }

    @Test("the local side keeps what is queued for it after the edge is gone, then closes")
    func drainAfterEdge() {
        var machine = open()
        _ = machine.handle(.toLocalWritten(count: 300), now: 1)
        #expect(machine.handle(.edgeHungUp, now: 2) == [.tearDownEdge(closeNotify: false), .killConnection])
        #expect(machine.local == .open)
        #expect(machine.handle(.toLocalFlushed(count: 0), now: 3) == [.closeLocal])
        #expect(machine.handle(.edgeReleased, now: 4) == [.finished(.reset(detail: "the WebSocket closed"))])
        // A socket released while the stream was open (never by our own hand today) ends both sides.
        var abrupt = open()
        #expect(abrupt.handle(.edgeReleased, now: 1)
            == [.tearDownEdge(closeNotify: false), .closeLocal, .finished(.reset(detail: "the WebSocket closed"))])
    }

    @Test("shutdown while dialling gives the dial up; a failed dial ends without a second report")
    func dialEnds() {
        var dialling = BridgeStateMachine(settings: Self.settings)
        #expect(dialling.handle(.shutdown, now: 1) == [.closeLocal, .abortDial])
        #expect(dialling.handle(.edgeReleased, now: 2) == [.finished(.shutdown)])
        var failed = BridgeStateMachine(settings: Self.settings)
        #expect(failed.handle(.dialFailed(released: false), now: 1) == [])
        #expect(failed.handle(.edgeReleased, now: 2) == [.finished(nil)])
        #expect(failed.handle(.edgeReleased, now: 3) == [], "finished once")
        var released = BridgeStateMachine(settings: Self.settings)
        #expect(released.handle(.dialFailed(released: true), now: 1) == [.finished(nil)])
    }

    @Test("bytes are counted each way; after our Close, edge data has nowhere to go")
    func counts() {
        var machine = open()
        _ = machine.handle(.localData(count: 10), now: 1)
        _ = machine.handle(.edgeData(count: 7), now: 1)
        #expect(machine.bytesToOrigin == 10 && machine.bytesFromOrigin == 7)
        _ = machine.handle(.shutdown, now: 2)
        #expect(!machine.acceptsEdgeData)
    }
}
