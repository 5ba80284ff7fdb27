import AccessCore
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The cross-process login lock of PROTOCOL.md §3: `<token path>.lock`, created with
/// `O_EXCL` and mode 0600, holding `{"pid":…,"start_time":…}`. A stale lock (dead owner,
/// reused pid, unreadable, older than 10 min) is removed with an info line and taken.
///
/// Locks this process holds are remembered so that `releaseAllHeld()` (called on Ctrl-C or
/// SIGTERM) leaves none behind.
package struct FileLoginLock: LoginLock {
    /// The directory of the token files (the lock sits beside its token).
    package let directory: String
    private let logger: Logger

    /// A lock manager for tokens in `directory`.
    package init(directory: String, logger: Logger) {
        self.directory = directory
        self.logger = logger
    }

    /// Takes `<tokenFileName>.lock` if it is free or stale; otherwise names its live holder.
    package func tryAcquire(tokenFileName: String) throws(TunnelFailure) -> LoginLockAttempt {
        let store = FileTokenStore(directory: directory)
        try store.ensureDirectory()
        let path = store.path(of: TokenCacheNaming.lockFileName(for: tokenFileName))
        let record = LoginLockRecord(pid: getpid(), startTimeMilliseconds: ProcessStartTime.current)
        // Takers of ours go one at a time through the steps below (an flock on the directory, held
        // for microseconds). Otherwise one could find another's lock between its creation and its
        // write, judge it unreadable, so stale, and take it too; and two that find the same stale
        // lock could both remove it, one then removing the other's new lock. Without flock (some
        // network file systems) the steps still work, only those races are back.
        let directoryFD = Self.lockDirectory(store.directory)
        defer { if directoryFD >= 0 { close(directoryFD) } }
        for _ in 0..<3 {
            if try Self.create(path: path, bytes: Array(record.json.utf8)) {
                let urlPath = store.path(of: TokenCacheNaming.urlFileName(for: tokenFileName))
                HeldLocks.shared.add(path, urlPath)
                return .acquired(FileLoginLockHandle(path: path, urlPath: urlPath))
            }
            switch Self.inspect(path: path) {
            case .held(let pid):
                return .held(pid: pid)
            case .stale(let reason):
                logger.info("removing a stale login lock", metadata: ["path": "\(path)", "reason": "\(reason)"])
                unlink(path)
            }
        }
        throw .tokenCache(path: path, reason: "the lock keeps being re-created by another process")
    }

    /// The token directory opened and `flock`ed exclusively (closing it unlocks), or -1.
    private static func lockDirectory(_ directory: String) -> Int32 {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return -1 }
        while flock(fd, LOCK_EX) != 0 {
            if errno != EINTR {
                close(fd)
                return -1
            }
        }
        return fd
    }

    /// Creates `path` (0600, `O_EXCL`) holding `bytes`: false when it exists.
    private static func create(path: String, bytes: [UInt8]) throws(TunnelFailure) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { return false }
            throw .tokenCache(path: path, reason: SystemError.current().text)
        }
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress!, $0.count) }
        close(fd)
        guard written == bytes.count else {
            unlink(path)
            throw .tokenCache(path: path, reason: "the lock could not be written")
        }
        return true
    }

    /// The verdict on an existing lock file.
    static func inspect(path: String) -> LoginLockRules.Verdict {
        var info = stat()
        guard stat(path, &info) == 0 else { return .stale("it vanished") }
        let modified = Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec))
        // A lock holds a short JSON record: anything larger is garbage (stale), never read whole.
        let content = Self.readCapped(path: path, limit: Self.maximumLockSize)
        return LoginLockRules.verdict(content: content, modifiedAt: modified, now: Date(),
                                      startTimeOfProcess: ProcessStartTime.milliseconds(pid:))
    }

    /// The largest lock file read (its record is ~50 bytes).
    static let maximumLockSize = 4096

    /// The bytes of `path` if it is a regular file of at most `limit` bytes (no link followed).
    static func readCapped(path: String, limit: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) <= limit else { return nil }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var total = 0
        while total < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            total += n
        }
        return total <= limit ? Array(bytes[..<total]) : nil
    }

    /// Removes every lock (and login URL file) this process holds. Safe to call from a
    /// signal-handling queue before exiting. Returns how many files it removed.
    @discardableResult
    package static func releaseAllHeld() -> Int {
        let paths = HeldLocks.shared.takeAll()
        for path in paths { unlink(path) }
        return paths.count
    }
}

/// A held lock; `release` removes the URL file and the lock (once).
final class FileLoginLockHandle: LoginLockHandle, @unchecked Sendable {
    private let path: String
    private let urlPath: String
    private let released = LockedBox(false)

    init(path: String, urlPath: String) {
        self.path = path
        self.urlPath = urlPath
    }

    func release() {
        let first = released.withLock { value -> Bool in
            defer { value = true }
            return !value
        }
        guard first else { return }
        unlink(urlPath)
        unlink(path)
        HeldLocks.shared.remove(path, urlPath)
    }

    deinit { release() }
}

/// The lock and URL files this process must remove when it is interrupted.
final class HeldLocks: @unchecked Sendable {
    static let shared = HeldLocks()
    private let paths = LockedBox<Set<String>>([])

    func add(_ items: String...) { paths.withLock { $0.formUnion(items) } }
    func remove(_ items: String...) { paths.withLock { $0.subtract(items) } }
    func takeAll() -> [String] {
        paths.withLock { value in
            defer { value = [] }
            // URL files first, then the locks.
            return value.sorted { $0.hasSuffix(".url") && !$1.hasSuffix(".url") }
        }
    }
}
