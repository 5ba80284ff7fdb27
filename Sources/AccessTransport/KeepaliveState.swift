/// The keepalive of one tunnel as a value: every timer tick goes in, what to do comes out.
///
/// Two questions, asked once per interval:
/// - **Silence** (no data either way since the last tick): send a ping, so an idle tunnel is
///   pinged every interval. A pong is not data: it does not make the tunnel "active", so the
///   next idle interval pings again (issue 11.4).
/// - **Liveness** (anything at all from the edge: data, pong, any frame): an interval in which
///   the edge said nothing sends a ping too — even while we are sending, because bytes we write
///   may only be filling buffers towards a dead edge (issue 12.13). When `deadAfter` pings in a
///   row went unanswered (the first of them for `deadAfter` intervals), the tunnel is closed. A
///   live edge answers, so a busy upload to a quiet edge stays open.
struct KeepaliveState: Equatable {
    /// What to do at a tick.
    enum Action: Equatable {
        /// Nothing to do; arm the timer again.
        case none
        /// Send a ping; arm the timer again.
        case ping
        /// `deadAfter` pings went unanswered: close the tunnel.
        case close
    }

    /// Unanswered pings (one per interval) after which the tunnel is closed.
    static let deadAfter = 3

    private var lastSent = 0
    private var lastReceived = 0
    private var unansweredPings = 0
    /// Something (data, a pong, any frame) arrived from the edge since the last tick.
    private var heard = false

    /// The edge sent something (any bytes of the TLS stream).
    mutating func heardFromEdge() { heard = true }

    /// One interval passed; `sent`/`received` are the data byte totals each way so far.
    mutating func tick(sent: Int, received: Int) -> Action {
        let dataMoved = sent != lastSent || received != lastReceived
        lastSent = sent
        lastReceived = received
        let wasHeard = heard
        heard = false
        if wasHeard { unansweredPings = 0 }
        if unansweredPings >= Self.deadAfter { return .close }
        if dataMoved && wasHeard { return .none }
        unansweredPings += 1
        return .ping
    }
}
