import Foundation
import NIOHTTP1

/// One HTTP request as the routes see it: host and port split from `Host`, the path, the
/// decoded query and cookies.
struct EdgeRequest {
    var method: HTTPMethod
    /// The request target as sent (path and query).
    var uri: String
    /// `Host` without its port, lower-cased (IPv6 keeps its brackets); `unknown-host` if absent.
    var host: String
    /// `:<port>` from `Host`, or "" when it has none. URLs the emulator makes for its own
    /// names carry it, since every name is served on the one listener.
    var portSuffix: String
    /// The path, still percent-encoded.
    var path: String
    /// Query parameters, percent-decoded (`+` is a space); the first value of a name wins.
    var query: [String: String]
    var headers: HTTPHeaders
    /// Cookies of every `Cookie` header; the first value of a name wins.
    var cookies: [String: String]

    init(_ head: HTTPRequestHead) {
        method = head.method
        uri = head.uri
        headers = head.headers
        let hostHeader = (head.headers.first(name: "Host") ?? "").trimmingCharacters(in: .whitespaces).lowercased()
        (host, portSuffix) = Self.splitHost(hostHeader)
        let target = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        path = String(target.first ?? "")
        var query: [String: String] = [:]
        if target.count == 2 {
            for pair in target[1].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = Self.percentDecoded(String(parts[0]), plusIsSpace: true)
                let value = parts.count == 2 ? Self.percentDecoded(String(parts[1]), plusIsSpace: true) : ""
                if query[name] == nil { query[name] = value }
            }
        }
        self.query = query
        cookies = Self.cookies(in: head.headers)
    }

    /// The cookies of every `Cookie` header (`a=b; c="d"`); the first value of a name wins.
    static func cookies(in headers: HTTPHeaders) -> [String: String] {
        var cookies: [String: String] = [:]
        for line in headers["Cookie"] {
            for pair in line.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let name = parts[0].trimmingCharacters(in: .whitespaces)
                guard parts.count == 2, !name.isEmpty, cookies[name] == nil else { continue }
                var value = parts[1].trimmingCharacters(in: .whitespaces)
                if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                    value = String(value.dropFirst().dropLast())
                }
                cookies[name] = value
            }
        }
        return cookies
    }

    /// `https://<host><portSuffix>`: this request's own origin.
    var origin: String { "https://\(host)\(portSuffix)" }

    /// Splits a lower-cased `Host` value into host and `:port` suffix.
    static func splitHost(_ value: String) -> (host: String, portSuffix: String) {
        if value.hasPrefix("["), let close = value.firstIndex(of: "]") {
            let rest = value[value.index(after: close)...]
            return (String(value[...close]), rest.hasPrefix(":") ? String(rest) : "")
        }
        if let colon = value.firstIndex(of: ":") {
            return (String(value[..<colon]), String(value[colon...]))
        }
        return (value.isEmpty ? "unknown-host" : value, "")
    }

    /// Percent-decodes `text`; malformed escapes are kept as they are.
    static func percentDecoded(_ text: String, plusIsSpace: Bool) -> String {
        let spaced = plusIsSpace ? text.replacingOccurrences(of: "+", with: " ") : text
        return spaced.removingPercentEncoding ?? spaced
    }
}
