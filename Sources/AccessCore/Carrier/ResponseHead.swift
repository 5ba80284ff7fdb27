/// The head of an HTTP/1.x response as the carrier reads it: the edge's answer to the WebSocket
/// upgrade, or a proxy's answer to `CONNECT`.
package struct ResponseHead: Sendable, Equatable {
    /// One header line, as received (the name's case kept, the value without surrounding blanks).
    package struct Field: Sendable, Equatable {
        /// The name, as sent.
        package let name: String
        /// The value, without leading and trailing spaces and tabs.
        package let value: String
    }

    /// The status code (three digits).
    package let status: Int
    /// The reason phrase, possibly empty.
    package let reason: String
    /// The header lines, in order.
    package let fields: [Field]

    /// The first value of the header called `name` (case-insensitive), if any.
    package func value(_ name: String) -> String? {
        let lowered = name.asciiLowercased
        return fields.first { $0.name.asciiLowercased == lowered }?.value
    }

    /// Whether some header called `name` lists `token` (comma-separated, case-insensitive), as
    /// `Connection: keep-alive, Upgrade` lists `upgrade`.
    package func lists(_ name: String, token: String) -> Bool {
        let lowered = name.asciiLowercased
        let wanted = token.asciiLowercased
        return fields.contains { field in
            field.name.asciiLowercased == lowered
                && field.value.split(separator: ",").contains { String($0).trimmingSpaces.asciiLowercased == wanted }
        }
    }
}

/// Reads one HTTP/1.x response head from bytes that arrive in any pieces, and says exactly where
/// it ended, so the bytes after it (a WebSocket's first frames, a TLS handshake through a proxy)
/// stay with their owner. Lines end in CRLF or a bare LF; the head ends at the first empty line.
///
/// Pure and bounded: at most `limit` bytes are kept, and an answer whose first bytes cannot start
/// `HTTP/` is named at once, without waiting for an end of head that will never come.
package struct ResponseHeadReader {
    /// What the bytes fed so far amount to.
    package enum Outcome: Sendable, Equatable {
        /// The head is not complete yet: feed more.
        case needMore
        /// The head is complete. `consumed` bytes of the last input belonged to it; the rest
        /// of that input comes after the head.
        case complete(ResponseHead, consumed: Int)
        /// The answer does not start with `HTTP/`: its first bytes (at most 7).
        case notHTTP(first: [UInt8])
        /// The head is complete but cannot be parsed: why.
        case malformed(String)
        /// No end of head within `limit` bytes.
        case tooLarge(limit: Int)
    }

    /// Largest head accepted, in bytes.
    package let limit: Int
    private var buffer: [UInt8] = []
    /// A final outcome, returned again if fed after it.
    private var finished: Outcome?

    /// The number of first bytes shown for an answer that is not HTTP.
    package static let shownPrefix = 7
    private static let httpPrefix: [UInt8] = Array("HTTP/".utf8)

    /// A reader for one head of at most `limit` bytes.
    package init(limit: Int = 64 << 10) {
        self.limit = limit
    }

    /// Bytes of the head received so far (for a caller that must account for them).
    package var bufferedCount: Int { buffer.count }

    /// Feeds the next bytes of the answer.
    package mutating func feed(_ input: UnsafeRawBufferPointer) -> Outcome {
        if let finished { return finished }
        var taken = 0
        while taken < input.count {
            let byte = input[taken]
            taken += 1
            buffer.append(byte)
            let position = buffer.count - 1
            if position < Self.httpPrefix.count, byte != Self.httpPrefix[position] {
                var first = buffer
                let more = min(Self.shownPrefix - first.count, input.count - taken)
                if more > 0 { first += input[taken..<(taken + more)] }
                return finish(.notHTTP(first: first))
            }
            if byte == 0x0A, endsWithEmptyLine(at: position) {
                return finish(parse(consumed: taken))
            }
            if buffer.count >= limit { return finish(.tooLarge(limit: limit)) }
        }
        return .needMore
    }

    /// Feeds bytes held in an array.
    package mutating func feed(_ bytes: [UInt8]) -> Outcome {
        bytes.withUnsafeBytes { feed($0) }
    }

    private mutating func finish(_ outcome: Outcome) -> Outcome {
        finished = outcome
        buffer = []
        return outcome
    }

    /// Whether the LF at `position` ends an empty line (LF LF, or LF CR LF).
    private func endsWithEmptyLine(at position: Int) -> Bool {
        if position >= 1, buffer[position - 1] == 0x0A { return true }
        return position >= 2 && buffer[position - 1] == 0x0D && buffer[position - 2] == 0x0A
    }

    private func parse(consumed: Int) -> Outcome {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        for i in buffer.indices where buffer[i] == 0x0A {
            var end = i
            if end > start, buffer[end - 1] == 0x0D { end -= 1 }
            lines.append(buffer[start..<end])
            start = i + 1
        }
        // The last line is the empty one that ended the head.
        lines.removeLast()
        guard let statusLine = lines.first, let (status, reason) = Self.statusLine(statusLine) else {
            return .malformed("a status line that is not \"HTTP/1.x NNN reason\"")
        }
        var fields: [ResponseHead.Field] = []
        for line in lines.dropFirst() {
            if let first = line.first, first == 0x20 || first == 0x09 {
                return .malformed("a folded header line")
            }
            guard let colon = line.firstIndex(of: 0x3A), colon > line.startIndex,
                  line[line.startIndex..<colon].allSatisfy(Self.isTokenByte) else {
                return .malformed("a header line that is not \"Name: value\"")
            }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingSpaces
            fields.append(ResponseHead.Field(name: name, value: value))
        }
        return .complete(ResponseHead(status: status, reason: reason, fields: fields), consumed: consumed)
    }

    /// `HTTP/1.x NNN reason` → (NNN, reason).
    private static func statusLine(_ line: ArraySlice<UInt8>) -> (Int, String)? {
        let text = String(decoding: line, as: UTF8.self)
        let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0] == "HTTP/1.1" || parts[0] == "HTTP/1.0",
              parts[1].count == 3, parts[1].allSatisfy({ $0.isASCII && $0.isNumber }), let status = Int(parts[1])
        else { return nil }
        return (status, parts.count == 3 ? String(parts[2]) : "")
    }

    /// RFC 9110 token characters.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}
