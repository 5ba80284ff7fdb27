// The library's public surface includes the core's value types (OriginURL, ServiceToken,
// TunnelFailure, ConnectionState, …) and the carrier's configuration.
@_exported import AccessCore
@_exported import AccessTransport
