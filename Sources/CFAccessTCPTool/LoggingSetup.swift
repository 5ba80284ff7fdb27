import AccessCore
import AccessTransport
import CFAccessTCP
import FoundationEssentials
import Glibc
import Logging

/// Bootstraps swift-log for the executable: one line per record to stderr or to a 0600 file.
/// (Libraries never bootstrap logging; only this executable does.)
struct LoggingSetup {
    let logger: Logger
    /// The sink when records go to stderr (nil with a log file): `shell` mutes it while a session
    /// has the terminal, so no record lands in the middle of it.
    let terminal: LineSink?

    /// Checks a `--loglevel` value without setting anything up.
    static func checkLevel(_ raw: String) throws(ConfigurationError) {
        _ = try level(raw)
    }

    private static func level(_ raw: String) throws(ConfigurationError) -> Logger.Level {
        let level: Logger.Level
        switch raw.lowercased() {
        case "trace": level = .trace
        case "debug": level = .debug
        case "info": level = .info
        case "warn", "warning": level = .warning
        case "error": level = .error
        case "fatal", "panic": level = .critical
        default:
            throw ConfigurationError("--loglevel \(raw) is unknown: use debug, info, warn, error or fatal")
        }
        return level
    }

    init(level raw: String, file: String?, directory: String?) throws(ConfigurationError) {
        ToolProcess.prepare()
        let level = try Self.level(raw)
        if file == nil, let directory { try Self.makeLogDirectory(directory) }
        let path = file ?? directory.map { PathText.appending("cf-access-tcp.log", to: $0) }
        let sink: LineSink
        if let path {
            sink = LineSink(fd: try Self.openLogFile(path))
            terminal = nil
        } else {
            sink = LineSink(fd: STDERR_FILENO)
            terminal = sink
        }
        LoggingSystem.bootstrap { label in
            var handler = LineLogHandler(label: label, sink: sink)
            handler.logLevel = level
            return handler
        }
        logger = Logger(label: "cf-access-tcp")
    }
}

extension LoggingSetup {
    /// Creates `--log-directory` and any missing parent, each 0700, as cloudflared creates its
    /// log directory (issue 17.5). A directory that exists is left as it is.
    static func makeLogDirectory(_ path: String) throws(ConfigurationError) {
        guard !path.isEmpty else {
            throw ConfigurationError("--log-directory is empty: give a directory, e.g. --log-directory ~/.cloudflared/logs")
        }
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/") {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + component
            if mkdir(prefix, 0o700) == 0 || errno == EEXIST { continue }
            throw ConfigurationError("cannot create the log directory \(prefix): \(SystemError.current().text)")
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw ConfigurationError("--log-directory \(path) is not a directory: give a directory for cf-access-tcp.log")
        }
    }

    /// Opens (or creates, 0600) a log file for appending. A symbolic link is refused, so a link
    /// planted at the path cannot send our log (or its 0600 mode) to another file; so is
    /// anything but a regular file (a FIFO would block, a device is not a log).
    static func openLogFile(_ path: String) throws(ConfigurationError) -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard fd >= 0 else {
            if errno == ELOOP {
                throw ConfigurationError("the log file \(path) is a symbolic link: give the path of a regular file "
                                         + "(links are refused so nobody can redirect the log)")
            }
            throw ConfigurationError("cannot open the log file \(path): \(SystemError.current().text)")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw ConfigurationError("the log file \(path) is not a regular file: give the path of a regular file")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        // An existing file keeps its content but never stays readable by others.
        _ = fchmod(fd, 0o600)
        return fd
    }
}

/// Serialises whole lines onto one descriptor.
final class LineSink: Sendable {
    private let fd: Int32
    /// Whether records are dropped (a session has the terminal).
    private let lock = LockedBox(false)

    init(fd: Int32) { self.fd = fd }

    /// Drops records from now on (`true`) or writes them again (`false`).
    func mute(_ muted: Bool) {
        lock.withLock { $0 = muted }
    }

    func write(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(0x0A)
        lock.withLock { muted in
            if muted { return }
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, bytes.count - offset) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return }
                offset += n
            }
        }
    }
}

/// `2026-11-21T22:00:00Z INF message key=value` lines.
struct LineLogHandler: LogHandler {
    let label: String
    let sink: LineSink
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let tag: String
        switch event.level {
        case .trace: tag = "TRC"
        case .debug: tag = "DBG"
        case .info: tag = "INF"
        case .notice: tag = "NOT"
        case .warning: tag = "WRN"
        case .error: tag = "ERR"
        case .critical: tag = "CRT"
        }
        var line = "\(Date.ISO8601FormatStyle().format(Date())) \(tag) \(event.message)"
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            line += " \(key)=\(value)"
        }
        sink.write(line)
    }
}
