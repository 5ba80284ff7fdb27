import AccessCore
import Testing

/// How each way a tunnel ends maps to cleanliness, exit status and a plain line (issue 13.3).
@Suite("tunnel ends")
struct TunnelEndTests {
    @Test("clean ends exit 0 and give no failure", arguments: [
        TunnelEnd.closedByLocal(code: 1000), .closedByEdge(code: 1000), .closedByEdge(code: 1001),
        .closedByEdge(code: nil), .shutdown,
    ])
    func clean(end: TunnelEnd) {
        #expect(end.isClean)
        #expect(end.exitStatus == .success)
        #expect(end.failure(host: "h.example") == nil)
    }

    @Test("lost tunnels exit 75, protocol violations 76, local I/O 74")
    func statuses() {
        #expect(TunnelEnd.reset(detail: "Connection reset by peer").exitStatus == .connectionLost)
        #expect(TunnelEnd.keepaliveTimeout(seconds: 90).exitStatus == .connectionLost)
        #expect(TunnelEnd.writeFailed(detail: "x").exitStatus == .connectionLost)
        #expect(TunnelEnd.closedByEdge(code: 1011).exitStatus == .connectionLost)
        #expect(TunnelEnd.protocolViolation(detail: "x").exitStatus == .protocolError)
        #expect(TunnelEnd.localIOFailed(detail: "x").exitStatus == .localIO)
        let refused = TunnelFailure.connectionRefused(address: "127.0.0.1:1")
        #expect(TunnelEnd.failedToOpen(refused).exitStatus == .unavailable)
        #expect(TunnelEnd.failedToOpen(refused).failure(host: "h") == refused)
    }

    @Test("messages are one plain line naming the host and what happened")
    func messages() {
        let reset = TunnelEnd.reset(detail: "Connection reset by peer")
        #expect(reset.message(host: "ssh.example.com")
                == "the edge reset the tunnel to ssh.example.com mid-stream (Connection reset by peer): the connection is lost")
        let failure = TunnelEnd.protocolViolation(detail: "a text frame").failure(host: "ssh.example.com")
        #expect(failure?.category == .protocolViolation)
        #expect(failure?.isRetryable == false)
        #expect(TunnelEnd.keepaliveTimeout(seconds: 90).failure(host: "h")?.category == .transport)
    }

    @Test("every end has its own plain line, each case")
    func everyMessage() {
        let host = "ssh.example.com"
        #expect(TunnelEnd.closedByEdge(code: 1000).message(host: host) == "the edge closed the tunnel to ssh.example.com (code 1000)")
        #expect(TunnelEnd.closedByEdge(code: nil).message(host: host) == "the edge closed the tunnel to ssh.example.com")
        #expect(TunnelEnd.closedByEdge(code: 1011).message(host: host)
            == "the edge closed the tunnel to ssh.example.com with an error (code 1011): the connection is lost")
        #expect(TunnelEnd.writeFailed(detail: "EPIPE").message(host: host)
            == "writing to the edge failed (EPIPE): the tunnel to ssh.example.com is lost")
        #expect(TunnelEnd.localIOFailed(detail: "cannot write to stdout").message(host: host)
            == "cannot write to stdout: the tunnel to ssh.example.com was closed")
        let refused = TunnelFailure.dns(host: host)
        #expect(TunnelEnd.failedToOpen(refused).message(host: host) == refused.message)
        #expect(TunnelEnd.closedByEdge(code: 1011).failure(host: host)?.category == .transport)
    }
}

