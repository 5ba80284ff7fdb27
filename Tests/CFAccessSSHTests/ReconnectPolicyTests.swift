import CFAccessSSH
import Testing

/// The reconnect decisions (``SSHReconnection``) and the keepalive rule (``SSHKeepalive``): pure
/// values, no clock, no connection.
@Suite("Reconnect and keepalive decisions")
struct ReconnectPolicyTests {
    private let lost = SSHChannelEnd.lost(SSHFailure(.connectionLost, "Connection lost: the tunnel closed"))

    @Test("a lost connection is retried after 1 s, 5 s and 15 s, then given up after 3 attempts")
    func defaultBackoff() {
        var reconnection = SSHReconnection(policy: SSHReconnectPolicy())
        #expect(reconnection.channelEnded(lost) == .reconnect(attempt: 1, of: 3, after: .seconds(1)))
        #expect(reconnection.attemptFailed() == .reconnect(attempt: 2, of: 3, after: .seconds(5)))
        #expect(reconnection.attemptFailed() == .reconnect(attempt: 3, of: 3, after: .seconds(15)))
        #expect(reconnection.attemptFailed() == .giveUp(attempts: 3))
        #expect(reconnection.attemptsMade == 3)
    }

    @Test("after a successful reconnect, the next loss starts again from the first wait")
    func reconnectedResets() {
        var reconnection = SSHReconnection(policy: SSHReconnectPolicy())
        _ = reconnection.channelEnded(lost)
        _ = reconnection.attemptFailed()
        reconnection.reconnected()
        #expect(reconnection.attemptsMade == 0)
        #expect(reconnection.channelEnded(lost) == .reconnect(attempt: 1, of: 3, after: .seconds(1)))
    }

    @Test("only a lost connection counts: an exit, a signal, a local close or a local write failure finishes")
    func whatCountsAsLoss() {
        let policy = SSHReconnectPolicy()
        for end in [SSHChannelEnd.exited(0), .exited(255), .signalled("TERM"), .closed, .localOutputFailed("Broken pipe")] {
            #expect(!policy.isConnectionLoss(end), "\(end)")
            var reconnection = SSHReconnection(policy: policy)
            #expect(reconnection.channelEnded(end) == .finish, "\(end)")
        }
        #expect(policy.isConnectionLoss(lost))
        #expect(policy.isConnectionLoss(.lost(SSHFailure(.connectionLost, "Connection lost: no answer to keepalives for 91 s"))))
    }

    @Test("never reconnects: a loss finishes at once; other waits are followed as given")
    func otherPolicies() {
        var never = SSHReconnection(policy: .never)
        #expect(never.channelEnded(lost) == .finish)
        var custom = SSHReconnection(policy: SSHReconnectPolicy(delays: [.milliseconds(250)]))
        #expect(custom.channelEnded(lost) == .reconnect(attempt: 1, of: 1, after: .milliseconds(250)))
        #expect(custom.attemptFailed() == .giveUp(attempts: 1))
    }

    @Test("keepalives: every 10 s by default; the connection is lost after three silent intervals and a second, not before")
    func keepaliveLoss() {
        let standard = SSHKeepalive()
        #expect(standard.isEnabled)
        #expect(standard.effectiveInterval == .seconds(10))
        #expect(standard.lossAfter == .seconds(31))
        #expect(!standard.isConnectionLost(silence: .seconds(31)))
        #expect(standard.isConnectionLost(silence: .seconds(31) + .milliseconds(1)))

        // libssh2 sends at least every 2 s: an interval of 1 s is 2 s, so lost after 7 s.
        let fast = SSHKeepalive(interval: .seconds(1))
        #expect(fast.effectiveInterval == .seconds(2))
        #expect(!fast.isConnectionLost(silence: .seconds(7)))
        #expect(fast.isConnectionLost(silence: .milliseconds(7_001)))

        // Fractions round up to whole seconds; the count of unanswered ones is settable.
        #expect(SSHKeepalive(interval: .milliseconds(2_500)).effectiveInterval == .seconds(3))
        let patient = SSHKeepalive(interval: .seconds(10), unansweredLimit: 5)
        #expect(!patient.isConnectionLost(silence: .seconds(51)))
        #expect(patient.isConnectionLost(silence: .seconds(52)))
    }

    @Test("keepalives off: silence never means a loss")
    func keepaliveOff() {
        for off in [SSHKeepalive.off, SSHKeepalive(interval: .zero), SSHKeepalive(interval: .seconds(-5))] {
            #expect(!off.isEnabled)
            #expect(off.effectiveInterval == .zero)
            #expect(!off.isConnectionLost(silence: .seconds(86_400)))
            #expect(off.lossAfter == nil)
            #expect(off.remainingBeforeLoss(silence: .seconds(5)) == nil)
        }
    }

    @Test("the time left before silence is a loss (what a running channel sleeps at most): three intervals and a second, counted down, never below zero")
    func remainingBeforeLoss() {
        let standard = SSHKeepalive(interval: .seconds(30))
        // Issue 16 point 11: the check used to wait for the next keepalive (≈ 120 s with 30 s).
        #expect(standard.remainingBeforeLoss(silence: .zero) == .seconds(91))
        #expect(standard.remainingBeforeLoss(silence: .seconds(60)) == .seconds(31))
        #expect(standard.remainingBeforeLoss(silence: .milliseconds(90_500)) == .milliseconds(500))
        #expect(standard.remainingBeforeLoss(silence: .seconds(200)) == .zero)
        let fast = SSHKeepalive(interval: .seconds(1), unansweredLimit: 2)
        #expect(fast.remainingBeforeLoss(silence: .seconds(1)) == .seconds(4))
    }
}
