@testable import AccessTransport
import Testing

/// The keepalive decisions, tick by tick, without sockets (issues 11.4, 12.13, 13.2).
@Suite("keepalive state")
struct KeepaliveStateTests {
    @Test("an idle tunnel whose edge answers every ping is pinged at every interval (a pong is not activity)")
    func idlePingsEveryInterval() {
        var state = KeepaliveState()
        var actions: [KeepaliveState.Action] = []
        for _ in 0..<5 {
            actions.append(state.tick(sent: 0, received: 0))
            state.heardFromEdge()   // the pong
        }
        #expect(actions == Array(repeating: .ping, count: 5))
    }

    @Test("data both ways: no ping")
    func busyNoPing() {
        var state = KeepaliveState()
        state.heardFromEdge()
        #expect(state.tick(sent: 10, received: 10) == .none)
        state.heardFromEdge()
        #expect(state.tick(sent: 20, received: 30) == .none)
    }

    @Test("an idle tunnel whose edge never answers: three pings, then close")
    func deadIdleEdge() {
        var state = KeepaliveState()
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .close)
    }

    @Test("sending all the time to an edge that says nothing: pinged each interval, closed after three unanswered pings")
    func deadEdgeWhileSending() {
        var state = KeepaliveState()
        #expect(state.tick(sent: 100, received: 0) == .ping)
        #expect(state.tick(sent: 200, received: 0) == .ping)
        #expect(state.tick(sent: 300, received: 0) == .ping)
        #expect(state.tick(sent: 400, received: 0) == .close)
    }

    @Test("an upload to a live edge that only answers pings stays open")
    func uploadToQuietLiveEdge() {
        var state = KeepaliveState()
        for round in 1...10 {
            let action = state.tick(sent: round * 100, received: 0)
            #expect(action != .close)
            if action == .ping { state.heardFromEdge() }
        }
    }

    @Test("a word from the edge resets the count")
    func heardResets() {
        var state = KeepaliveState()
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .ping)
        state.heardFromEdge()
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .ping)
        #expect(state.tick(sent: 0, received: 0) == .close)
    }
}
