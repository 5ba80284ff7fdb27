import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A mistake in an ssh_config file or a `-o` option: where it is and what is wrong, as one
/// line (`/home/me/.ssh/config:12: Port "abc" is not a port number (1 to 65535)`).
public struct SSHConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file, or the command-line option (`-o Port=abc`) the mistake is in.
    public let source: String
    /// The line number in `source` (0 for a command-line option).
    public let line: Int
    /// What is wrong, and what to do.
    public let reason: String

    /// A mistake at `line` of `source`.
    public init(source: String, line: Int, reason: String) {
        self.source = source
        self.line = line
        self.reason = reason
    }

    /// `source:line: reason` (`source: reason` for a command-line option).
    public var description: String { line > 0 ? "\(source):\(line): \(reason)" : "\(source): \(reason)" }
}

/// One ssh_config file (OpenSSH's `ssh_config(5)` syntax), split into lines of a keyword and
/// its arguments: `Keyword value`, `Keyword=value`, quotes, `#` comments. Nothing is decided
/// here; ``SSHConfigResolver`` applies the lines for a host.
///
/// ```swift
/// let file = try SSHConfigFile(text: "Host work\n  HostName ssh.example.com\n  User me\n",
///                              path: "/home/me/.ssh/config")
/// let settings = try SSHConfigResolver(files: [file], context: .current(environment: [:]))
///     .resolve(host: "work")
/// // settings.hostName == "ssh.example.com", settings.user == "me"
/// ```
public struct SSHConfigFile: Sendable, Equatable {
    /// Whose file it is: an `Include` with a relative path is looked up in `~/.ssh` for the
    /// user's files (and `-F`), in `/etc/ssh` for the system's.
    public enum Kind: Sendable, Equatable {
        /// `~/.ssh/config`, a file given with `-F`, or a `-o` option.
        case user
        /// `/etc/ssh/ssh_config` and what it includes.
        case system
    }

    /// One line with a keyword.
    struct Line: Sendable, Equatable {
        /// The line number (0 for a `-o` option).
        let number: Int
        /// The keyword as written (for messages).
        let keyword: String
        /// The keyword lower-cased (keywords are case-insensitive).
        let name: String
        /// The arguments, quotes removed.
        let arguments: [String]
        /// Where it was written when that is not the file (a `-o` option).
        var source: String?
    }

    /// Where the lines came from: the file's path, or the `-o` option.
    public let path: String
    /// Whose file it is.
    public let kind: Kind
    let lines: [Line]

    /// Splits `text` (the contents of the file at `path`) into lines. Throws for a line whose
    /// quotes do not close or whose keyword has no argument.
    public init(text: String, path: String, kind: Kind = .user) throws(SSHConfigError) {
        var lines: [Line] = []
        // "\r\n" is one Character in Swift: both end a line.
        let rawLines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        for (index, raw) in rawLines.enumerated() {
            if let line = try Self.parseLine(String(raw), number: index + 1, source: path) {
                lines.append(line)
            }
        }
        self.path = path
        self.kind = kind
        self.lines = lines
    }

    /// The `-o Keyword=value` options of a command line, in order, as lines that apply to every
    /// host (`Host`, `Match` and `Include` are refused there, as ssh refuses them).
    public init(commandLineOptions options: [String]) throws(SSHConfigError) {
        var lines: [Line] = []
        for option in options {
            let source = "-o \(option)"
            guard var line = try Self.parseLine(option, number: 0, source: source) else {
                throw SSHConfigError(source: source, line: 0, reason: "no option given: write -o Keyword=value, e.g. -o Port=2222")
            }
            if ["host", "match", "include"].contains(line.name) {
                throw SSHConfigError(source: source, line: 0,
                                     reason: "\(line.keyword) cannot be given with -o: put it in an ssh_config file (-F FILE)")
            }
            line.source = source
            lines.append(line)
        }
        path = "command line"
        kind = .user
        self.lines = lines
    }

    /// One line: nil for a blank line or a comment.
    private static func parseLine(_ raw: String, number: Int, source: String) throws(SSHConfigError) -> Line? {
        var text = Substring(raw)
        while let last = text.last, last == " " || last == "\t" || last == "\r" || last == "\u{0C}" { text.removeLast() }
        while let first = text.first, first == " " || first == "\t" { text.removeFirst() }
        guard let first = text.first, first != "#" else { return nil }
        // The keyword ends at white space or at one '=' (OpenSSH's strdelim).
        var keyword = ""
        var rest = text
        if first == "\"" {
            rest.removeFirst()
            guard let close = rest.firstIndex(of: "\"") else {
                throw SSHConfigError(source: source, line: number, reason: "the keyword's quotes do not close")
            }
            keyword = String(rest[..<close])
            rest = rest[rest.index(after: close)...]
        } else {
            let end = rest.firstIndex(where: { $0 == " " || $0 == "\t" || $0 == "=" }) ?? rest.endIndex
            keyword = String(rest[..<end])
            rest = rest[end...]
        }
        rest = rest.drop(while: { $0 == " " || $0 == "\t" })
        if rest.first == "=" {
            rest.removeFirst()
            rest = rest.drop(while: { $0 == " " || $0 == "\t" })
        }
        guard !keyword.isEmpty else {
            throw SSHConfigError(source: source, line: number, reason: "a line starts with '=': write Keyword value")
        }
        guard !rest.isEmpty else {
            throw SSHConfigError(source: source, line: number, reason: "no argument after the keyword \(keyword)")
        }
        guard let arguments = splitArguments(rest) else {
            throw SSHConfigError(source: source, line: number, reason: "the quotes do not close")
        }
        guard !arguments.isEmpty else {
            throw SSHConfigError(source: source, line: number, reason: "no argument after the keyword \(keyword)")
        }
        return Line(number: number, keyword: keyword, name: keyword.lowercased(), arguments: arguments)
    }

