@testable import AccessTransport
import AccessTestSupport
import AccessCore
import Foundation
import Logging
import Testing

/// The token cache directory and the cross-process login lock, on a real file system.
@Suite("Token store and lock", .serialized)
struct TokenStoreAndLockTests {
    @Test func writesFiles0600InA0700Directory() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let store = FileTokenStore(directory: temp.path + "/nested/.cloudflared")
        try store.write("a-token", text: "hello")
        var info = stat()
        #expect(stat(store.directory, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(stat(store.path(of: "a-token"), &info) == 0 && info.st_mode & 0o777 == 0o600)
        if case .content(let text, _) = store.read("a-token") { #expect(text == "hello") } else { Issue.record("not read") }
        #expect(store.fileNames() == ["a-token"])
        store.delete("a-token")
        #expect(store.read("a-token") == .missing)
    }

    @Test func worldReadableOrLinkedFilesAreNotTrusted() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let store = FileTokenStore(directory: temp.path)
        try store.write("open-token", text: AuthVectors.appToken)
        chmod(store.path(of: "open-token"), 0o644)
        guard case .untrusted(let reason) = store.read("open-token") else { Issue.record("0644 file trusted"); return }
        #expect(reason.contains("chmod 600"))
        #expect(!reason.contains("eyJ"))
        symlink(store.path(of: "open-token"), store.path(of: "link-token"))
        if case .untrusted = store.read("link-token") {} else { Issue.record("symlink trusted") }
        // Writing replaces the bad file with a 0600 one.
        try store.write("open-token", text: "new")
        #expect(temp.mode(of: "open-token") == 0o600)
    }

    @Test func lockIsExclusiveAndReleased() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let lock = FileLoginLock(directory: temp.path, logger: Logger(label: "t"))
        guard case .acquired(let handle) = try lock.tryAcquire(tokenFileName: "app-token") else {
            Issue.record("free lock not taken"); return
        }
        #expect(temp.mode(of: "app-token.lock") == 0o600)
        let content = try String(contentsOfFile: temp.path + "/app-token.lock", encoding: .utf8)
        let record = try #require(LoginLockRecord.parse(Array(content.utf8)))
        #expect(record.pid == getpid())
        // Our own live process with the same start time holds it.
        guard case .held(let pid) = try lock.tryAcquire(tokenFileName: "app-token") else {
            Issue.record("held lock taken twice"); return
        }
        #expect(pid == getpid())
        handle.release()
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/app-token.lock"))
        if case .acquired(let again) = try lock.tryAcquire(tokenFileName: "app-token") { again.release() } else {
            Issue.record("released lock not free")
        }
    }

    /// Many takers at once (threads of this process, as two processes would be): in each round
    /// exactly one gets the lock, also when they all find a stale lock and remove it. A lock seen
    /// while its record was still being written used to be judged unreadable, so stale, and taken
    /// a second time (CI saw two logins for two processes).
    @Test func racingTakersGetTheLockOnce() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        var quiet = Logger(label: "t")
        quiet.logLevel = .error   // 300 "removing a stale login lock" lines say nothing here
        let lock = FileLoginLock(directory: temp.path, logger: quiet)
        let takers = 4
        var doubleTakes = 0
        for round in 0..<600 {
            if round % 2 == 1 {
                // Every other round starts with a stale lock (a dead holder) that all of them see.
                _ = FileManager.default.createFile(atPath: temp.path + "/race-token.lock",
                                                   contents: Data(#"{"pid":2147483000,"start_time":1}"#.utf8))
            }
            let handles = LockedBox<[any LoginLockHandle]>([])
            DispatchQueue.concurrentPerform(iterations: takers) { _ in
                if case .acquired(let handle)? = try? lock.tryAcquire(tokenFileName: "race-token") {
                    handles.withLock { $0.append(handle) }
                }
            }
            let taken = handles.withLock { $0 }
            if taken.count != 1 { doubleTakes += 1 }
            for handle in taken { handle.release() }
        }
        #expect(doubleTakes == 0, "rounds in which the lock was not taken exactly once")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: temp.path)
        #expect(leftovers.isEmpty, "temporary or lock files left behind: \(leftovers)")
    }

    /// Another real process holds the lock (python writes it the way PROTOCOL.md §3 says,
    /// computing its own start time from /proc); once it dies, the lock is reclaimed.
    @Test func lockOfAnotherProcessIsHeldThenReclaimedWhenItDies() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let lockPath = temp.path + "/app-token.lock"
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = ["-c", """
            import os, sys, time, json
            ticks = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])
            btime = [int(l.split()[1]) for l in open('/proc/stat') if l.startswith('btime ')][0]
            start = btime * 1000 + ticks * 1000 // os.sysconf('SC_CLK_TCK')
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, json.dumps({"pid": os.getpid(), "start_time": start}).encode()); os.close(fd)
            print("locked", flush=True); time.sleep(60)
            """, lockPath]
        let out = Pipe()
        holder.standardOutput = out
        try holder.run()
        // SIGKILL: the test threads block SIGTERM, and a child spawned by Foundation inherits that mask.
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) } }
        _ = out.fileHandleForReading.availableData  // "locked"
        let log = MemoryLog()
        let lock = FileLoginLock(directory: temp.path, logger: log.logger)
        guard case .held(let pid) = try lock.tryAcquire(tokenFileName: "app-token") else {
            Issue.record("live holder ignored"); return
        }
        #expect(pid == holder.processIdentifier)
        kill(holder.processIdentifier, SIGKILL)
        holder.waitUntilExit()
        guard case .acquired(let handle) = try lock.tryAcquire(tokenFileName: "app-token") else {
            Issue.record("dead holder's lock not reclaimed"); return
        }
        handle.release()
        #expect(log.lines.contains { $0.contains("removing a stale login lock") && $0.contains("is gone") })
    }

    @Test func lockWithReusedPidOrGarbageIsStale() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let lock = FileLoginLock(directory: temp.path, logger: Logger(label: "t"))
        let path = temp.path + "/x-token.lock"
        // pid 1 is alive, but it did not start at that time: pid reuse.
        try "{\"pid\":1,\"start_time\":1000}".write(toFile: path, atomically: false, encoding: .utf8)
        if case .acquired(let h) = try lock.tryAcquire(tokenFileName: "x-token") { h.release() } else { Issue.record("reused pid held") }
        try "garbage".write(toFile: path, atomically: false, encoding: .utf8)
        if case .acquired(let h) = try lock.tryAcquire(tokenFileName: "x-token") { h.release() } else { Issue.record("garbage held") }
    }

    @Test func releaseAllHeldRemovesLockAndURL() throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let lock = FileLoginLock(directory: temp.path, logger: Logger(label: "t"))
        guard case .acquired(let handle) = try lock.tryAcquire(tokenFileName: "y-token") else { Issue.record("not taken"); return }
        try FileTokenStore(directory: temp.path).write("y-token.url", text: "https://x/")
        FileLoginLock.releaseAllHeld()
        #expect(FileTokenStore(directory: temp.path).fileNames().isEmpty)
        handle.release()
    }
}

/// The browser opener: `$BROWSER` receives the URL as one argument; a failing opener or no
/// display means device mode.
@Suite("Browser opener")
struct BrowserOpenerTests {
    @Test func browserGetsTheURLAndFailureMeansDeviceMode() async throws {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let out = temp.path + "/seen"
        let url = "https://ssh.example.com/cdn-cgi/access/cli?a=1&b=$(touch%20/tmp/x)"
        let ok = await SystemBrowserOpener(environment: ["BROWSER": "printf %s > \(out)"]).open(url)
        #expect(ok)
        #expect(try String(contentsOfFile: out, encoding: .utf8) == url)
        #expect(await !SystemBrowserOpener(environment: ["BROWSER": "false"]).open(url))
        #expect(await !SystemBrowserOpener(environment: ["PATH": "/usr/bin:/bin"]).open(url))
    }
}
