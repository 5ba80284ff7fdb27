/// The exchange between a session and its ``SSHUserAuthenticationDelegate``, apart from libssh so
/// it can be driven by a scripted server: ask the delegate for an offer, try it, hand a refusal
/// back, until an offer is accepted, the delegate gives up, or the connection breaks.
package enum AuthenticationLoop {
    /// Runs `delegate` against `attempt` (which tries one offer and throws its failure); returns
    /// the offer that worked. A lost or timed-out connection ends the loop at once; any other
    /// failure goes back to the delegate.
    package static func run(
        availableMethods: SSHAuthenticationMethods, delegate: any SSHUserAuthenticationDelegate,
        attempt: (SSHAuthenticationOffer) async throws(SSHFailure) -> Void
    ) async throws(SSHFailure) -> SSHAuthenticationOffer {
        var lastFailure: SSHFailure?
        while true {
            guard let offer = try await delegate.nextAuthenticationOffer(availableMethods: availableMethods,
                                                                         lastFailure: lastFailure) else {
                throw SSHFailure(.authenticationFailed,
                                 "Authentication failed (the server offers: \(availableMethods.names.joined(separator: ", ")))")
            }
            do {
                try await attempt(offer)
            } catch {
                if error.kind == .connectionLost || error.kind == .timedOut { throw error }
                lastFailure = error
                continue
            }
            await delegate.authenticationSucceeded(with: offer)
            return offer
        }
    }
}
