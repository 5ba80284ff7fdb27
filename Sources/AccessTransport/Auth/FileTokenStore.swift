import AccessCore
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The token cache on disk: `~/.cloudflared/` (cloudflared's directory, so tokens are shared),
/// created 0700, each file written 0600 through a temporary file and `rename`.
///
/// A file that is not a regular file of ours, or is readable or writable by group or others,
/// is reported `.untrusted` and left alone: someone else may have read or planted it.
package struct FileTokenStore: TokenStore {
    /// The environment variable that overrides the directory (for tests and odd setups).
    package static let directoryVariable = "CF_ACCESS_TCP_TOKEN_DIR"
    /// Larger files are not tokens.
    package static let maximumFileSize = 64 * 1024

    /// The cache directory.
    package let directory: String

    /// `$CF_ACCESS_TCP_TOKEN_DIR`, else `$HOME/.cloudflared` (the home of the user database
    /// if `HOME` is unset).
    package static func defaultDirectory(environment: [String: String]) -> String {
        if let override = environment[directoryVariable], !override.isEmpty { return override }
        var home = environment["HOME"] ?? ""
        if home.isEmpty, let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir {
            home = String(cString: dir)
        }
        return (home.isEmpty ? "." : home) + "/.cloudflared"
    }

    /// A store in `directory` (created on the first write).
    package init(directory: String) {
        var directory = directory
        while directory.count > 1 && directory.hasSuffix("/") { directory.removeLast() }
        self.directory = directory
    }

    /// `<directory>/<name>`.
    package func path(of name: String) -> String { directory + "/" + name }

    /// Reads `name`: missing, untrusted (with the reason and what to do), or its trimmed text.
    package func read(_ name: String) -> TokenFileRead {
        if let problem = directoryProblem() { return .untrusted(problem) }
        let path = path(of: name)
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ENOENT { return .missing }
            if errno == ELOOP { return .untrusted("it is a symbolic link") }
            return .untrusted("it cannot be read (\(SystemError.current().text))")
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .untrusted("it cannot be examined") }
        guard (info.st_mode & S_IFMT) == S_IFREG else { return .untrusted("it is not a regular file") }
        guard info.st_uid == geteuid() else { return .untrusted("it belongs to another user") }
        let mode = info.st_mode & 0o777
        if mode & 0o077 != 0 {
            return .untrusted("it is readable or writable by group or others (mode \(String(mode, radix: 8))): "
                + "remove it or run chmod 600 \(path)")
        }
        guard Int(info.st_size) <= Self.maximumFileSize else { return .untrusted("it is larger than a token can be") }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size) + 1)
        var total = 0
        while total < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            total += n
        }
        let modified = Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9)
        let text = String(decoding: bytes[..<total], as: UTF8.self).trimmingWhitespaceAndNewlines
        return .content(text, modifiedAt: modified)
    }

    /// Writes `text` to `name`: the directory is created 0700 if needed, the file 0600
    /// through a temporary file renamed over it.
    package func write(_ name: String, text: String) throws(TunnelFailure) {
        try ensureDirectory()
        let target = path(of: name)
        let temporary = path(of: ".\(name).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp")
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .tokenCache(path: target, reason: SystemError.current().text) }
        let bytes = Array(text.utf8)
        var written = 0
        var failure: Int32 = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, bytes.count - written) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 {
                failure = errno
                break
            }
            written += n
        }
        if failure == 0 && fchmod(fd, 0o600) != 0 { failure = errno }
        if failure == 0 && fsync(fd) != 0 { failure = errno }
        close(fd)
        if failure == 0 && rename(temporary, target) != 0 { failure = errno }
        if failure != 0 {
            unlink(temporary)
            throw .tokenCache(path: target, reason: SystemError(failure).text)
        }
    }

    /// Removes `name` (no error if it is missing).
    package func delete(_ name: String) {
        unlink(path(of: name))
    }

    /// The names in the directory (none if it does not exist).
    package func fileNames() -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory))?.sorted() ?? []
    }

    /// Why the directory cannot be trusted with tokens, if it cannot: like OpenSSH with a loose
    /// `~/.ssh`, a directory that another user owns, or that group or others may write to (so
    /// they could plant or swap token files), is refused. nil when it is fine or missing.
    package func directoryProblem() -> String? {
        var info = stat()
        guard stat(directory, &info) == 0 else { return nil }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { return "\(directory) is not a directory" }
        if info.st_uid != geteuid() {
            return "the token directory \(directory) belongs to another user (uid \(info.st_uid)): use a directory of your own"
        }
        let mode = info.st_mode & 0o777
        if mode & 0o022 != 0 {
            return "the token directory \(directory) is writable by group or others (mode \(String(mode, radix: 8))): "
                + "run chmod 700 \(directory)"
        }
        return nil
    }

    /// Creates the directory 0700 (with missing parents 0700 too) unless it exists; an existing
    /// one must pass `directoryProblem()`.
    package func ensureDirectory() throws(TunnelFailure) {
        var info = stat()
        if stat(directory, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw .tokenCache(path: directory, reason: "it is not a directory")
            }
            if let problem = directoryProblem() { throw .tokenCache(path: directory, reason: problem) }
            return
        }
        var prefix = directory.hasPrefix("/") ? "" : "."
        for component in directory.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw .tokenCache(path: directory, reason: SystemError.current().text)
            }
        }
        _ = chmod(directory, 0o700)
    }
}
