import AccessCore

/// Turns what libwebsockets tells us about a failed dial into a typed failure with a plain message.
///
/// libwebsockets reports a refused upgrade as an HTTP status on the wsi, a TLS failure mostly
/// through its log, and socket errors as short texts; this keeps the mapping in one pure place.
enum DialFailureClassifier {
    static func classify(host: String, address: String, credential: CredentialKind, status: Int,
                         location: String?, message: String, tlsReason: String?, recentLog: [String],
                         timeoutSeconds: Int, proxy: String? = nil, notHTTPStart: String? = nil) -> TunnelFailure {
        if let notHTTPStart {
            // The clamped read of the answer stopped at the first byte that cannot start "HTTP/"
            // (ssl_read_clamp.c, issue 12.6); these are the bytes it kept.
            let shown = notHTTPStart.unicodeScalars.map {
                $0.properties.isWhitespace || $0.value < 0x20 || $0.value > 0x7e ? "·" : String($0)
            }.joined()
            return .protocolViolation("\(host) answered the WebSocket upgrade with \"\(shown)…\", "
                + "which is not HTTP (an SSH server or another service where the edge should be?)")
        }
        if status >= 200 && status != 101 {
            let refusal = UpgradeRefusal.classify(status: status, location: location)
            if case .accessLoginRequired(let loginURL) = refusal {
                return .accessRejected(host: host, credential: credential, loginURL: loginURL)
            }
            return .refused(host: host, refusal: refusal)
        }
        let lowered = message.lowercased()
        if let proxy, lowered.contains("proxy") {
            // libwebsockets' words when the proxy's answer to CONNECT is not "HTTP/1.1 200".
            return TunnelFailure(category: .transport, isRetryable: false,
                                 message: "The proxy \(proxy) refused to connect to \(address), or answered CONNECT "
                                     + "with something else than 200: check HTTPS_PROXY and NO_PROXY",
                                 detail: "\(proxy): \(message)", kind: .proxyRefused)
        }
        if let proxy, status == 0, lowered.contains("refused") || lowered.contains("unable to connect")
            || lowered.contains("connect failed") {
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "Connection refused by the proxy \(proxy): check HTTPS_PROXY, or NO_PROXY for a direct dial",
                                 detail: "TCP connect to the proxy \(proxy): \(message)", kind: .connectionRefused)
        }
        if status == 0, lowered == "read failed" {
            // TCP and TLS were up, then the stream ended before a whole HTTP answer came.
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "\(host) closed the connection without a complete answer to the WebSocket upgrade "
                                     + "(an answer that is not HTTP, or a dropped connection): check that the hostname is an "
                                     + "Access application for TCP, then try again",
                                 detail: "\(address): \(message)", subject: .hostname, kind: .connectionLost)
        }
        if let broken = brokenUpgradeAnswer(message) {
            // The edge answered, but not with a usable WebSocket upgrade: its fault, not the network's.
            return .protocolViolation("\(host) answered the WebSocket upgrade with \(broken)")
        }
        if let tlsReason {
            return .tls(host: host, reason: tlsReason)
        }
        if lowered.contains("tls") || lowered.contains("ssl") || lowered.contains("cert") {
            let logged = recentLog.last { line in
                let l = line.lowercased()
                return l.contains("ssl") || l.contains("tls") || l.contains("cert") || l.contains("verify")
            }
            return .tls(host: host, reason: logged.map(trimLogPrefix) ?? message)
        }
        if lowered.contains("timed out") || lowered.contains("timeout") {
            return .timedOut(host: host, seconds: timeoutSeconds)
        }
        if lowered.contains("refused") || lowered.contains("unable to connect") || lowered.contains("connect failed") {
            return .connectionRefused(address: address)
        }
        if lowered.contains("unreachable") || lowered.contains("no route") {
            return .networkUnavailable(detail: "\(address): \(message)")
        }
        if lowered.contains("dns") || lowered.contains("getaddrinfo") || lowered.contains("lookup") {
            return .dns(host: host)
        }
        if status == 0 && message.isEmpty {
            return .internalError("the WebSocket to \(host) failed without a reason")
        }
        return .networkUnavailable(detail: "\(address): \(message)")
    }

    /// What libwebsockets' words for a bad answer to the upgrade mean, or nil for other failures.
    static func brokenUpgradeAnswer(_ message: String) -> String? {
        let lowered = message.lowercased()
        if lowered.contains("accept hash") { return "a wrong Sec-WebSocket-Accept in the 101 answer" }
        if lowered.contains("problems parsing header") {
            return "a response head that cannot be parsed (malformed, or larger than the header buffer)"
        }
        if lowered.hasPrefix("hs: ") && !lowered.contains("not 101") {
            return "a broken upgrade answer (\(message.dropFirst(4)))"
        }
        return nil
    }

    /// libwebsockets log lines start with a timestamp and level tag; keep the text after them.
    private static func trimLogPrefix(_ line: String) -> String {
        var text = Substring(line)
        if let range = text.range(of: "]: ") ?? text.range(of: "] ") { text = text[range.upperBound...] }
        // The level tag of libwebsockets 4.1 ("E: ", "W: ", "N: ").
        if text.count > 3, let tag = text.first, tag.isUppercase, text.dropFirst().hasPrefix(": ") {
            text = text.dropFirst(3)
        }
        return String(text)
    }
}
