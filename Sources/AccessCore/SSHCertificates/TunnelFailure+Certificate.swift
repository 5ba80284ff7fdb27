extension TunnelFailure {
    /// Cloudflare Access answered the certificate signing request of `host` with an error:
    /// `status` and `message` are its `{"status","message"}` (the message scrubbed, on one line).
    /// Category `.authentication` for a 4xx, `.transport` (retryable) otherwise.
    public static func certificateRefused(host: String, status: Int, message: String) -> TunnelFailure {
        let clientSide = (400...499).contains(status)
        return TunnelFailure(category: clientSide ? .authentication : .transport, isRetryable: !clientSide,
                             message: "Cloudflare Access did not sign an SSH certificate for \(host) "
                                 + "(\(status): \(message)); check that the application allows short-lived certificates, "
                                 + "then try again",
                             detail: "cert_sign for \(host): \(status) \(message)", kind: .certificateRefused)
    }
}
