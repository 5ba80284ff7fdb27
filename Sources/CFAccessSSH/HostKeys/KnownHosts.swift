import AccessCore
import AccessTransport
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// An OpenSSH `known_hosts` file, read as OpenSSH reads it: plain and hashed (`|1|salt|hash`)
/// host names, comma-separated patterns with `*` and `?` wildcards and `!` negations, and the
/// `@revoked` and `@cert-authority` markers. New keys are appended; the file is never
/// rewritten.
///
/// Entries are named like OpenSSH names them: `host` for port 22, `[host]:port` otherwise. In
/// the embedded mode the host is the Access hostname, since the SSH server's own address is
/// never seen.
///
/// An `@cert-authority` line vouches for the host certificates its key signed (checked by
/// ``KnownHostsVerifier``); for a plain key, as in OpenSSH, such lines do not apply.
///
/// OpenSSH reads several files: the user's (`UserKnownHostsFile`, `~/.ssh/known_hosts` and
/// `~/.ssh/known_hosts2`) and the system's (`GlobalKnownHostsFile`, ``systemPaths``), and judges a
/// key by all of their lines together (``KnownHostsVerifier``).
public struct KnownHosts: Sendable {
    /// What the file says about a host's key.
    public enum Verdict: Sendable, Equatable {
        /// The file names this key for the host.
        case match
        /// The file names the host with other keys (of this type or another) but not this
        /// one: the host's identity changed, possibly an attack.
        case mismatch
        /// The file marks this key `@revoked` for the host.
        case revoked
        /// The file does not name the host with any key.
        case unknown
    }

    /// A line's marker.
    public enum Marker: String, Sendable, Equatable {
        /// `@revoked`: the key must never be accepted.
        case revoked = "@revoked"
        /// `@cert-authority`: the key signs host certificates.
        case certificateAuthority = "@cert-authority"
    }

    /// A line of the file that names a host.
    public struct Entry: Sendable, Equatable {
        /// The file the line is in.
        public let path: String
        /// The line's number in the file, from 1.
        public let line: Int
        /// The line's marker, if any.
        public let marker: Marker?
        /// The key the line names.
        public let key: SSHHostKey

        /// An entry of line `line` (of the file at `path`).
        public init(line: Int, marker: Marker?, key: SSHHostKey, path: String = "") {
            self.path = path
            self.line = line
            self.marker = marker
            self.key = key
        }
    }

    /// The file's path.
    public let path: String

    /// A known_hosts file at `path` (it may not exist yet).
    public init(path: String) { self.path = path }

    /// `~/.ssh/known_hosts` of `HOME` (else the user's home directory).
    public static func defaultPath(environment: [String: String]) -> String {
        homeDirectory(environment: environment) + "/.ssh/known_hosts"
    }

    /// OpenSSH's default user files: ``defaultPath(environment:)``, then `~/.ssh/known_hosts2`.
    public static func defaultUserPaths(environment: [String: String]) -> [String] {
        [defaultPath(environment: environment), homeDirectory(environment: environment) + "/.ssh/known_hosts2"]
    }

