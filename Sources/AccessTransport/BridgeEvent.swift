import AccessCore

/// What happened to one bridged connection; delivered on the carrier's thread, so handlers must be quick.
package enum BridgeEvent: Sendable {
    /// The WebSocket upgrade succeeded and bytes flow.
    case established(id: Int)
    /// The WebSocket could not be opened; the local side has been closed.
    case failed(id: Int, TunnelFailure)
    /// Access refused the credential of a connection bridged with `handBackOnRefusal`: the local
    /// socket, not read from yet, is handed back to the owner, who closes it or bridges it again
    /// (e.g. with a fresh token).
    case refused(id: Int, socket: Int32, TunnelFailure)
    /// The dial of a connection bridged with `handBackWhenRetryable` failed in a way worth trying
    /// again (the edge unreachable, a timeout, an HTTP 5xx): the local socket, not read from yet,
    /// is handed back with the number of the attempt that failed, for the owner to dial again
    /// later or to close.
    case retryable(id: Int, socket: Int32, attempt: Int, TunnelFailure)
    /// Both sides are closed; totals of bytes carried each way, and why it ended.
    case closed(id: Int, toOrigin: Int, fromOrigin: Int, reason: TunnelEnd)
}
