import AccessCore
import AccessTransport
import FoundationEssentials
import Logging

/// Getting a token (PROTOCOL.md §3): the cross-process login lock, the org-token exchange, and the
/// browser or device login with the transfer service's sealed answer.
extension AccessTokenProvider {
    func obtain(origin: OriginURL, interactive: Bool) async -> Result<String, TunnelFailure> {
        do {
            return .success(try await obtainThrowing(origin: origin, interactive: interactive))
        } catch {
            // Whatever step the cancellation interrupted (a poll, the lock wait, a request).
            if Task.isCancelled, interactive { return .failure(.loginCancelled(host: origin.host)) }
            return .failure(error)
        }
    }

    func obtainThrowing(origin: OriginURL, interactive: Bool) async throws(TunnelFailure) -> String {
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
        // Cancelled meanwhile: no browser, no URL file.
        if Task.isCancelled { throw .loginCancelled(host: origin.host) }
        return try await transfer(origin: origin, app: app, appName: appName)
    }

    enum LockOutcome {
        case locked(any LoginLockHandle)
        case token(String)
    }

    /// Takes the lock, or waits for its holder (2 s steps, ≤10 min), re-checking the cache.
    func waitForLock(appName: String, app: AppInfo, host: String) async throws(TunnelFailure) -> LockOutcome {
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
                if clock.now().timeIntervalSince(start) >= configuration.lockMaximumWait.secondsValue {
                    throw .loginLockTimedOut(path: store.path(of: TokenCacheNaming.lockFileName(for: appName)))
                }
                guard await clock.sleep(for: configuration.lockPollInterval) else {
                    throw .loginCancelled(host: host)
                }
            }
        }
    }

    /// The org-token exchange; nil (with an info line) when it does not give a usable token.
    func exchangeOrgToken(origin: OriginURL, app: AppInfo, appName: String) async -> String? {
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
    func transfer(origin: OriginURL, app: AppInfo, appName: String) async throws(TunnelFailure) -> String {
        // The key pair is ephemeral: made here, used for this one login, never stored.
        let key = box.makeEphemeralKey()
        let publicKey = Base64.encode(key.publicKey, alphabet: .url, padded: true)
        let loginURL = LoginURL.build(app: origin, publicKey: publicKey, appAUD: app.appAUD,
                                      closeInterstitial: configuration.closeInterstitial)
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
                presenter.waiting(elapsed: .seconds(second), presentation: presentation)
                guard await clock.sleep(for: .seconds(1)) else { break }
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
                                                           timeoutSeconds: max(1, configuration.pollTimeout.wholeSecondsRoundedUp)))
            } catch {
                guard error.isRetryable else { throw error }
                logger.debug("transfer poll failed; polling again", metadata: ["attempt": "\(attempt)", "reason": "\(error.message)"])
                guard await clock.sleep(for: configuration.pollInterval) else { throw .loginCancelled(host: origin.host) }
                continue
            }
            switch TransferRules.interpret(status: response.status,
                                           servicePublicKey: response.value(of: TransferRules.servicePublicKeyHeader),
                                           body: response.body) {
            case .notYet:
                logger.debug("login not completed yet", metadata: ["attempt": "\(attempt)", "status": "\(response.status)"])
                guard await clock.sleep(for: configuration.pollInterval) else { throw .loginCancelled(host: origin.host) }
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
        throw .loginTimedOut(host: origin.host, after: .seconds(max(waited, 1)))
    }
}
