import AccessCore
import FoundationEssentials
internal import CCFSSH2
#if canImport(Glibc)
import Glibc
#endif

/// An OpenSSH `known_hosts` file: checks a host key against it (plain and hashed `|1|` entries,
/// through libssh2's parser) and appends new keys.
///
/// Entries are named like OpenSSH names them: `host` for port 22, `[host]:port` otherwise. In
/// the embedded mode the host is the Access hostname, since the SSH server's own address is
/// never seen.
public struct KnownHosts: Sendable {
    /// What the file says about a host's key.
    public enum Verdict: Sendable, Equatable {
        /// The file names this key for the host.
        case match
        /// The file names another key of the same type for the host: possibly an attack.
        case mismatch
        /// The file does not name the host with a key of this type.
        case unknown
    }

    /// The file's path.
    public let path: String

    /// A known_hosts file at `path` (it may not exist yet).
    public init(path: String) { self.path = path }

    /// `~/.ssh/known_hosts` of `HOME` (else the user's home directory).
    public static func defaultPath(environment: [String: String]) -> String {
        homeDirectory(environment: environment) + "/.ssh/known_hosts"
    }

    /// The name of the entry for `host` and `port`, as OpenSSH writes it.
    public static func entryName(host: String, port: Int) -> String {
        port == 22 ? host.lowercased() : "[\(host.lowercased())]:\(port)"
    }

    /// Checks `key` for `host`:`port`. A missing file knows no host. Lines libssh2 cannot
    /// parse (other key types, markers) are skipped.
    public func check(host: String, port: Int, key: SSHHostKey) throws(SSHFailure) -> Verdict {
        guard FileManager.default.fileExists(atPath: path) else { return .unknown }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SSHFailure(.localIO, "cannot read \(path)")
        }
        guard let session = CCFSSH2_session_init() else {
            throw SSHFailure(.localIO, "libssh2 could not create a session (out of memory)")
        }
        defer { _ = libssh2_session_free(session) }
        guard let hosts = libssh2_knownhost_init(session) else {
            throw SSHFailure(.localIO, "libssh2 could not read known hosts (out of memory)")
        }
        defer { libssh2_knownhost_free(hosts) }
        for line in String(decoding: data, as: UTF8.self).split(whereSeparator: \.isNewline) {
            let text = String(line)
            _ = libssh2_knownhost_readline(hosts, text, text.utf8.count, LIBSSH2_KNOWNHOST_FILE_OPENSSH)
        }
        let name = Self.entryName(host: host, port: port)
        let typeMask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | Self.keyBits(key.algorithm)
        let result = key.blob.withUnsafeBytes { blob in
            libssh2_knownhost_checkp(hosts, name, -1, blob.baseAddress!.assumingMemoryBound(to: CChar.self),
                                     blob.count, Int32(typeMask), nil)
        }
        switch result {
        case LIBSSH2_KNOWNHOST_CHECK_MATCH: return .match
        case LIBSSH2_KNOWNHOST_CHECK_MISMATCH: return .mismatch
        case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND: return .unknown
        default: throw SSHFailure(.localIO, "cannot check \(path): libssh2 failed to compare the keys")
        }
    }

    /// Appends `name key` for `host`:`port`, creating the file (0600) and its directory (0700)
    /// if needed. Existing lines are never rewritten.
    public func add(host: String, port: Int, key: SSHHostKey) throws(SSHFailure) {
        let directory = PathText.deletingLastComponent(path)
        if !directory.isEmpty && !FileManager.default.fileExists(atPath: directory) {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw SSHFailure(.localIO, "cannot create \(directory): \(String(cString: strerror(errno)))")
            }
        }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SSHFailure(.localIO, "cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        // A file whose last line lacks its newline gets one first.
        var prefix = ""
        if let existing = FileManager.default.contents(atPath: path), let last = existing.last, last != UInt8(ascii: "\n") {
            prefix = "\n"
        }
        let line = prefix + "\(Self.entryName(host: host, port: port)) \(key.knownHostsText)\n"
        let ok = Array(line.utf8).withUnsafeBytes { writeAll(fd, $0) }
        guard ok else { throw SSHFailure(.localIO, "cannot write \(path): \(String(cString: strerror(errno)))") }
    }

    private static func keyBits(_ algorithm: String) -> Int32 {
        switch algorithm {
        case "ssh-rsa": return LIBSSH2_KNOWNHOST_KEY_SSHRSA
        case "ssh-dss": return LIBSSH2_KNOWNHOST_KEY_SSHDSS
        case "ecdsa-sha2-nistp256": return LIBSSH2_KNOWNHOST_KEY_ECDSA_256
        case "ecdsa-sha2-nistp384": return LIBSSH2_KNOWNHOST_KEY_ECDSA_384
        case "ecdsa-sha2-nistp521": return LIBSSH2_KNOWNHOST_KEY_ECDSA_521
        case "ssh-ed25519": return LIBSSH2_KNOWNHOST_KEY_ED25519
        default: return LIBSSH2_KNOWNHOST_KEY_UNKNOWN
        }
    }
}

/// `HOME`, else the password database's home directory, else `/`.
func homeDirectory(environment: [String: String]) -> String {
    if let home = environment["HOME"], !home.isEmpty { return home }
    if let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir { return String(cString: dir) }
    return "/"
}
