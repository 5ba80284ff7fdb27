/// A `--connect-to` for the HTTPS requests of the login steps: requests to `host:port` go to
/// `address:targetPort`, while the Host header, SNI and certificate checks keep `host`.
public struct ConnectOverride: Sendable, Equatable {
    /// The host name the requests are for, lower-cased.
    public let host: String
    /// Its port.
    public let port: Int
    /// The address dialled instead (IPv6 without brackets).
    public let address: String
    /// The port dialled instead.
    public let targetPort: Int

    /// Requests to `origin` go to `target` (on the origin's port when `target` names none).
    public init(origin: OriginURL, target: ConnectTarget) {
        host = origin.host.lowercased()
        port = origin.effectivePort
        address = target.address
        targetPort = target.port ?? origin.effectivePort
    }
}
