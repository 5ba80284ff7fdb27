import AccessCore

// The library's vocabulary: value types and seams defined in the package's pure core
// (AccessCore), named here so that `import CFAccessTCP` is all a client writes. Only these
// names are public; the core's rules (token cache, JWT, transfer, request building, the session
// state machine) are package-only.

// MARK: The session

/// Where a tunnel session is: idle, authenticating, connecting, connected, reconnecting,
/// disconnected or failed (see ``AccessTunnel/state``).
public typealias ConnectionState = AccessCore.ConnectionState
/// Why an established tunnel ended: a Close by either side, a reset, a protocol violation, a
/// keepalive timeout… (see ``TunnelStream/ended``).
public typealias TunnelEnd = AccessCore.TunnelEnd
/// How often and after which delays a retryable failure is tried again.
public typealias RetryPolicy = AccessCore.RetryPolicy

// MARK: Credentials

/// An Access service token: client ID and secret (never printed).
public typealias ServiceToken = AccessCore.ServiceToken
/// An Access application, as its metadata names it: hostname, audience tag, team domain.
public typealias AppInfo = AccessCore.AppInfo

// MARK: Failures

/// A failure of the tunnel or the login: a `TunnelFailure.Kind` to switch on, a category, a
/// retry hint and one plain line for people.
public typealias TunnelFailure = AccessCore.TunnelFailure
/// The setting a person should look at to fix a failure.
public typealias FailureSubject = AccessCore.FailureSubject
/// Which credential a refused request carried.
public typealias CredentialKind = AccessCore.CredentialKind
/// A value given to the library is unusable; the message says which and what to do.
public typealias ConfigurationError = AccessCore.ConfigurationError

// MARK: Addresses and headers

/// The Access application's origin URL, parsed from a hostname (`ssh.example.com`, an IDN, a path).
public typealias OriginURL = AccessCore.OriginURL
/// Another address to dial instead of the hostname (Host, SNI and verification keep the name).
public typealias ConnectTarget = AccessCore.ConnectTarget
/// A connect-to override (libcurl's `CONNECT_TO`) for the login flow's HTTPS requests.
public typealias ConnectOverride = AccessCore.ConnectOverride
/// A `HOST:PORT:ADDRESS` override, like curl's `--resolve`.
public typealias ResolveOverride = AccessCore.ResolveOverride
/// An HTTP proxy for the WebSocket dial.
public typealias ProxySettings = AccessCore.ProxySettings
/// The local address a listener binds.
public typealias ListenAddress = AccessCore.ListenAddress
/// A pinned public key of the edge, curl's `sha256//BASE64` (``AccessTunnel/Options/pins``).
public typealias PublicKeyPin = AccessCore.PublicKeyPin
/// An extra request header (`Name: value`).
public typealias HeaderField = AccessCore.HeaderField

// MARK: Seams of the login flow

/// The wall clock and sleeping, for the session's deadlines and the login's waits.
public typealias WallClock = AccessCore.WallClock
/// Where tokens are cached (by default cloudflared's files in `~/.cloudflared`).
public typealias TokenStore = AccessCore.TokenStore
/// What reading a token cache file found.
public typealias TokenFileRead = AccessCore.TokenFileRead
/// The cross-process login lock (by default cloudflared's `<token file>.lock`).
public typealias LoginLock = AccessCore.LoginLock
/// The result of one attempt to take the login lock.
public typealias LoginLockAttempt = AccessCore.LoginLockAttempt
/// A login lock held by this process.
public typealias LoginLockHandle = AccessCore.LoginLockHandle
/// Opens the login URL in a browser.
public typealias BrowserOpener = AccessCore.BrowserOpener
