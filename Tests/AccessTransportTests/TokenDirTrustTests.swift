@testable import AccessTransport
import AccessTestSupport
import AccessCore
import Foundation
import Logging
import Testing

/// Issue 12.7 (every file read with a cap) and 12.11 (a loose token directory is refused).
@Suite("token directory trust and capped reads", .serialized)
struct TokenDirTrustTests {
    /// The peak resident size of this process, in KiB.
    private func peakRSS() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
    }

    @Test("a 1 GiB lock file is judged stale without being read, then replaced by our lock")
    func hugeLockIsNotRead() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let name = "ssh.cfat.test-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-token"
        let lockPath = temp.path + "/" + TokenCacheNaming.lockFileName(for: name)
        let fd = open(lockPath, O_WRONLY | O_CREAT, 0o600)
        #expect(fd >= 0)
        #expect(ftruncate(fd, 1 << 30) == 0)   // sparse: no disk used
        close(fd)
        let before = peakRSS()
        guard case .stale = FileLoginLock.inspect(path: lockPath) else {
            Issue.record("a 1 GiB lock was not judged stale")
            return
        }
        let lock = FileLoginLock(directory: temp.path, logger: Logger(label: "test"))
        guard case .acquired(let handle) = try lock.tryAcquire(tokenFileName: name) else {
            Issue.record("the stale lock was not taken over")
            return
        }
        handle.release()
        #expect(peakRSS() - before < 64 << 10, "reading the lock grew the peak RSS by \(peakRSS() - before) KiB")
    }

    @Test("a lock of garbage within the cap is read and judged stale")
    func smallGarbageLock() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let path = temp.path + "/x.lock"
        try Data("not json".utf8).write(to: URL(fileURLWithPath: path))
        #expect(FileLoginLock.readCapped(path: path, limit: 4096) == Array("not json".utf8))
        #expect(FileLoginLock.readCapped(path: path, limit: 3) == nil)
        if case .stale = FileLoginLock.inspect(path: path) {} else { Issue.record("garbage lock not stale") }
    }

    @Test("a group- or world-writable token directory is refused for reading and writing, with the path shown")
    func looseDirectoryRefused() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let store = FileTokenStore(directory: temp.path)
        let name = "ssh.cfat.test-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-token"
        try store.write(name, text: "a.b.c")
        for mode: mode_t in [0o770, 0o777, 0o722] {
            #expect(chmod(temp.path, mode) == 0)
            guard case .untrusted(let reason) = store.read(name) else {
                Issue.record("mode \(String(mode, radix: 8)): the token was trusted")
                continue
            }
            #expect(reason.contains("writable by group or others"), "\(reason)")
            #expect(reason.contains("chmod 700 \(temp.path)"))
            do {
                try store.write(name, text: "x")
                Issue.record("mode \(String(mode, radix: 8)): writing was allowed")
            } catch {
                #expect(error.message.contains(temp.path), "\(error.message)")
                #expect(error.category == .configuration)
            }
        }
        #expect(chmod(temp.path, 0o700) == 0)
        if case .content(let text, _) = store.read(name) { #expect(text == "a.b.c") } else { Issue.record("0700 not trusted") }
        // 0755 (not writable by others) is fine, as OpenSSH accepts it.
        #expect(chmod(temp.path, 0o755) == 0)
        if case .content = store.read(name) {} else { Issue.record("0755 not trusted") }
    }

    @Test("token-cache messages keep the file's path whole: the AUD tag in it is public, not a secret")
    func pathNotRedacted() {
        let path = "/home/u/.cloudflared/ssh.example.com-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-token"
        let failure = TunnelFailure.tokenCache(path: path, reason: "Permission denied")
        #expect(failure.message.contains(path), "\(failure.message)")
        #expect(!failure.message.contains("[redacted]"))
    }
}
