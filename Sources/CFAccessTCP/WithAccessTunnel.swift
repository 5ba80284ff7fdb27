import AccessCore
import Logging

/// Runs `body` with a new ``AccessTunnel`` and disconnects it when `body` ends — whether it
/// returns, throws, or its task is cancelled — as `withHTTPClient` does for async-http-client.
///
/// ```swift
/// let output = try await withAccessTunnel(options: options) { tunnel in
///     let stream = try await tunnel.openStream(hostname: "ssh.example.com", method: .serviceToken(token))
///     try await stream.write(Array("hello\n".utf8))
///     return try await stream.read()
/// }
/// // every connection, listener and login of the tunnel is closed here
/// ```
///
/// - Parameters:
///   - options: the tunnel's options.
///   - logger: where the tunnel logs.
///   - clock: waits for retries and the connect deadline (default: real time).
///   - isolation: the actor `body` runs on (the caller's, by default).
///   - body: what to do with the tunnel; its result is returned, its error rethrown after the disconnect.
public func withAccessTunnel<Value, Failure: Error>(
    options: AccessTunnel.Options = AccessTunnel.Options(),
    logger: Logger = Logger(label: "cf-access-tcp"),
    clock: any WallClock = SystemWallClock(),
    isolation: isolated (any Actor)? = #isolation,
    _ body: (AccessTunnel) async throws(Failure) -> Value
) async throws(Failure) -> Value {
    try await withAccessTunnel(AccessTunnel(options: options, logger: logger, clock: clock), isolation: isolation, body)
}

/// ``withAccessTunnel(options:logger:clock:isolation:_:)`` with a tunnel made beforehand (the
/// package's tests pass one on a scripted transport).
package func withAccessTunnel<Value, Failure: Error>(
    _ tunnel: AccessTunnel,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (AccessTunnel) async throws(Failure) -> Value
) async throws(Failure) -> Value {
    let outcome: Result<Value, Failure>
    do {
        outcome = .success(try await body(tunnel))
    } catch {
        outcome = .failure(error)
    }
    // Also after a cancellation: disconnect waits for nothing that a cancelled task skips.
    await tunnel.disconnect()
    return try outcome.get()
}