    /// Splits arguments as OpenSSH does: white space separates them; `"…"` and `'…'` quote (the
    /// quotes removed); `\` escapes a quote, a backslash, or (outside quotes) a space; a word that
    /// starts with `#` begins a comment. nil when a quote does not close.
    static func splitArguments(_ text: Substring) -> [String]? {
        var arguments: [String] = []
        var index = text.startIndex
        while true {
            while index < text.endIndex, text[index] == " " || text[index] == "\t" { index = text.index(after: index) }
            guard index < text.endIndex, text[index] != "#" else { return arguments }
            var word = ""
            var quote: Character?
            while index < text.endIndex {
                let character = text[index]
                let next = text.index(after: index)
                if character == "\\", next < text.endIndex,
                   ["'", "\"", "\\"].contains(text[next]) || (quote == nil && text[next] == " ") {
                    word.append(text[next])
                    index = text.index(after: next)
                    continue
                }
                if quote == nil && (character == " " || character == "\t") { break }
                if quote == nil && (character == "\"" || character == "'") {
                    quote = character
                } else if let open = quote, character == open {
                    quote = nil
                } else {
                    word.append(character)
                }
                index = next
            }
            if quote != nil { return nil }
            arguments.append(word)
        }
    }
}

extension SSHConfigFile {
    /// The user's file, `~/.ssh/config` (`HOME` of `environment`, else the user's home).
    public static func userPath(environment: [String: String]) -> String {
        homeDirectory(environment: environment) + "/.ssh/config"
    }

    /// The system's file, `/etc/ssh/ssh_config`.
    public static let systemPath = "/etc/ssh/ssh_config"

    /// What Debian's `/etc/ssh/ssh_config` says that matters here (`SendEnv LANG LC_*`): used in
    /// place of the system file where there is none, so the locale travels as with Debian's ssh.
    public static let debianDefaults: SSHConfigFile = {
        // Two fixed lines that always parse.
        (try? SSHConfigFile(text: "Host *\n    SendEnv LANG LC_*\n", path: "(built-in default, as Debian's /etc/ssh/ssh_config)",
                            kind: .system)) ?? SSHConfigFile(empty: "(built-in default)")
    }()

    private init(empty path: String) {
        self.path = path
        kind = .system
        lines = []
    }

    /// Reads the file at `path`: nil when there is none. With `checkPermissions` (the user's own
    /// files, as OpenSSH checks them) a file another user owns or may write is refused, since it
    /// could send the connection elsewhere.
    public static func load(path: String, kind: Kind, checkPermissions: Bool) throws(SSHConfigError) -> SSHConfigFile? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == ENOENT { return nil }
            throw SSHConfigError(source: path, line: 0, reason: "cannot read it: \(SystemError.current().text)")
        }
        if info.st_mode & S_IFMT == S_IFDIR {
            throw SSHConfigError(source: path, line: 0, reason: "is a directory, not an ssh_config file")
        }
        if checkPermissions && ((info.st_uid != 0 && info.st_uid != getuid()) || info.st_mode & 0o022 != 0) {
            throw SSHConfigError(source: path, line: 0,
                                 reason: "bad owner or permissions: it must be yours and writable by you only (chmod go-w \(path))")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SSHConfigError(source: path, line: 0, reason: "cannot read it: \(SystemError.current().text)")
        }
        return try SSHConfigFile(text: String(decoding: data, as: UTF8.self), path: path, kind: kind)
    }

    /// The files `pattern` (an absolute path, maybe with `*`, `?` and `[…]`) names, in name
    /// order, read for `Include`. No match is no file, as in OpenSSH.
    public static func loadIncluded(pattern: String, kind: Kind) throws(SSHConfigError) -> [SSHConfigFile] {
        var matches = glob_t()
        defer { globfree(&matches) }
        guard glob(pattern, 0, nil, &matches) == 0 else { return [] }
        var files: [SSHConfigFile] = []
        for index in 0..<Int(matches.gl_pathc) {
            guard let raw = matches.gl_pathv[index] else { continue }
            let path = String(cString: raw)
            if let file = try load(path: path, kind: kind, checkPermissions: kind == .user) { files.append(file) }
        }
        return files
    }
}
