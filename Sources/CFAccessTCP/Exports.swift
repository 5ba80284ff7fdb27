// The library's public surface includes the core's value types (OriginURL, ServiceToken,
// TunnelFailure, ConnectionState, …). The carrier (AccessTransport) is an implementation
// detail: only this package's modules and tests see it (`package` access).
@_exported import AccessCore
