/// A connect-to override for the HTTPS requests of the login steps: requests to `host:port` go to
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

/// The one lookup of "where does a dial to HOST:PORT go" for both overrides (issue 13.4): the
/// tunnel's carrier and the login steps' HTTPS client both ask it.
package enum AddressOverride {
    /// The address and port a dial to `host`:`port` goes to: the first connect-to for that
    /// host and port, else the first resolve override (same port), else nil (resolve `host`).
    /// Host names compare case-insensitively.
    package static func route(host: String, port: Int, connectTo: [ConnectOverride] = [],
                             resolve: [ResolveOverride]) -> (address: String, port: Int)? {
        let key = host.asciiLowercased
        if let override = connectTo.first(where: { $0.host == key && $0.port == port }) {
            return (override.address, override.targetPort)
        }
        if let pinned = resolve.first(where: { $0.host == key && $0.port == port }) {
            return (pinned.address, port)
        }
        return nil
    }
}

