/// Failures of app discovery and login (PROTOCOL.md §2–§3). Every message is one line that
/// says what to do; none holds a token. Outside text goes through `Redaction`.
extension TunnelFailure {
    /// The origin answered the metadata request without `cf-access-metadata`.
    package static func noAccessApplication(url: String) -> TunnelFailure {
        TunnelFailure(category: .configuration, isRetryable: false,
                      message: "No Access application at \(Redaction.url(url)): check the hostname",
                      detail: "no cf-access-metadata header in the answer",
                      kind: .noAccessApplication)
    }

    /// The metadata JWT was refused by a claim check.
    package static func metadataRejected(host: String, problem: MetadataProblem) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: false,
                      message: "The Access application metadata of \(host) was refused: \(problem); check the hostname and the system clock",
                      detail: "\(problem)", kind: .metadataInvalid)
    }

    /// The metadata JWT is malformed, unsigned with a known key, or its signature is wrong.
    package static func metadataUnverified(host: String, reason: String) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: false,
                      message: "The Access application metadata of \(host) could not be verified: \(reason); "
                          + "the answer did not come from Cloudflare Access (check the address overrides and the network)",
                      detail: reason, subject: .addressOverrides, kind: .metadataInvalid)
    }

    /// The key set of the auth domain could not be had.
    package static func keySetUnavailable(authDomain: String, reason: String) -> TunnelFailure {
        TunnelFailure(category: .transport, isRetryable: true,
                      message: "Cannot get the signing keys of \(authDomain): \(reason); check the network and try again",
                      detail: reason, kind: .keySetUnavailable)
    }

    /// A login is needed but this run may not start one (not interactive).
    public static func loginRequired(host: String) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: false,
                      message: "\(host) needs a Cloudflare Access login: run `cf-access-tcp login \(host)`",
                      kind: .loginRequired)
    }

    /// The login did not produce a token; `reason` says why.
    public static func loginFailed(host: String, reason: String) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: false,
                      message: "Login to \(host) failed: \(reason); try `cf-access-tcp login \(host)` again",
                      detail: "\(host): \(reason)", kind: .loginFailed)
    }

    /// Nobody completed the login within `waited`.
    public static func loginTimedOut(host: String, after waited: Duration) -> TunnelFailure {
        let seconds = Int(waited.components.seconds)
        return TunnelFailure(category: .authentication, isRetryable: true,
                      message: "Login to \(host) was not completed within \(seconds / 60 > 0 ? "\(seconds / 60) min" : "\(seconds) s"): "
                          + "open the login URL and finish the login, then try again",
                      detail: "no login to \(host) within \(seconds) s", kind: .loginTimedOut)
    }

    /// The transfer service answered ≥ 500. `detail` is its body, already scrubbed.
    package static func transferServiceFailed(status: Int, detail: String) -> TunnelFailure {
        TunnelFailure(category: .transport, isRetryable: true,
                      message: "The Cloudflare login service failed (HTTP \(status))\(detail.isEmpty ? "" : ": " + detail); try again later",
                      detail: "HTTP \(status)", kind: .transferServiceFailed)
    }

    /// Another process held the login lock for too long.
    package static func loginLockTimedOut(path: String) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: true,
                      message: "Another cf-access-tcp or cloudflared login has held \(path) for 10 minutes: "
                          + "finish or stop that login, then try again",
                      detail: "login lock \(path) held for 10 minutes", kind: .loginLockTimedOut)
    }

    /// The token cache could not be used (directory or file); `reason` is the system's.
    ///
    /// The path is shown as is: it is ours (the token directory and cloudflared's file names,
    /// whose application AUD tag is public), and a redacted path would not say what to fix.
    public static func tokenCache(path: String, reason: String) -> TunnelFailure {
        let reason = Redaction.scrub(reason)
        return TunnelFailure(trusted: .configuration, isRetryable: false,
                             message: "Cannot use the token cache \(Display.oneLine(path)): \(reason); "
                                 + "check its permissions or use another token directory",
                             detail: "\(Display.oneLine(path)): \(reason)", subject: .tokenDirectory, kind: .tokenCache)
    }

    /// The login was interrupted (Ctrl-C or cancellation).
    public static func loginCancelled(host: String) -> TunnelFailure {
        TunnelFailure(category: .authentication, isRetryable: false,
                      message: "Login to \(host) was cancelled", detail: "login to \(host) cancelled", kind: .loginCancelled)
    }
}
