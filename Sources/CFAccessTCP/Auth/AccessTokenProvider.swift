import AccessCore
import AccessTransport
import Foundation
import Logging

/// Gets Cloudflare Access application tokens (PROTOCOL.md §2–§3): discovers the application,
/// then tries the cached app token, the org-token exchange and, if allowed, the browser or
/// device transfer flow — under the cross-process lock.
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

    private let configuration: AccessLoginConfiguration
    private let logger: Logger
    private let http: any HTTPClient
    private let verifier: any SignatureVerifier
    private let box: any BoxOpener
    private let store: any TokenStore
    private let lock: any LoginLock
    private let browser: any BrowserOpener
    private let clock: any WallClock
    private let presenter: any LoginPresenter

    private var appInfos: [String: AppInfo] = [:]
    /// When this process last fetched each auth domain's key set.
    private var keySetFetches: [String: Date] = [:]
    private var current: InFlight?
    /// The lookup or login in flight: what it is for, its number, and the cache generation it
    /// started in.
    private struct InFlight {
        let key: String
        let id: Int
        let generation: Int
        let task: Task<Result<String, TunnelFailure>, Never>
    }
    private var nextInFlightID = 0
    /// Counts `invalidate` calls: a lookup that started before the last one may have read the
    /// token that was just refused (issue 12.3).
    private var cacheGeneration = 0

    /// A provider; every effect has a real default (nil: libcurl, OpenSSL, libsodium, the token
    /// directory's files and lock, the system browser) and can be replaced by a test double.
    public init(configuration: AccessLoginConfiguration, logger: Logger,
                http: (any HTTPClient)? = nil,
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
                                                 connectTo: configuration.connectTo)
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
    public func appToken(for origin: OriginURL, interactive: Bool) async throws(TunnelFailure) -> String {
        try await appToken(for: origin, interactive: interactive, startedSince: 0)
    }

    /// `appToken(for:interactive:)`, sharing only a lookup that started in cache generation
    /// `minimumGeneration` or later: a forced refresh never takes the answer of a lookup that
    /// may have read the token it is replacing.
    func appToken(for origin: OriginURL, interactive: Bool, startedSince minimumGeneration: Int) async throws(TunnelFailure) -> String {
        let key = origin.httpsURL + (interactive ? " interactive" : "")
        while true {
            if let running = current {
                let result = await running.task.value
                if running.key == key && running.generation >= minimumGeneration { return try result.get() }
                // Someone else's, or too old: once it is done, start our own.
                if current?.id == running.id { current = nil }
                continue
            }
            nextInFlightID += 1
            let id = nextInFlightID
            let task = Task { await self.obtain(origin: origin, interactive: interactive) }
            current = InFlight(key: key, id: id, generation: cacheGeneration, task: task)
            let result = await task.value
            if self.current?.id == id { self.current = nil }
            return try result.get()
        }
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

    // MARK: Discovery (§2)

    private func discover(_ origin: OriginURL) async throws(TunnelFailure) -> AppInfo {
        if let known = appInfos[origin.httpsURL] { return known }
        let request = HTTPRequest(method: "HEAD", url: origin.httpsURL,
                                  headers: [Self.metadataRequestHeader], timeoutSeconds: Self.discoveryTimeoutSeconds)
        let response = try await http.send(request)
        guard let raw = response.value(of: Self.metadataHeader), !raw.isEmpty else {
            throw .noAccessApplication(url: origin.httpsURL)
        }
        let jwt: JWT
        do {
            jwt = try JWT.decode(raw)
        } catch {
            throw .metadataUnverified(host: origin.host, reason: "the metadata is not a JWT: \(error.reason)")
        }
        guard jwt.algorithm == "RS256" else {
            throw .metadataUnverified(host: origin.host, reason: "it is signed with \(quotedPublic(jwt.algorithm)), not RS256")
        }
        guard let keyID = jwt.keyID, !keyID.isEmpty else {
            throw .metadataUnverified(host: origin.host, reason: "it names no signing key (kid)")
        }
        let app: AppInfo
        switch MetadataRules.appInfo(claims: jwt.claims, requestedHost: origin.host, now: clock.now()) {
        case .success(let info): app = info
        case .failure(let problem): throw .metadataRejected(host: origin.host, problem: problem)
        }
        let key = try await signingKey(authDomain: app.authDomain, keyID: keyID, host: origin.host)
        guard verifier.verifyRS256(message: jwt.signingInput, signature: jwt.signature, key: key) else {
            throw .metadataUnverified(host: origin.host, reason: "its signature does not match key \(quotedPublic(keyID))")
        }
        logger.debug("found the Access application", metadata: ["app": "\(app.appHostname)", "auth_domain": "\(app.authDomain)"])
        appInfos[origin.httpsURL] = app
        return app
    }

    /// The key `keyID` of `authDomain`, from the 24-h disk cache or fetched (at most once a
    /// minute for an unknown kid).
    private func signingKey(authDomain: String, keyID: String, host: String) async throws(TunnelFailure) -> RSAPublicJWK {
        let name = TokenCacheNaming.jwksFileName(authDomain: authDomain)
        var cached: (JWKS, Date)?
        switch store.read(name) {
        case .content(let text, let modifiedAt):
            if let set = try? JWKS.parse(Array(text.utf8)) {
                cached = (set, modifiedAt)
            } else {
                logger.info("deleting an unreadable cached key set", metadata: ["path": "\(store.path(of: name))"])
                store.delete(name)
            }
        case .untrusted(let reason):
            logger.warning("ignoring the cached key set", metadata: ["path": "\(store.path(of: name))", "reason": "\(reason)"])
        case .missing:
            break
        }
        let hasKey = cached?.0.key(id: keyID) != nil
        let decision = JWKSCachePolicy.decide(cachedAt: cached?.1, hasKey: hasKey,
                                              lastFetchedByUs: keySetFetches[authDomain], now: clock.now())
        if decision == .useCached, let set = cached?.0 {
            if let key = set.key(id: keyID) { return key }
            throw .metadataUnverified(host: host, reason: "it is signed with an unknown key \(quotedPublic(keyID))")
        }
        let url = "https://" + authDomain + "/cdn-cgi/access/certs"
        keySetFetches[authDomain] = clock.now()
        let response = try await http.send(HTTPRequest(method: "GET", url: url, timeoutSeconds: Self.discoveryTimeoutSeconds))
        guard response.status == 200 else {
            throw .keySetUnavailable(authDomain: authDomain, reason: "HTTP \(response.status) from \(url)")
        }
        let set: JWKS
        do {
            set = try JWKS.parse(response.body)
        } catch {
            throw .keySetUnavailable(authDomain: authDomain, reason: error.reason)
        }
        do {
            try store.write(name, text: String(decoding: response.body, as: UTF8.self))
        } catch {
            logger.warning("cannot cache the key set", metadata: ["reason": "\(error.message)"])
        }
        guard let key = set.key(id: keyID) else {
            throw .metadataUnverified(host: host, reason: "it is signed with an unknown key \(quotedPublic(keyID))")
        }
        return key
    }

    // MARK: Token flow (§3)

    private func obtain(origin: OriginURL, interactive: Bool) async -> Result<String, TunnelFailure> {
        do {
            return .success(try await obtainThrowing(origin: origin, interactive: interactive))
        } catch {
            return .failure(error)
        }
    }

    private func obtainThrowing(origin: OriginURL, interactive: Bool) async throws(TunnelFailure) -> String {
        let app = try await discover(origin)
        let appName = TokenCacheNaming.appTokenFileName(for: app)
        if let token = cachedToken(appName, audience: app.appAUD) { return token }
        guard interactive else {
            if let token = await exchangeOrgToken(origin: origin, app: app, appName: appName) { return token }
            throw .loginRequired(host: origin.host)
        }
        let handle: any LoginLockHandle
        switch try await waitForLock(appName: appName, app: app, host: origin.host) {
        case .token(let token): return token
        case .locked(let held): handle = held
        }
        defer { handle.release() }
        if let token = cachedToken(appName, audience: app.appAUD) { return token }
        if let token = await exchangeOrgToken(origin: origin, app: app, appName: appName) { return token }
        return try await transfer(origin: origin, app: app, appName: appName)
    }

    private enum LockOutcome {
        case locked(any LoginLockHandle)
        case token(String)
    }

    /// Takes the lock, or waits for its holder (2 s steps, ≤10 min), re-checking the cache.
    private func waitForLock(appName: String, app: AppInfo, host: String) async throws(TunnelFailure) -> LockOutcome {
        let start = clock.now()
        var announced = false
        var shownURL = false
        while true {
            switch try lock.tryAcquire(tokenFileName: appName) {
            case .acquired(let handle):
                if announced { presenter.loginEnded() }
                return .locked(handle)
            case .held(let pid):
                if let token = cachedToken(appName, audience: app.appAUD) { return .token(token) }
                if !shownURL {
                    var url: String?
                    if case .content(let text, _) = store.read(TokenCacheNaming.urlFileName(for: appName)), !text.isEmpty {
                        url = text
                    }
                    if !announced || url != nil {
                        presenter.waitingForOtherProcess(pid: pid, url: url)
                        announced = true
                        shownURL = url != nil
                    }
                }
                if clock.now().timeIntervalSince(start) >= configuration.lockMaximumWaitSeconds {
                    throw .loginLockTimedOut(path: store.path(of: TokenCacheNaming.lockFileName(for: appName)))
                }
                guard await clock.sleep(seconds: configuration.lockPollIntervalSeconds) else {
                    throw .loginCancelled(host: host)
                }
            }
        }
    }

    /// The org-token exchange; nil (with an info line) when it does not give a usable token.
    private func exchangeOrgToken(origin: OriginURL, app: AppInfo, appName: String) async -> String? {
        let orgName = TokenCacheNaming.orgTokenFileName(authDomain: app.authDomain)
        guard let orgToken = cachedToken(orgName, audience: nil),
              var exchange = OrgTokenExchange(appURL: origin.httpsURL, orgToken: orgToken) else { return nil }
        var action = exchange.start()
        while true {
            switch action {
            case .send(let request):
                let response: HTTPResponse
                do {
                    response = try await http.send(request)
                } catch {
                    logger.info("the org token exchange failed", metadata: ["reason": "\(error.message)"])
                    return nil
                }
                action = exchange.received(status: response.status, location: response.value(of: "Location"),
                                           setCookies: response.values(of: "Set-Cookie"))
            case .failed(let reason):
                logger.info("the org token exchange gave no app token", metadata: ["reason": "\(Redaction.scrub(reason))"])
                return nil
            case .finished(let token):
                switch TokenCacheRules.check(token: token, requiredAudience: app.appAUD, now: clock.now()) {
                case .success:
                    save(token, as: appName)
                    logger.info("got an app token with the org token", metadata: ["app": "\(app.appHostname)"])
                    return token
                case .failure(let problem):
                    logger.info("the org token exchange gave an unusable token", metadata: ["reason": "\(problem)"])
                    return nil
                }
            }
        }
    }

    /// The browser/device transfer flow.
    private func transfer(origin: OriginURL, app: AppInfo, appName: String) async throws(TunnelFailure) -> String {
        // The key pair is ephemeral: made here, used for this one login, never stored.
        let key = box.makeEphemeralKey()
        let publicKey = Base64.encode(key.publicKey, alphabet: .url, padded: true)
        let loginURL = LoginURL.build(app: origin, publicKey: publicKey, appAUD: app.appAUD)
        let urlName = TokenCacheNaming.urlFileName(for: appName)
        do {
            try store.write(urlName, text: loginURL)
        } catch {
            logger.warning("cannot write the login URL file", metadata: ["reason": "\(error.message)"])
        }
        let opened = configuration.noBrowser ? false : await browser.open(loginURL)
        let presentation: LoginPresentation = opened ? .browser : .device
        presenter.loginStarted(url: loginURL, presentation: presentation)

        let start = clock.now()
        let presenter = self.presenter
        let clock = self.clock
        let ticker = Task {
            var second = 0
            while !Task.isCancelled {
                presenter.waiting(elapsedSeconds: second, presentation: presentation)
                guard await clock.sleep(seconds: 1) else { break }
                second = max(second + 1, Int(clock.now().timeIntervalSince(start)))
            }
        }
        defer {
            ticker.cancel()
            presenter.loginEnded()
        }

        let pollURL = TransferRules.pollURL(base: configuration.effectiveTransferBaseURL, publicKey: publicKey)
        for attempt in 1...max(1, configuration.maximumPolls) {
            if Task.isCancelled { throw .loginCancelled(host: origin.host) }
            let response: HTTPResponse
            do {
                response = try await http.send(HTTPRequest(method: "GET", url: pollURL,
                                                           timeoutSeconds: configuration.pollTimeoutSeconds))
            } catch {
                guard error.isRetryable else { throw error }
                logger.debug("transfer poll failed; polling again", metadata: ["attempt": "\(attempt)", "reason": "\(error.message)"])
                guard await clock.sleep(seconds: configuration.pollIntervalSeconds) else { throw .loginCancelled(host: origin.host) }
                continue
            }
            switch TransferRules.interpret(status: response.status,
                                           servicePublicKey: response.value(of: TransferRules.servicePublicKeyHeader),
                                           body: response.body) {
            case .notYet:
                logger.debug("login not completed yet", metadata: ["attempt": "\(attempt)", "status": "\(response.status)"])
                guard await clock.sleep(seconds: configuration.pollIntervalSeconds) else { throw .loginCancelled(host: origin.host) }
            case .serviceError(let status, let detail):
                throw .transferServiceFailed(status: status, detail: detail)
            case .malformed(let reason):
                throw .loginFailed(host: origin.host, reason: "the login service's answer is unusable: \(reason)")
            case .sealed(let sealed, let senderKey):
                let opened: [UInt8]
                do {
                    opened = try box.open(sealed, senderPublicKey: senderKey, key: key)
                } catch {
                    throw .loginFailed(host: origin.host, reason: "the login service's answer could not be decrypted: \(error)")
                }
                guard let tokens = TransferRules.tokens(fromOpened: opened) else {
                    throw .loginFailed(host: origin.host, reason: "the decrypted answer holds no app_token")
                }
                if case .failure(let problem) = TokenCacheRules.check(token: tokens.appToken, requiredAudience: app.appAUD, now: clock.now()) {
                    throw .loginFailed(host: origin.host, reason: "the received app token is unusable: \(problem)")
                }
                save(tokens.appToken, as: appName)
                if !tokens.orgToken.isEmpty {
                    if case .success = TokenCacheRules.check(token: tokens.orgToken, requiredAudience: nil, now: clock.now()) {
                        save(tokens.orgToken, as: TokenCacheNaming.orgTokenFileName(authDomain: app.authDomain))
                    } else {
                        logger.info("the received org token is unusable; not caching it")
                    }
                }
                logger.info("logged in", metadata: ["app": "\(app.appHostname)"])
                return tokens.appToken
            }
        }
        let waited = Int(clock.now().timeIntervalSince(start))
        throw .loginTimedOut(host: origin.host, seconds: max(waited, 1))
    }

    // MARK: Cache

    /// The cached token `name` if usable; a malformed, expired or foreign file is deleted
    /// with an info line, an untrusted one ignored with a warning.
    private func cachedToken(_ name: String, audience: String?) -> String? {
        let path = store.path(of: name)
        switch store.read(name) {
        case .missing:
            return nil
        case .untrusted(let reason):
            logger.warning("ignoring the cached token file", metadata: ["path": "\(path)", "reason": "\(reason)"])
            return nil
        case .content(let text, _):
            switch TokenCacheRules.check(token: text, requiredAudience: audience, now: clock.now()) {
            case .success:
                return text
            case .failure(let problem):
                logger.info("deleting the cached token file", metadata: ["path": "\(path)", "reason": "\(problem)"])
                store.delete(name)
                return nil
            }
        }
    }

    private func save(_ token: String, as name: String) {
        do {
            try store.write(name, text: token)
        } catch {
            logger.warning("cannot cache the token", metadata: ["reason": "\(error.message)"])
        }
    }

    /// Whether the edge accepts `token` for `origin` (no Access login redirect).
    private func edgeAccepts(token: String, origin: OriginURL) async throws(TunnelFailure) -> Bool {
        let url = origin.httpsURL + "?cloudflared_token_check=true"
        let response = try await http.send(HTTPRequest(method: "GET", url: url,
                                                       headers: [(AccessHeaderName.accessToken, token)],
                                                       timeoutSeconds: Self.discoveryTimeoutSeconds))
        if (300...399).contains(response.status), let location = response.value(of: "Location"),
           UpgradeRefusal.isAccessLoginLocation(location) {
            return false
        }
        return true
    }
}

/// A short public value (algorithm, kid) in quotes for messages, scrubbed like any outside text.
private func quotedPublic(_ text: String) -> String {
    "\"" + Redaction.scrub(String(text.prefix(64))) + "\""
}

extension AccessTokenProvider: OAuthFlow {
    /// The built-in login as a session's ``OAuthFlow``: the cached app token, else the org-token
    /// exchange, else the browser or device login. With `refresh` (Access refused the token) the
    /// cached app token is deleted first.
    public func appToken(for origin: OriginURL, refresh: Bool) async throws(TunnelFailure) -> String {
        guard refresh else { return try await appToken(for: origin, interactive: true) }
        await invalidate(for: origin)
        // Only a lookup started after this invalidation may answer (issue 12.3).
        return try await appToken(for: origin, interactive: true, startedSince: cacheGeneration)
    }
}
