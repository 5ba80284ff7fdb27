import FoundationEssentials

/// Reads what a server sends before its SSH identification (`SSH-2.0-…`, RFC 4253 §4.2) the way
/// OpenSSH does, before libssh reads the identification itself: lines before it are dropped, at
/// most ``maxLines`` of them, each at most ``maxLineLength`` bytes; a NUL byte, a longer line or
/// more lines mean the peer is not an SSH server. A pure value fed with the bytes as they arrive.
package struct IdentificationScanner: Sendable {
    /// What the bytes so far amount to.
    package enum Outcome: Sendable, Equatable {
        /// No identification yet: read more.
        case needMore
        /// The identification arrived: ``passOn`` holds it and every byte after it.
        case identified
        /// Not an SSH server: the reason, one line.
        case refused(String)
    }

    /// OpenSSH's limit on a line before or of the identification (`SSH_MAX_BANNER_LEN`).
    package static let maxLineLength = 8192
    /// OpenSSH's limit on the lines before the identification (`SSH_MAX_PRE_BANNER_LINES`).
    package static let maxLines = 1024
    /// The longest identification line RFC 4253 §4.2 allows, CR LF included.
    package static let maxIdentificationLength = 255

    private var buffer: [UInt8] = []
    private var firstLine: [UInt8]?
    /// Lines dropped before the identification.
    package private(set) var ignoredLines = 0
    /// Once identified: the identification line and what followed it.
    package private(set) var passOn: [UInt8] = []
    /// The length of the identification line, line end included, at the start of ``passOn``.
    package private(set) var identificationLineLength = 0
    /// The identification without its line end, visible-safe (`SSH-2.0-OpenSSH_9.2p1 Debian-2`).
    package private(set) var identification: String?
    /// The outcome so far.
    package private(set) var outcome = Outcome.needMore

    /// A scanner that has seen nothing.
    package init() {}

    /// Feeds the next bytes from the server; returns the outcome so far.
    @discardableResult
    package mutating func feed<Bytes: Collection>(_ bytes: Bytes) -> Outcome where Bytes.Element == UInt8 {
        guard outcome == .needMore else { return outcome }
        buffer.append(contentsOf: bytes)
        while true {
            guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else {
                if buffer.contains(0) { return refuse("a NUL byte") }
                if buffer.count > Self.maxLineLength {
                    return refuse("\(Self.maxLineLength) bytes without a line end")
                }
                return .needMore
            }
            let line = Array(buffer[..<newline])
            if line.count + 1 > Self.maxLineLength { return refuse("a line longer than \(Self.maxLineLength) bytes") }
            if line.contains(0) { return refuse("a NUL byte") }
            if line.starts(with: Array("SSH-".utf8)) {
                guard line.count + 1 <= Self.maxIdentificationLength else {
                    outcome = .refused("the SSH server's identification line is longer than \(Self.maxIdentificationLength) bytes (RFC 4253)")
                    return outcome
                }
                var text = line[...]
                if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
                identification = ServerText.visible(text)
                identificationLineLength = newline + 1
                passOn = buffer
                buffer = []
                outcome = .identified
                return outcome
            }
            if firstLine == nil { firstLine = line }
            ignoredLines += 1
            if ignoredLines > Self.maxLines { return refuse("more than \(Self.maxLines) lines") }
            buffer.removeFirst(newline + 1)
        }
    }

    /// What the peer sent first, visible-safe and short, for messages.
    package var sample: String {
        var bytes = firstLine ?? buffer
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        return ServerText.visible(bytes.prefix(48)) + (bytes.count > 48 ? "…" : "")
    }

    private mutating func refuse(_ what: String) -> Outcome {
        outcome = .refused("not an SSH server: it sent \(what) and no SSH identification (it began \"\(sample)\")")
        return outcome
    }
}
