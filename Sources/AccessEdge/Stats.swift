import Foundation

/// A point-in-time copy of the emulator's counters, served as JSON by
/// `GET /cdn-cgi/edge/stats`.
///
/// Direction: *In* is from the WebSocket client to the edge, *Out* is from the edge to the
/// client. Header values are never recorded, except the User-Agent.
struct EdgeStatsSnapshot: Sendable, Equatable {
    var upgradesAccepted = 0
    var upgradesRejected = 0
    var activeTunnels = 0
    var binaryFramesIn = 0
    var bytesIn = 0
    var binaryFramesOut = 0
    var bytesOut = 0
    var textFrames = 0
    var closeFramesReceived = 0
    var pingsReceived = 0
    var idleClosed = 0
    // Login protocol (Cloudflare's side).
    var metadataRequests = 0
    var jwksRequests = 0
    var cliPageRequests = 0
    var transferPolls = 0
    var transfersDelivered = 0
    var orgExchanges = 0
    var tokenChecks = 0
    var loginsCompleted = 0
    var appTokensIssued = 0
    var orgTokensIssued = 0
    var revocations = 0
    var keyRotations = 0
    var certSignRequests = 0
    var sshCertificatesSigned = 0
    var lastUserAgent = ""
    var lastHeaderNames: [String] = []

    /// The JSON object, keys in a fixed order, on one line.
    var json: String {
        let numbers: [(String, Int)] = [
            ("upgradesAccepted", upgradesAccepted),
            ("upgradesRejected", upgradesRejected),
            ("activeTunnels", activeTunnels),
            ("binaryFramesIn", binaryFramesIn),
            ("bytesIn", bytesIn),
            ("binaryFramesOut", binaryFramesOut),
            ("bytesOut", bytesOut),
            ("textFrames", textFrames),
            ("closeFramesReceived", closeFramesReceived),
            ("pingsReceived", pingsReceived),
            ("idleClosed", idleClosed),
            ("metadataRequests", metadataRequests),
            ("jwksRequests", jwksRequests),
            ("cliPageRequests", cliPageRequests),
            ("transferPolls", transferPolls),
            ("transfersDelivered", transfersDelivered),
            ("orgExchanges", orgExchanges),
            ("tokenChecks", tokenChecks),
            ("loginsCompleted", loginsCompleted),
            ("appTokensIssued", appTokensIssued),
            ("orgTokensIssued", orgTokensIssued),
            ("revocations", revocations),
            ("keyRotations", keyRotations),
            ("certSignRequests", certSignRequests),
            ("sshCertificatesSigned", sshCertificatesSigned),
        ]
        var fields = numbers.map { "\"\($0.0)\":\($0.1)" }
        fields.append("\"lastUserAgent\":\(JSONText.quoted(lastUserAgent))")
        let names = lastHeaderNames.map(JSONText.quoted).joined(separator: ",")
        fields.append("\"lastHeaderNames\":[\(names)]")
        return "{" + fields.joined(separator: ",") + "}"
    }
}

/// The emulator's shared, thread-safe counters.
///
/// Every event loop updates them; a single `NSLock` guards the snapshot. Updates are a few
/// integer additions, so the lock is held only briefly even on the data path.
final class EdgeStats: @unchecked Sendable {
    private let lock = NSLock()
    private var counters = EdgeStatsSnapshot()

    private func update(_ body: (inout EdgeStatsSnapshot) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        body(&counters)
    }

    /// A consistent copy of every counter.
    func snapshot() -> EdgeStatsSnapshot {
        lock.lock()
        defer { lock.unlock() }
        return counters
    }

    /// Remembers the header names (lower-cased, in order) and User-Agent of an upgrade request.
    func recordUpgradeRequest(headerNames: [String], userAgent: String) {
        update {
            $0.lastHeaderNames = headerNames
            $0.lastUserAgent = userAgent
        }
    }

    /// An upgrade was answered `101`: it is also an active tunnel until `tunnelEnded()`.
    func upgradeAccepted() {
        update {
            $0.upgradesAccepted += 1
            $0.activeTunnels += 1
        }
    }

    func upgradeRejected() { update { $0.upgradesRejected += 1 } }
    func tunnelEnded() { update { $0.activeTunnels -= 1 } }
    func textFrameReceived() { update { $0.textFrames += 1 } }
    func closeFrameReceived() { update { $0.closeFramesReceived += 1 } }
    func pingReceived() { update { $0.pingsReceived += 1 } }
    func idleTunnelClosed() { update { $0.idleClosed += 1 } }

    /// Counts one login-protocol event.
    func record(_ event: AuthEvent) {
        update {
            switch event {
            case .metadataRequest: $0.metadataRequests += 1
            case .jwksRequest: $0.jwksRequests += 1
            case .cliPageRequest: $0.cliPageRequests += 1
            case .transferPoll: $0.transferPolls += 1
            case .transferDelivered: $0.transfersDelivered += 1
            case .orgExchange: $0.orgExchanges += 1
            case .tokenCheck: $0.tokenChecks += 1
            case .loginCompleted: $0.loginsCompleted += 1
            case .appTokenIssued: $0.appTokensIssued += 1
            case .orgTokenIssued: $0.orgTokensIssued += 1
            case .tokensRevoked: $0.revocations += 1
            case .keyRotated: $0.keyRotations += 1
            case .certSignRequest: $0.certSignRequests += 1
            case .sshCertificateSigned: $0.sshCertificatesSigned += 1
            }
        }
    }

    /// Payload of data frames (binary or continuation) arrived from the client: `bytes` bytes,
    /// the start of `frames` frames (payload is counted as it arrives, a frame at its start).
    func dataIn(frames: Int, bytes: Int) {
        update {
            $0.binaryFramesIn += frames
            $0.bytesIn += bytes
        }
    }

    /// A binary frame of `bytes` payload bytes was sent to the client.
    func dataFrameOut(bytes: Int) {
        update {
            $0.binaryFramesOut += 1
            $0.bytesOut += bytes
        }
    }
}

/// A login-protocol event the stats count.
enum AuthEvent: Sendable {
    /// A request with `cf-access-metadata-request: true` (answered with or without metadata).
    case metadataRequest
    /// `GET /cdn-cgi/access/certs` on the auth domain.
    case jwksRequest
    /// A request for `/cdn-cgi/access/cli` (valid or not).
    case cliPageRequest
    /// A request for `/transfer/<key>` (any answer).
    case transferPoll
    /// A transfer poll answered 200.
    case transferDelivered
    /// `/cdn-cgi/access/authorized` spent a `CF_AppSession` and set an app token.
    case orgExchange
    /// A request with `cloudflared_token_check=true` (valid or not).
    case tokenCheck
    /// A login was completed (cli page in `auto` mode, or the admin call).
    case loginCompleted
    /// An app token was issued.
    case appTokenIssued
    /// An org token was issued.
    case orgTokenIssued
    /// `POST /cdn-cgi/edge/admin/revoke` ran.
    case tokensRevoked
    /// The signing key was rotated.
    case keyRotated
    /// A request for `/cdn-cgi/access/cert_sign` (valid or not).
    case certSignRequest
    /// A short-lived SSH certificate was signed.
    case sshCertificateSigned
}

/// Minimal JSON string quoting (RFC 8259 escapes), so no encoder is needed for one object.
enum JSONText {
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += String(format: "\\u%04x", scalar.value)
            default:
                out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
