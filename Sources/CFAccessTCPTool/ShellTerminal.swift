import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Questions to the person at the controlling terminal (`/dev/tty`), never through stdin or
/// stdout, which may carry a command's data.
final class TerminalPrompter: @unchecked Sendable {
    private let fd: Int32?

    init() {
        let opened = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)
        fd = opened >= 0 ? opened : nil
    }

    deinit { if let fd { close(fd) } }

    /// Whether there is a terminal to ask.
    var isAvailable: Bool { fd != nil }

    /// Writes `text` to the terminal (or stderr without one).
    func say(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(fd ?? 2, $0.baseAddress, $0.count) }
    }

    /// Shows `prompt` and reads one line; without `echo` the typing is not shown (and the
    /// terminal's settings are restored afterwards, on every path). nil without a terminal or
    /// at end of input.
    func readLine(prompt: String, echo: Bool) -> String? {
        guard let fd else { return nil }
        var original = termios()
        let isTerminal = tcgetattr(fd, &original) == 0
        if !echo && isTerminal {
            TerminalRestorer.remember(fd: fd, original)
            var quiet = original
            quiet.c_lflag &= ~tcflag_t(ECHO | ECHONL)
            quiet.c_lflag |= tcflag_t(ICANON)
            _ = tcsetattr(fd, TCSAFLUSH, &quiet)
        }
        // The prompt only once echo is off: what is typed after it is never shown or dropped.
        say(prompt)
        defer {
            if !echo && isTerminal {
                _ = tcsetattr(fd, TCSAFLUSH, &original)
                TerminalRestorer.forget()
                say("\n")
            }
        }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(fd, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r") { break }
            line.append(byte)
        }
        return String(decoding: line, as: UTF8.self)
    }
}

/// Puts a terminal back the way it was on every way out: normal return, `exit()` (an atexit
/// hook) and SIGTERM/SIGHUP/SIGINT (handlers that exit).
enum TerminalRestorer {
    nonisolated(unsafe) private static var saved: (fd: Int32, settings: termios)?
    nonisolated(unsafe) private static var hooked = false

    /// Remembers `settings` of `fd` as the ones to restore.
    static func remember(fd: Int32, _ settings: termios) {
        saved = (fd, settings)
        if !hooked {
            hooked = true
            atexit { TerminalRestorer.restore() }
        }
    }

    /// Forgets the settings (they were restored by their owner).
    static func forget() { saved = nil }

    /// Restores the remembered settings, if any.
    static func restore() {
        guard var state = saved else { return }
        _ = tcsetattr(state.fd, TCSAFLUSH, &state.settings)
        saved = nil
    }
}

/// Raw mode on the local terminal for an interactive shell.
struct RawTerminal {
    let fd: Int32
    private var original = termios()

    /// Switches `fd` to raw mode; nil if it is not a terminal.
    init?(fd: Int32) {
        self.fd = fd
        guard tcgetattr(fd, &original) == 0 else { return nil }
        TerminalRestorer.remember(fd: fd, original)
        var raw = original
        cfmakeraw(&raw)
        _ = tcsetattr(fd, TCSAFLUSH, &raw)
    }

    /// Back to the original mode (for messages between reconnects, and at the end).
    func restore() {
        var settings = original
        _ = tcsetattr(fd, TCSAFLUSH, &settings)
    }

    /// Raw mode again after `restore()`.
    func enterRawAgain() {
        var raw = original
        cfmakeraw(&raw)
        _ = tcsetattr(fd, TCSAFLUSH, &raw)
    }
}

/// The window size of the terminal on `fd` (80×24 if it has none).
func terminalSize(_ fd: Int32) -> (columns: Int, rows: Int) {
    var size = winsize()
    if ioctl(fd, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0, size.ws_row > 0 {
        return (Int(size.ws_col), Int(size.ws_row))
    }
    return (80, 24)
}
