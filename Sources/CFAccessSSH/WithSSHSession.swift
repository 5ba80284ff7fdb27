import CFAccessTCP

/// Opens an SSH session on `stream` (a tunnel stream, which the session then owns), runs the
/// handshake with the configuration's host-key check, logs `user` in with `authentication`, runs
/// `body`, and always disconnects afterwards, whether `body` returns, throws or is cancelled
/// (like `withAccessTunnel`).
///
/// ```swift
/// let uname = try await withAccessTunnel { tunnel in
///     let stream = try await tunnel.openStream(hostname: "ssh.example.com", method: method)
///     return try await withSSHSession(stream: stream, configuration: .init(hostKeyDelegate: verifier),
///                                     user: "me", authentication: SSHOrderedAuthentication(...)) { ssh in
///         try await ssh.exec("uname -a")
///     }
/// }
/// ```
///
/// - Parameters:
///   - stream: the connected stream; closed when the session ends.
///   - configuration: the session's host-key delegate, timeout and keepalives.
///   - user: the user to log in as.
///   - authentication: picks the offers (``SSHOrderedAuthentication``: OpenSSH's order).
///   - isolation: the actor `body` runs on (the caller's, by default).
///   - body: what to do with the logged-in session; its result is returned.
/// - Throws: the handshake's, the login's or `body`'s ``SSHFailure``, after the disconnect.
public func withSSHSession<Value>(
    stream: TunnelStream,
    configuration: SSHSession.Configuration,
    user: String,
    authentication: any SSHUserAuthenticationDelegate,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (SSHSession) async throws(SSHFailure) -> Value
) async throws(SSHFailure) -> Value {
    let session: SSHSession
    do {
        session = try SSHSession(stream: stream, configuration: configuration)
    } catch {
        stream.close()
        throw error
    }
    let outcome: Result<Value, SSHFailure>
    do throws(SSHFailure) {
        try await session.handshake()
        try await session.authenticate(user: user, delegate: authentication)
        outcome = .success(try await body(session))
    } catch {
        outcome = .failure(error)
    }
    // Also after a cancellation: disconnect is bounded and waits for nothing a cancelled task skips.
    await session.disconnect(description: "disconnected by user")
    return try outcome.get()
}
