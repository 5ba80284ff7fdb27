import Foundation

/// Process-level output: the one announcement line on stdout, diagnostics on stderr.
///
/// Both are written straight to the file descriptors (no stdio buffering), so a test that
/// reads the announcement line sees it at once; a closed stream is ignored, never fatal.
enum Console {
    /// Writes `line` and a newline to stdout, unbuffered.
    static func announce(_ line: String) {
        try? FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Writes `line` and a newline to stderr, unbuffered.
    static func diagnostic(_ line: String) {
        try? FileHandle.standardError.write(contentsOf: Data(("cf-access-edge: " + line + "\n").utf8))
    }
}

/// A tiny stderr logger: errors always, per-connection events only with `--verbose`.
struct EdgeLog: Sendable {
    var verbose: Bool

    func info(_ message: @autoclosure () -> String) {
        if verbose { Console.diagnostic(message()) }
    }

    func error(_ message: String) {
        Console.diagnostic(message)
    }
}