    /// OpenSSH's system-wide files (`GlobalKnownHostsFile`'s default).
    public static let systemPaths = ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]

    /// The name of the entry for `host` and `port`, as OpenSSH writes it.
    public static func entryName(host: String, port: Int) -> String {
        port == 22 ? host.lowercased() : "[\(host.lowercased())]:\(port)"
    }

    /// Checks `key` for `host`:`port` (see ``verdict(for:among:)``). A missing file knows no host.
    public func check(host: String, port: Int, key: SSHHostKey) throws(SSHFailure) -> Verdict {
        Self.verdict(for: key, among: try entries(host: host, port: port))
    }

    /// The lines that name `host`:`port`, in file order, of every marker and key type. Lines
    /// that are not valid entries (comments, unknown markers or key types, broken base64) are
    /// skipped, as OpenSSH skips them.
    public func entries(host: String, port: Int) throws(SSHFailure) -> [Entry] {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        guard let data = FileDescriptors.readSmallFile(path) else {
            throw SSHFailure(.localIO, "cannot read \(path): \(SystemError.current().text)")
        }
        return Self.entries(in: String(decoding: data, as: UTF8.self), naming: Self.entryName(host: host, port: port), path: path)
    }

    /// The verdict of `entries` (those naming the host) on `key`, by OpenSSH's rules for a
    /// plain key: a `@revoked` line for the key wins; then a plain line with the key matches;
    /// then any other plain line means the host's key changed — whatever its type, since
    /// the host is known; `@cert-authority` lines do not apply.
    public static func verdict(for key: SSHHostKey, among entries: [Entry]) -> Verdict {
        if entries.contains(where: { $0.marker == .revoked && $0.key.blob == key.blob }) { return .revoked }
        let plain = entries.filter { $0.marker == nil }
        if plain.contains(where: { $0.key.blob == key.blob }) { return .match }
        return plain.isEmpty ? .unknown : .mismatch
    }

    /// The entries of the file `text` whose host field matches `name` (`host` or `[host]:port`).
    package static func entries(in text: String, naming name: String, path: String = "") -> [Entry] {
        var found: [Entry] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            guard let first = fields.first, !first.hasPrefix("#") else { continue }
            var marker: Marker?
            if first.hasPrefix("@") {
                guard let known = Marker(rawValue: String(first)) else { continue }
                marker = known
                fields.removeFirst()
            }
            guard fields.count >= 3, hostField(fields[0], matches: name),
                  let blob = Base64.decode(String(fields[2]), alphabet: .standard), !blob.isEmpty else { continue }
            let key = SSHHostKey(blob: blob, sha256: Digest.sha256(blob))
            guard key.algorithm == fields[1] else { continue }
            found.append(Entry(line: index + 1, marker: marker, key: key, path: path))
        }
        return found
    }

    /// `name` hashed as OpenSSH's `HashKnownHosts` writes it: `|1|` base64(salt) `|`
    /// base64(HMAC-SHA1(salt, name)), with a random 20-byte salt unless one is given.
    package static func hashedName(_ name: String, salt given: [UInt8]? = nil) -> String {
        var generator = SystemRandomNumberGenerator()
        let salt = given ?? (0..<20).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let hash = Digest.hmacSHA1(key: salt, message: Array(name.utf8))
        return "|1|" + Base64.encode(salt, alphabet: .standard, padded: true) + "|" + Base64.encode(hash, alphabet: .standard, padded: true)
    }

    /// Whether a line's host field names `name`: a hashed name (`|1|salt|hash`, HMAC-SHA1 of the
    /// name under the salt), or a pattern list as OpenSSH's `match_hostname` reads it.
    package static func hostField(_ field: Substring, matches name: String) -> Bool {
        if field.hasPrefix("|1|") {
            let parts = field.dropFirst(3).split(separator: "|", omittingEmptySubsequences: false)
            guard parts.count == 2, let salt = Base64.decode(String(parts[0]), alphabet: .standard), !salt.isEmpty,
                  let hash = Base64.decode(String(parts[1]), alphabet: .standard) else { return false }
            return Digest.hmacSHA1(key: salt, message: Array(name.utf8)) == hash
        }
        return patternList(field, matches: name)
    }

    /// OpenSSH's pattern lists: comma-separated patterns, case-insensitive, with `*` (any run)
    /// and `?` (any one character); a pattern after `!` that matches excludes the name whatever
    /// else matches; otherwise one matching pattern is enough.
    package static func patternList(_ list: Substring, matches name: String) -> Bool {
        let subject = Array(name.lowercased().unicodeScalars)
        var positive = false
        for pattern in list.split(separator: ",") {
            let negated = pattern.hasPrefix("!")
            let body = Array((negated ? pattern.dropFirst() : pattern).lowercased().unicodeScalars)
            guard glob(body[...], subject[...]) else { continue }
            if negated { return false }
            positive = true
        }
        return positive
    }

    /// Whether one pattern (`*` and `?` wildcards, case-insensitive) matches all of `name`.
    package static func wildcard(_ pattern: Substring, matches name: String) -> Bool {
        glob(Array(pattern.lowercased().unicodeScalars)[...], Array(name.lowercased().unicodeScalars)[...])
    }

    /// `*` and `?` wildcard matching of all of `subject` by all of `pattern`.
    private static func glob(_ pattern: ArraySlice<Unicode.Scalar>, _ subject: ArraySlice<Unicode.Scalar>) -> Bool {
        var p = pattern.startIndex, s = subject.startIndex
        var star: (pattern: Int, subject: Int)?
        while s < subject.endIndex {
            if p < pattern.endIndex && (pattern[p] == "?" || pattern[p] == subject[s]) {
                p += 1
                s += 1
            } else if p < pattern.endIndex && pattern[p] == "*" {
                star = (p, s)
                p += 1
            } else if let last = star {
                // Let the last `*` take one more character and try again.
                p = last.pattern + 1
                s = last.subject + 1
                star = (last.pattern, last.subject + 1)
            } else {
                return false
            }
        }
        while p < pattern.endIndex && pattern[p] == "*" { p += 1 }
        return p == pattern.endIndex
    }

    /// Throws unless `host` can be written as a known_hosts name: no white space, none of the
    /// characters that are patterns, markers or separators in the file (`*?!,[]|#@/`), and not
    /// `host:port`, so an entry never names more hosts than the one connected to.
    package static func checkWritable(host: String) throws(SSHFailure) {
        let forbidden: Set<Character> = ["*", "?", "!", ",", "[", "]", "|", "#", "@", "/"]
        // One colon is `host:port`, never a host; an IPv6 address has several.
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0.isNewline || forbidden.contains($0) }),
              host.filter({ $0 == ":" }).count != 1,
              !host.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw SSHFailure(.configuration, "\(ServerText.visible(host)) is not a host name known_hosts can hold")
        }
    }

    /// Appends `name key` for `host`:`port`, creating the file (0600) and its directory (0700)
    /// if needed; with `hashed` (OpenSSH's `HashKnownHosts`), the name as `|1|salt|hash`
    /// (HMAC-SHA1 of the name under a random 20-byte salt), so the file does not list the hosts.
    /// Existing lines are never rewritten. A host that is not a plain name (a pattern, a
    /// `host:port`) is refused.
    public func add(host: String, port: Int, key: SSHHostKey, hashed: Bool = false) throws(SSHFailure) {
        try Self.checkWritable(host: host)
        let directory = PathText.deletingLastComponent(path)
        if !directory.isEmpty && !FileManager.default.fileExists(atPath: directory) {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw SSHFailure(.localIO, "cannot create \(directory): \(SystemError.current().text)")
            }
        }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SSHFailure(.localIO, "cannot write \(path): \(SystemError.current().text)") }
        defer { close(fd) }
        // A file whose last line lacks its newline gets one first.
        var prefix = ""
        if let existing = FileDescriptors.readSmallFile(path), let last = existing.last, last != UInt8(ascii: "\n") {
            prefix = "\n"
        }
        let name = Self.entryName(host: host, port: port)
        let line = prefix + "\(hashed ? Self.hashedName(name) : name) \(key.knownHostsText)\n"
        if let failure = Array(line.utf8).withUnsafeBytes({ FileDescriptors.write(all: $0, to: fd) }) {
            throw SSHFailure(.localIO, "cannot write \(path): \(SystemError(failure).text)")
        }
    }
}

/// `HOME`, else the password database's home directory, else `/`.
func homeDirectory(environment: [String: String]) -> String {
    if let home = environment["HOME"], !home.isEmpty { return home }
    if let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir { return String(cString: dir) }
    return "/"
}
