/// The head of an HTTP/1.x response as the carrier reads it: the edge's answer to the WebSocket
/// upgrade, or a proxy's answer to `CONNECT`.
package struct ResponseHead: Sendable, Equatable {
    /// One header line, as received (the name's case kept, the value without surrounding blanks).
    package struct Field: Sendable, Equatable {
        /// The name, as sent.
        package let name: String
        /// The value, without leading and trailing spaces and tabs.
        package let value: String
        /// The name's bytes in ASCII lower case, for lookups.
        let key: [UInt8]

        init(name: ArraySlice<UInt8>, value: ArraySlice<UInt8>) {
            self.name = String(decoding: name, as: UTF8.self)
            self.value = String(decoding: value, as: UTF8.self)
            key = name.map(ASCII.lowercased)
        }
    }

    /// The status code (three digits).
    package let status: Int
    /// The reason phrase, possibly empty.
    package let reason: String
    /// The header lines, in order.
    package let fields: [Field]

    /// The first value of the header called `name` (case-insensitive), if any.
    package func value(_ name: String) -> String? {
        let key = name.utf8.map(ASCII.lowercased)
        return fields.first { $0.key == key }?.value
    }

    /// Whether some header called `name` lists `token` (comma-separated, case-insensitive), as
    /// `Connection: keep-alive, Upgrade` lists `upgrade`.
    package func lists(_ name: String, token: String) -> Bool {
        let key = name.utf8.map(ASCII.lowercased)
        let wanted = token.utf8.map(ASCII.lowercased)
        return fields.contains { field in
            field.key == key && field.value.utf8.split(separator: UInt8(ascii: ",")).contains { item in
                ASCII.trimmed(item).map(ASCII.lowercased).elementsEqual(wanted)
            }
        }
    }
}

/// Byte-level helpers for HTTP heads (ASCII only, no Unicode work on the carrier's hot path).
enum ASCII {
    static func lowercased(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    static func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 }

    /// `bytes` without leading and trailing spaces and tabs.
    static func trimmed<C: BidirectionalCollection>(_ bytes: C) -> C.SubSequence where C.Element == UInt8 {
        var slice = bytes[bytes.startIndex...]
        while let first = slice.first, isBlank(first) { slice = slice.dropFirst() }
        while let last = slice.last, isBlank(last) { slice = slice.dropLast() }
        return slice
    }

    /// RFC 9110 token characters.
    static func isToken(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
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
    /// The last two bytes seen (0 before any), to find an empty line across pieces.
    private var previous: (UInt8, UInt8) = (0, 0)
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
        // The first bytes must spell "HTTP/".
        var checked = 0
        while buffer.count + checked < Self.httpPrefix.count, checked < input.count {
            if input[checked] != Self.httpPrefix[buffer.count + checked] {
                var first = buffer
                first += input.prefix(Self.shownPrefix - first.count)
                return finish(.notHTTP(first: first))
            }
            checked += 1
        }
        // The end of the head: an LF right after an LF, or after LF CR.
        var (beforeLast, last) = previous
        for i in 0..<input.count {
            let byte = input[i]
            if byte == 0x0A, last == 0x0A || (last == 0x0D && beforeLast == 0x0A) {
                guard buffer.count + i + 1 <= limit else { return finish(.tooLarge(limit: limit)) }
                buffer += input[0...i]
                return finish(parse(consumed: i + 1))
            }
            beforeLast = last
            last = byte
        }
        previous = (beforeLast, last)
        guard buffer.count + input.count < limit else { return finish(.tooLarge(limit: limit)) }
        buffer += input
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
            if let first = line.first, ASCII.isBlank(first) {
                return .malformed("a folded header line")
            }
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                  line[line.startIndex..<colon].allSatisfy(ASCII.isToken) else {
                return .malformed("a header line that is not \"Name: value\"")
            }
            fields.append(ResponseHead.Field(name: line[line.startIndex..<colon], value: ASCII.trimmed(line[(colon + 1)...])))
        }
        return .complete(ResponseHead(status: status, reason: reason, fields: fields), consumed: consumed)
    }

    /// `HTTP/1.x NNN reason` (or `HTTP/1.x NNN`) → (NNN, reason).
    private static func statusLine(_ line: ArraySlice<UInt8>) -> (Int, String)? {
        let bytes = Array(line)
        guard bytes.count >= 12, bytes.starts(with: Array("HTTP/1.".utf8)),
              bytes[7] == UInt8(ascii: "0") || bytes[7] == UInt8(ascii: "1"), bytes[8] == 0x20 else { return nil }
        var status = 0
        for byte in bytes[9..<12] {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            status = status * 10 + Int(byte - UInt8(ascii: "0"))
        }
        if bytes.count == 12 { return (status, "") }
        guard bytes[12] == 0x20 else { return nil }
        return (status, String(decoding: bytes[13...], as: UTF8.self))
    }
}
