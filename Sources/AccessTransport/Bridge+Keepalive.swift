/// The keepalive of one tunnel as a value: every timer tick goes in, what to do comes out.
///
/// Two questions, asked once per interval:
/// - **Silence** (no data either way since the last tick): send a ping, so an idle tunnel is
///   pinged every interval. A pong is not data: it does not make the tunnel "active", so the
///   next idle interval pings again (issue 11.4).
/// - **Liveness** (anything at all from the edge: data, pong, any frame): when the edge has
///   said nothing for `deadAfter` intervals the tunnel is closed — even while we are sending,
///   because bytes we write may only be filling buffers towards a dead edge (issue 12.13). An
///   interval in which the edge said nothing also sends a ping, so a busy upload to a live but
///   quiet edge gets its pong back.
struct KeepaliveState: Equatable {
    /// What to do at a tick.
    enum Action: Equatable {
        /// Nothing to do; arm the timer again.
        case none
        /// Send a ping; arm the timer again.
        case ping
        /// The edge said nothing for `deadAfter` intervals: close the tunnel.
        case close
    }

    /// Intervals without a word from the edge after which the tunnel is closed.
    static let deadAfter = 3

    private var lastSent = 0
    private var lastReceived = 0
    private var silentIntervals = 0
    /// Something (data, a pong, any frame) arrived from the edge since the last tick.
    private var heard = false

    /// The edge sent something (any bytes of the TLS stream).
    mutating func heardFromEdge() { heard = true }

    /// One interval passed; `sent`/`received` are the data byte totals each way so far.
    mutating func tick(sent: Int, received: Int) -> Action {
        let dataMoved = sent != lastSent || received != lastReceived
        lastSent = sent
        lastReceived = received
        if heard {
            silentIntervals = 0
        } else {
            silentIntervals += 1
        }
        heard = false
        if silentIntervals >= Self.deadAfter { return .close }
        return dataMoved && silentIntervals == 0 ? .none : .ping
    }
}
