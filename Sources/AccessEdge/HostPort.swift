/// A `HOST:PORT` pair as typed on the command line or sent in
/// `Cf-Access-Jump-Destination`.
///
/// Accepted forms: `name:port`, `1.2.3.4:port` and `[v6::addr]:port`. The port is decimal,
/// `0...65535` when `allowsZeroPort` (listening), `1...65535` otherwise (dialling).
struct HostPort: Sendable, Hashable, CustomStringConvertible {
    /// Host name or address literal, without brackets.
    let host: String
    /// TCP port.
    let port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `text`, or returns `nil` when it is not a well-formed `HOST:PORT`.
    init?(parsing text: String, allowsZeroPort: Bool = false) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let hostPart: Substring
        let portPart: Substring
        if trimmed.hasPrefix("[") {
            guard let close = trimmed.firstIndex(of: "]") else { return nil }
            hostPart = trimmed[trimmed.index(after: trimmed.startIndex)..<close]
            let rest = trimmed[trimmed.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            portPart = rest.dropFirst()
        } else {
            guard let colon = trimmed.lastIndex(of: ":") else { return nil }
            hostPart = trimmed[..<colon]
            portPart = trimmed[trimmed.index(after: colon)...]
            // An unbracketed host must not itself contain a colon (bare IPv6 is ambiguous).
            guard !hostPart.contains(":") else { return nil }
        }
        guard !hostPart.isEmpty,
              !hostPart.contains(where: { $0.isWhitespace || $0 == "/" || $0 == "@" }),
              !portPart.isEmpty, portPart.count <= 5,
              portPart.allSatisfy({ $0.isASCII && $0.isNumber }),
              let port = Int(portPart),
              port <= 65535, port >= (allowsZeroPort ? 0 : 1)
        else { return nil }
        self.host = String(hostPart)
        self.port = port
    }

    /// `host:port`, bracketing an IPv6 literal.
    var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
