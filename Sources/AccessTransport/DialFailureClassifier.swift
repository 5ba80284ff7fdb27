import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// How a dial failed, as the carrier saw it (`Bridge+Dial.swift`): typed by the stage it was in,
/// from our own system calls and reads, never a library's message texts.
enum DialProblem: Sendable, Equatable {
    /// The TCP connection (to the edge, or to the proxy) could not be opened: the system's error.
    case tcpConnect(SystemError)
    /// The dial took longer than the handshake timeout.
    case timedOut
    /// The proxy answered `CONNECT` with a status other than 2xx.
    case proxyRefused(status: Int, reason: String)
    /// The proxy's answer was not a readable HTTP head, or the proxy closed: what happened.
    case proxyBroken(String)
    /// The TLS handshake failed: OpenSSL's reason (the certificate's, else the library error's).
    case tls(String)
    /// The connection ended during the TLS handshake (the peer closed it or reset it): how.
    case closedDuringTLS(String)
    /// No certificate the edge presented carries a pinned key: the pins it showed, described.
    case pinMismatch(presented: [String])
    /// The connection ended before the whole answer to the upgrade came: how.
    case closedBeforeAnswer(String)
    /// The answer's first bytes cannot start `HTTP/`.
    case notHTTP(first: [UInt8])
    /// The answer's head cannot be parsed (malformed, or larger than the limit): why.
    case unreadableAnswer(String)
    /// A `101` that does not open a WebSocket: why (`WebSocketUpgrade.Verdict.broken`).
    case brokenAnswer(String)
    /// Any other status: a refusal.
    case refused(status: Int, location: String?)
}

/// Turns a failed dial into a typed failure with a plain message. Pure: one place for the rules.
enum DialFailureClassifier {
    /// What was dialled, for the messages.
    struct Context: Sendable {
        /// The origin's host name (what the user typed).
        var host: String
        /// The address actually dialled, `host:port` (the edge's, even through a proxy).
        var address: String
        /// The credential the upgrade carried.
        var credential: CredentialKind
        /// The proxy (`host:port`), if the dial went through one.
        var proxy: String?
        /// The handshake timeout, in seconds.
        var timeoutSeconds: Int
    }

    static func classify(_ problem: DialProblem, _ context: Context) -> TunnelFailure {
        let host = context.host
        let address = context.address
        switch problem {
        case .tcpConnect(let error):
            if error.isOutOfDescriptors { return error.tunnelFailure }
            if let proxy = context.proxy {
                if error.code == ECONNREFUSED {
                    return TunnelFailure(category: .transport, isRetryable: true,
                                         message: "Connection refused by the proxy \(proxy): check HTTPS_PROXY, or NO_PROXY for a direct dial",
                                         detail: "TCP connect to the proxy \(proxy): \(error.text)", kind: .connectionRefused)
                }
                return TunnelFailure(category: .transport, isRetryable: true,
                                     message: "Cannot reach the proxy \(proxy) (\(error.text)): check HTTPS_PROXY, or NO_PROXY for a direct dial",
                                     detail: "TCP connect to the proxy \(proxy): \(error.text)", kind: .networkUnavailable)
            }
            switch error.code {
            case ECONNREFUSED: return .connectionRefused(address: address)
            case ETIMEDOUT: return .timedOut(host: host, seconds: context.timeoutSeconds)
            default: return .networkUnavailable(detail: "\(address): \(error.text)")
            }
        case .timedOut:
            return .timedOut(host: host, seconds: context.timeoutSeconds)
        case .proxyRefused(let status, let reason):
            return proxyRefusal(context, detail: "HTTP \(status)\(reason.isEmpty ? "" : " " + reason)")
        case .proxyBroken(let what):
            return proxyRefusal(context, detail: what)
        case .tls(let reason):
            return .tls(host: host, reason: reason)
        case .pinMismatch(let presented):
            return .pinMismatch(host: host, presented: presented)
        case .closedDuringTLS(let how):
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "\(address) ended the connection during the TLS handshake (\(how)): "
                                     + "check that it is the Cloudflare edge for \(host), then try again",
                                 detail: "\(address): \(how) during the TLS handshake", subject: .hostname, kind: .connectionLost)
        case .closedBeforeAnswer(let how):
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "\(host) closed the connection without a complete answer to the WebSocket upgrade "
                                     + "(\(how)): check that the hostname is an Access application for TCP, then try again",
                                 detail: "\(address): \(how)", subject: .hostname, kind: .connectionLost)
        case .notHTTP(let first):
            return .protocolViolation("\(host) answered the WebSocket upgrade with \"\(shown(first))…\", "
                + "which is not HTTP (an SSH server or another service where the edge should be?)")
        case .unreadableAnswer(let why):
            return .protocolViolation("\(host) answered the WebSocket upgrade with a response head that cannot be parsed (\(why))")
        case .brokenAnswer(let what):
            return .protocolViolation("\(host) answered the WebSocket upgrade with \(what)")
        case .refused(let status, let location):
            let refusal = UpgradeRefusal.classify(status: status, location: location)
            if case .accessLoginRequired(let loginURL) = refusal {
                return .accessRejected(host: host, credential: context.credential, loginURL: loginURL)
            }
            return .refused(host: host, refusal: refusal)
        }
    }

    /// Bytes as one line of printable ASCII: anything else (spaces too) is a dot.
    static func shown(_ bytes: [UInt8]) -> String {
        String(decoding: bytes, as: UTF8.self).unicodeScalars.map {
            $0.properties.isWhitespace || $0.value < 0x20 || $0.value > 0x7e ? "·" : String($0)
        }.joined()
    }

    private static func proxyRefusal(_ context: Context, detail: String) -> TunnelFailure {
        let proxy = context.proxy ?? "?"
        return TunnelFailure(category: .transport, isRetryable: false,
                             message: "The proxy \(proxy) refused to connect to \(context.address), or answered CONNECT "
                                 + "with something else than 200: check HTTPS_PROXY and NO_PROXY",
                             detail: "\(proxy): \(detail)", kind: .proxyRefused)
    }
}
