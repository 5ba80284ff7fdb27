import AccessCore
import AccessTransport
import FoundationEssentials
import Glibc

/// How a login is being completed.
public enum LoginPresentation: Sendable, Equatable {
    /// A browser was started on this machine.
    case browser
    /// Device mode: the URL (and a QR code) were shown for another device.
    case device
}

/// What the user sees of a login, on stderr (stdout may carry tunnel bytes).
public protocol LoginPresenter: Sendable {
    /// The login URL is ready; a browser was started, or it must be opened elsewhere.
    func loginStarted(url: String, presentation: LoginPresentation)
    /// Still waiting, `elapsed` (whole seconds) after the start; called about once a second.
    func waiting(elapsed: Duration, presentation: LoginPresentation)
    /// Another process (`pid`) is logging in; `url` is its login URL if it wrote one.
    func waitingForOtherProcess(pid: Int32, url: String?)
    /// The wait is over (success or not).
    func loginEnded()
}

/// Writes the login prompts to stderr: the URL, in device mode a QR code of it, and a
/// progress line ("Waiting for login in the browser… 0:42"), redrawn in place on a terminal
/// and printed every 30 s otherwise.
public struct StderrLoginPresenter: LoginPresenter {
    private let isTerminal: Bool

    /// A presenter on file descriptor 2.
    public init() {
        isTerminal = isatty(STDERR_FILENO) == 1
    }

    /// Prints the URL; in device mode also the QR code.
    public func loginStarted(url: String, presentation: LoginPresentation) {
        var lines: [String] = []
        switch presentation {
        case .browser:
            lines.append("A browser window should have opened for the Cloudflare Access login.")
            lines.append("If it did not, open this URL yourself:")
            lines.append("")
            lines.append("  " + url)
        case .device:
            lines.append("No browser could be opened here. To log in to Cloudflare Access, open this URL")
            lines.append("on any device (or scan the QR code with a phone):")
            lines.append("")
            lines.append("  " + url)
            lines.append("")
            if let code = QRCode(encoding: url) {
                lines += code.halfBlockLines(quietZone: 2).map { "  " + $0 }
            }
        }
        lines.append("")
        Self.write(lines.joined(separator: "\n") + "\n")
    }

    /// The progress line.
    public func waiting(elapsed: Duration, presentation: LoginPresentation) {
        let elapsedSeconds = Int(elapsed.components.seconds)
        let place = presentation == .browser ? "in the browser" : "on the other device"
        let seconds = elapsedSeconds % 60
        let text = "Waiting for login \(place)… \(elapsedSeconds / 60):\((0..<10).contains(seconds) ? "0" : "")\(seconds)"
        if isTerminal {
            Self.write("\r\u{1B}[K" + text)
        } else if elapsedSeconds % 30 == 0 {
            Self.write(text + "\n")
        }
    }

    /// Says which process is logging in, and its URL.
    public func waitingForOtherProcess(pid: Int32, url: String?) {
        var text = "Another login (process \(pid)) is in progress; waiting for it to finish."
        if let url { text += " Its login URL:\n\n  \(url)\n" }
        Self.write(text + "\n")
    }

    /// Ends the progress line.
    public func loginEnded() {
        if isTerminal { Self.write("\r\u{1B}[K") }
    }

    private static func write(_ text: String) {
        FileDescriptors.writeAll(STDERR_FILENO, text)
    }
}
