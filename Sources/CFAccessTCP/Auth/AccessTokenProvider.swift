import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// Gets Cloudflare Access application tokens (PROTOCOL.md §2–§3): discovers the application,
/// then tries the cached app token, the org-token exchange and, if allowed, the browser or
/// device transfer flow — under the cross-process lock.
///
/// The steps live in extensions by protocol step: `AccessTokenProvider+Discovery.swift` (§2),
/// `AccessTokenProvider+Login.swift` (§3: lock, org token, transfer) and
/// `AccessTokenProvider+Cache.swift`.
///
/// One provider serves every connection of a process: concurrent callers share the login in
/// flight (one browser, never one per connection), and only one login runs at a time. Tokens,
/// cookies and keys never reach a log line or an error message.
public actor AccessTokenProvider {
    /// Header and value of the metadata request.
    static let metadataRequestHeader = ("cf-access-metadata-request", "true")
    /// The header carrying the metadata JWT.
    static let metadataHeader = "cf-access-metadata"
    /// Seconds allowed for the metadata and key-set requests.
    static let discoveryTimeoutSeconds = 7

    let configuration: AccessLoginConfiguration
    let logger: Logger
    let http: any HTTPClient
    let verifier: any SignatureVerifier
    let box: any BoxOpener
    let store: any TokenStore
    let lock: any LoginLock
    let browser: any BrowserOpener
    let clock: any WallClock
    let presenter: any LoginPresenter

    var appInfos: [String: AppInfo] = [:]
    /// The cache file and token `storedAppToken` last gave for each origin (a refresh deletes it).
    var storedTokens: [String: (file: String, token: String)] = [:]
    /// When this process last fetched each auth domain's key set.
    var keySetFetches: [String: Date] = [:]
    /// The lookup or login in flight (one at a time).
    var current: SharedLogin?
    var nextInFlightID = 0
    /// Counts `invalidate` calls: a lookup that started before the last one may have read the
    /// token that was just refused (issue 12.3).
    var cacheGeneration = 0

    /// A provider.
    /// - Parameters:
    ///   - configuration: where the flows reach Access and where tokens are kept.
    ///   - logger: the flows' log lines (never a token, cookie or key).
    ///   - store: the token cache (nil: cloudflared's files in the configuration's directory).
    ///   - lock: the cross-process login lock (nil: cloudflared's `<token file>.lock` files).
    ///   - browser: opens the login URL (nil: `xdg-open`, `BROWSER`).
    ///   - clock: the waits of the login (default: real time).
    ///   - presenter: what the user sees of a login (default: stderr).
    public init(configuration: AccessLoginConfiguration, logger: Logger,
                store: (any TokenStore)? = nil,
                lock: (any LoginLock)? = nil,
                browser: (any BrowserOpener)? = nil,
                clock: any WallClock = SystemWallClock(),
                presenter: any LoginPresenter = StderrLoginPresenter()) {
        self.init(configuration: configuration, logger: logger, http: nil, store: store, lock: lock, browser: browser,
                  clock: clock, presenter: presenter)
    }

    /// A provider whose HTTP client and crypto can be replaced too (nil: libcurl, OpenSSL,
    /// libsodium): the package's tests.
    package init(configuration: AccessLoginConfiguration, logger: Logger,
                http: (any HTTPClient)?,
                verifier: (any SignatureVerifier)? = nil,
                box: (any BoxOpener)? = nil,
                store: (any TokenStore)? = nil,
                lock: (any LoginLock)? = nil,
                browser: (any BrowserOpener)? = nil,
                clock: any WallClock = SystemWallClock(),
                presenter: any LoginPresenter = StderrLoginPresenter()) {
        self.configuration = configuration
        self.logger = logger
        self.http = http ?? CurlHTTPClient(caFile: configuration.caFile, resolve: configuration.resolve,
                                                 connectTo: configuration.connectTo,
                                                 pins: configuration.pins, pinnedHost: configuration.pinnedHost)
        self.verifier = verifier ?? OpenSSLRS256Verifier()
        self.box = box ?? SodiumBox()
        self.store = store ?? FileTokenStore(directory: configuration.tokenDirectory)
        self.lock = lock ?? FileLoginLock(directory: configuration.tokenDirectory, logger: logger)
        self.browser = browser ?? SystemBrowserOpener()
        self.clock = clock
        self.presenter = presenter
    }

    // MARK: Public API

    /// An application token for `origin`: cached, or from the org-token exchange, or — when
    /// `interactive` — from a browser/device login. Concurrent calls share one login.
    ///
    /// Cancelling the calling task ends the wait at once (kind `.loginCancelled`); when no other
    /// caller waits for the same login, the login stops too: no more polls, the login lock is
    /// released.
    public func appToken(for origin: OriginURL, interactive: Bool) async throws(TunnelFailure) -> String {
        try await appToken(for: origin, interactive: interactive, startedSince: 0)
    }

    /// `appToken(for:interactive:)`, sharing only a lookup that started in cache generation
    /// `minimumGeneration` or later: a forced refresh never takes the answer of a lookup that
    /// may have read the token it is replacing.
    func appToken(for origin: OriginURL, interactive: Bool, startedSince minimumGeneration: Int) async throws(TunnelFailure) -> String {
        let key = origin.httpsURL + (interactive ? " interactive" : "")
        let cancelled = TunnelFailure.loginCancelled(host: origin.host)
        while true {
            if let running = current {
                if running.key == key && running.generation >= minimumGeneration && !running.isAbandoned {
                    return try await running.wait(sharing: true, cancelled: cancelled).get()
                }
                // Someone else's, too old, or given up: once it is done, start our own.
                _ = await running.wait(sharing: false, cancelled: cancelled)
                if Task.isCancelled { throw cancelled }
                if current?.id == running.id { current = nil }
                continue
            }
            nextInFlightID += 1
            let flight = SharedLogin(key: key, id: nextInFlightID, generation: cacheGeneration)
            current = flight
            flight.start {
                let result = await self.obtain(origin: origin, interactive: interactive)
                await self.ended(flight)
                return result
            }
            return try await flight.wait(sharing: true, cancelled: cancelled).get()
        }
    }

    /// Forgets `flight` once its work is done.
    private func ended(_ flight: SharedLogin) {
        if current?.id == flight.id { current = nil }
    }

    /// Deletes the cached app token of `origin` (after the edge redirected a request that
    /// carried it): the next `appToken` logs in again.
    public func invalidate(for origin: OriginURL) async {
        let app: AppInfo
        if let known = appInfos[origin.httpsURL] {
            app = known
        } else {
            do {
                app = try await discover(origin)
            } catch {
                logger.info("cannot find the Access application to forget its token", metadata: ["reason": "\(error.message)"])
                return
            }
        }
        let name = TokenCacheNaming.appTokenFileName(for: app)
        logger.info("deleting the cached app token", metadata: ["path": "\(store.path(of: name))"])
        store.delete(name)
        cacheGeneration += 1
    }

    /// The cached, valid app token of `origin`, found without any request: by the application
    /// this provider discovered for `origin`, or else by cloudflared's file name for an
    /// application on exactly `origin`'s host (`<host>-<AUD>-token`, valid for that AUD; the
    /// newest if there are several). A session sends it on its first dial; if Access refuses it,
    /// `appToken(for:refresh: true)` deletes it.
    public func storedAppToken(for origin: OriginURL) async -> String? {
        if let app = appInfos[origin.httpsURL] {
            return cachedToken(TokenCacheNaming.appTokenFileName(for: app), audience: app.appAUD)
        }
        var newest: (file: String, token: String, modifiedAt: Date)?
        for file in store.fileNames() {
            guard let audience = TokenCacheNaming.audience(ofAppTokenFile: file, host: origin.host),
                  case .content(let text, let modifiedAt) = store.read(file),
                  case .success = TokenCacheRules.check(token: text, requiredAudience: audience, now: clock.now()) else {
                continue
            }
            if newest.map({ modifiedAt > $0.modifiedAt }) ?? true { newest = (file, text, modifiedAt) }
        }
        guard let newest else { return nil }
        storedTokens[origin.httpsURL] = (newest.file, newest.token)
        return newest.token
    }

    /// The cached, valid app token of `origin`, or nil; never logs in (for `token`).
    public func cachedAppToken(for origin: OriginURL) async throws(TunnelFailure) -> String? {
        let app = try await discover(origin)
        return cachedToken(TokenCacheNaming.appTokenFileName(for: app), audience: app.appAUD)
    }

    /// The Access application of `origin` (PROTOCOL.md §2), verified; remembered per origin.
    public func applicationInfo(for origin: OriginURL) async throws(TunnelFailure) -> AppInfo {
        try await discover(origin)
    }

    /// Logs in for `origin` as `cf-access-tcp login` does: get a token (interactively), then
    /// ask the edge whether it accepts it (`cloudflared_token_check=true`); if the edge
    /// redirects to the Access login, delete the token and log in once more.
    public func login(for origin: OriginURL) async throws(TunnelFailure) -> String {
        for attempt in 1...2 {
            let token = try await appToken(for: origin, interactive: true)
            if try await edgeAccepts(token: token, origin: origin) { return token }
            logger.info("the edge refused the app token", metadata: ["attempt": "\(attempt)"])
            await invalidate(for: origin)
        }
        throw .loginFailed(host: origin.host, reason: "Cloudflare Access refused the new token as well")
    }

    /// Deletes cached tokens: those of `origin`'s application (and its login files), or with
    /// nil every app and org token in the cache. Returns the removed paths.
    public func logout(origin: OriginURL?) async -> [String] {
        await logout(origin: origin, includingOrgToken: false).removed
    }

    /// What `logout(origin:includingOrgToken:)` did.
    public struct LogoutResult: Sendable, Equatable {
        /// The paths of the files removed.
        public var removed: [String]
        /// The org token of the application's team that was kept (its path), if any: with it the
        /// next connection gets a new app token without a browser.
        public var keptOrgToken: String?
    }

    /// Removes the cached tokens of `origin`'s application, and with `includingOrgToken` the org
    /// token of its team too (so the next connection needs a real login); without `origin`,
    /// every cached token, org tokens included.
    public func logout(origin: OriginURL?, includingOrgToken: Bool) async -> LogoutResult {
        var removed: [String] = []
        var keptOrg: String?
        let names = store.fileNames()
        if let origin {
            var targets: [String] = []
            if let app = try? await discover(origin) {
                targets.append(TokenCacheNaming.appTokenFileName(for: app))
                let org = TokenCacheNaming.orgTokenFileName(authDomain: app.authDomain)
                if includingOrgToken {
                    targets.append(org)
                } else if names.contains(org) {
                    keptOrg = store.path(of: org)
                }
            } else {
                // Offline: every app token whose name starts with the host.
                targets = names.filter { $0.hasPrefix(origin.host + "-") && TokenCacheNaming.isTokenFileName($0) && !$0.hasSuffix("-org-token") }
            }
            for name in targets where names.contains(name) {
                store.delete(name)
                removed.append(store.path(of: name))
            }
        } else {
            for name in names where TokenCacheNaming.isTokenFileName(name) {
                store.delete(name)
                removed.append(store.path(of: name))
            }
        }
        return LogoutResult(removed: removed, keptOrgToken: keptOrg)
    }
}

extension AccessTokenProvider: OAuthFlow {
    /// The built-in login as a session's ``OAuthFlow``: the cached app token, else the org-token
    /// exchange, else the browser or device login. With `refresh` (Access refused the token) the
    /// cached app token is deleted first.
    public func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        guard refresh else { return try await appToken(for: origin, interactive: true) }
        if let (file, token) = storedTokens.removeValue(forKey: origin.httpsURL),
           case .content(let text, _) = store.read(file), text == token {
            logger.info("deleting the cached app token Access refused", metadata: ["path": "\(store.path(of: file))"])
            store.delete(file)
        }
        await invalidate(for: origin)
        // Only a lookup started after this invalidation may answer (issue 12.3).
        return try await appToken(for: origin, interactive: true, startedSince: cacheGeneration)
    }
}
