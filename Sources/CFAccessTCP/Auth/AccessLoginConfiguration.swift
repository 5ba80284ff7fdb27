import AccessCore
import FoundationEssentials

/// How the login flows reach Cloudflare Access and where tokens are kept.
public struct AccessLoginConfiguration: Sendable {
    /// The token cache directory (`~/.cloudflared` by default).
    public var tokenDirectory: String
    /// A PEM file of CA certificates to trust instead of the system store.
    public var caFile: String?
    /// `HOST:PORT:ADDR` overrides (like curl's `--resolve`) for every HTTPS request of the flows.
    public var resolve: [ResolveOverride]
    /// Connect-to overrides (libcurl's `CONNECT_TO`): requests to a host go to another
    /// address, names and certificate checks unchanged.
    public var connectTo: [ConnectOverride]
    /// The transfer service base URL; nil means Cloudflare's (or FedRAMP's, see `fedRAMP`).
    public var transferBaseURL: String?
    /// Never start a browser: always device mode (URL and QR code on stderr).
    public var noBrowser: Bool
    /// Use the FedRAMP transfer service `login.fed.cloudflareaccess.org`.
    public var fedRAMP: Bool
    /// Polls of the transfer service at most (10, as cloudflared).
    public var maximumPolls: Int
    /// How long each poll may take (60 s: the service holds the request until the login is
    /// done). Whole seconds; a fraction counts as a second more.
    public var pollTimeout: Duration
    /// The wait after a "not yet" answer before polling again (1 s).
    public var pollInterval: Duration
    /// Ask Access to close the browser's "you may close this window" page by itself after the
    /// login (`close_interstitial=true` in the login URL; cloudflared's `--auto-close`).
    public var closeInterstitial: Bool = false
    /// The wait between checks of a lock held by another process (2 s).
    public var lockPollInterval: Duration
    /// How long to wait for another process's login at most (10 min).
    public var lockMaximumWait: Duration
    /// Pinned keys for the login's HTTPS requests to ``pinnedHost`` (the tunnel's hostname), as
    /// ``AccessTunnel/Options/pins`` pins the tunnel; libcurl checks the leaf's key. Requests to
    /// other hosts (the team domain, the transfer service) are not pinned.
    public var pins: [PublicKeyPin] = []
    /// The host whose requests ``pins`` applies to.
    public var pinnedHost: String?

    /// A configuration; defaults follow PROTOCOL.md §3.
    public init(tokenDirectory: String, caFile: String? = nil, resolve: [ResolveOverride] = [],
                connectTo: [ConnectOverride] = [], transferBaseURL: String? = nil, noBrowser: Bool = false, fedRAMP: Bool = false,
                maximumPolls: Int = 10, pollTimeout: Duration = .seconds(60), pollInterval: Duration = .seconds(1),
                lockPollInterval: Duration = .seconds(2), lockMaximumWait: Duration = .seconds(600)) {
        self.tokenDirectory = tokenDirectory
        self.caFile = caFile
        self.resolve = resolve
        self.connectTo = connectTo
        self.transferBaseURL = transferBaseURL
        self.noBrowser = noBrowser
        self.fedRAMP = fedRAMP
        self.maximumPolls = maximumPolls
        self.pollTimeout = pollTimeout
        self.pollInterval = pollInterval
        self.lockPollInterval = lockPollInterval
        self.lockMaximumWait = lockMaximumWait
    }

    /// The transfer service base URL in effect.
    public var effectiveTransferBaseURL: String {
        transferBaseURL ?? (fedRAMP ? TransferRules.fedRAMPBaseURL : TransferRules.defaultBaseURL)
    }
}
