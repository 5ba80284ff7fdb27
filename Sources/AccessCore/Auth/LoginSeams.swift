import FoundationEssentials

// The seams of the login flow a library user may replace (an app's own token store, browser or
// clock): public, and named in CFAccessTCP's vocabulary.

/// What reading a cache file found.
public enum TokenFileRead: Sendable, Equatable {
    /// No such file.
    case missing
    /// The file exists but must not be trusted (e.g. readable by others); it is left alone.
    case untrusted(String)
    /// Its text (white space trimmed) and modification time.
    case content(String, modifiedAt: Date)
}

/// The token cache directory (the seam over `~/.cloudflared/`). File names come from
/// `TokenCacheNaming`; files are written 0600 in a 0700 directory.
public protocol TokenStore: Sendable {
    /// Reads `name`.
    func read(_ name: String) -> TokenFileRead
    /// Writes `text` to `name` atomically, 0600.
    func write(_ name: String, text: String) throws(TunnelFailure)
    /// Removes `name` if present.
    func delete(_ name: String)
    /// The names of the files in the directory.
    func fileNames() -> [String]
    /// The full path of `name`, for messages.
    func path(of name: String) -> String
}

/// A taken login lock; `release` removes it (idempotent).
public protocol LoginLockHandle: Sendable {
    /// Removes the lock file.
    func release()
}

/// The result of one attempt to take a login lock.
public enum LoginLockAttempt: Sendable {
    /// We hold it now.
    case acquired(any LoginLockHandle)
    /// A live process holds it.
    case held(pid: Int32)
}

/// The cross-process login lock (the seam over `<token path>.lock`).
public protocol LoginLock: Sendable {
    /// Tries once to take the lock for token file `tokenFileName`, removing a stale lock first.
    func tryAcquire(tokenFileName: String) throws(TunnelFailure) -> LoginLockAttempt
}

/// Opens a URL in the user's browser.
public protocol BrowserOpener: Sendable {
    /// Whether a browser was started for `url`; false means "show it for another device".
    func open(_ url: String) async -> Bool
}

/// The wall clock and sleeping (the seam that makes waits testable).
public protocol WallClock: Sendable {
    /// The current time.
    func now() -> Date
    /// Sleeps for `duration`; returns false (at once) if the task was cancelled.
    func sleep(for duration: Duration) async -> Bool
}
