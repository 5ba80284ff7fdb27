/// OpenSSH's escape sequences on an interactive session's keyboard input: after a newline (and
/// at the start), the escape character (`~`) followed by `.` disconnects, by `?` lists the
/// sequences, by `~` sends one escape character; followed by anything else both characters go
/// through. The escape character alone waits for the next byte, even across reads.
///
/// A pure state machine over input bytes: feed each read to ``scan(_:)`` and act on what it
/// returns. ``SSHInteractiveChannel/run(input:output:escapes:)`` does this for a terminal.
///
/// ```swift
/// var escapes = SSHEscapes()
/// for action in escapes.scan(Array("ls\n~.".utf8)) {
///     switch action {
///     case .send(let bytes): channel.write(Data(bytes))     // "ls\n"
///     case .help: print(escapes.helpText, terminator: "")
///     case .disconnect: channel.close()                     // "~." after the newline
///     }
/// }
/// ```
public struct SSHEscapes: Sendable, Equatable {
    /// What the input asks for, in order.
    public enum Action: Sendable, Equatable {
        /// Bytes for the remote side.
        case send([UInt8])
        /// `~?`: show ``SSHEscapes/helpText`` locally.
        case help
        /// `~.`: end the connection now; the input after it is dropped.
        case disconnect
    }

    /// The escape character (OpenSSH's `EscapeChar`, `~` by default).
    public let escapeCharacter: UInt8
    /// Whether the last byte passed on ended a line (or nothing has been passed yet): only then
    /// does the escape character start a sequence.
    public private(set) var atLineStart = true
    /// Whether an escape character was seen and its sequence waits for the next byte.
    public private(set) var pending = false

    /// Escapes with `escapeCharacter` (`~` by default), at the start of a line.
    public init(escapeCharacter: UInt8 = UInt8(ascii: "~")) {
        self.escapeCharacter = escapeCharacter
    }

    /// The list `~?` shows, with CR LF line ends for a terminal in raw mode.
    public var helpText: String {
        let e = String(decoding: [escapeCharacter], as: UTF8.self)
        return [
            "Supported escape sequences:",
            " \(e).   - terminate connection",
            " \(e)?   - this message",
            " \(e)\(e)   - send the escape character by typing it twice",
            "(Note that escapes are only recognized immediately after newline.)",
        ].map { $0 + "\r\n" }.joined()
    }

    /// Scans `bytes` (the next read from the keyboard) and returns what to do, in order.
    /// Consecutive bytes to send come as one ``Action/send(_:)``; nothing after a
    /// ``Action/disconnect`` is returned.
    public mutating func scan(_ bytes: some Sequence<UInt8>) -> [Action] {
        var actions: [Action] = []
        var out: [UInt8] = []
        func flush() {
            if !out.isEmpty {
                actions.append(.send(out))
                out = []
            }
        }
        for byte in bytes {
            if pending {
                pending = false
                switch byte {
                case UInt8(ascii: "."):
                    flush()
                    actions.append(.disconnect)
                    return actions
                case UInt8(ascii: "?"):
                    flush()
                    actions.append(.help)
                    continue   // still at the start of a line: another escape may follow
                case escapeCharacter:
                    break      // one escape character goes through, below
                default:
                    out.append(escapeCharacter)
                }
            } else if atLineStart && byte == escapeCharacter {
                pending = true
                continue
            }
            atLineStart = byte == UInt8(ascii: "\r") || byte == UInt8(ascii: "\n")
            out.append(byte)
        }
        flush()
        return actions
    }
}
