import AccessTransport
import CFAccessSSH
import CFAccessTCP
import Foundation
import Logging
import SystemPackage
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let quietLogger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

/// What one transfer through a channel measured: bytes each way, the longest time between two
/// chunks arriving (or two writes accepted), and how the command ended.
struct TransferRecord: Sendable, CustomStringConvertible {
    var name: String
    var received = 0
    var sent = 0
    var longestPause: TimeInterval = 0
    var end: SSHChannelEnd?
    var problem: String?

    var description: String {
        "\(name): \(received) B in, \(sent) B out, longest pause \(String(format: "%.2f", longestPause)) s, end \(end.map { "\($0)" } ?? "none")"
            + (problem.map { ", \($0)" } ?? "")
    }
}

/// A pipe whose two ends close with it.
private final class Pipe: @unchecked Sendable {
    let read: Int32
    let write: Int32
    private let closed = LockedBox((false, false))

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw FixtureError("pipe failed") }
        read = fds[0]
        write = fds[1]
    }

    func closeRead() { closed.withLock { if !$0.0 { $0.0 = true; _ = close(read) } } }
    func closeWrite() { closed.withLock { if !$0.1 { $0.1 = true; _ = close(write) } } }
    deinit {
        closeRead()
        closeWrite()
    }
}

/// The channel pump (issue 16 point 6): bulk transfers through a real sshd and the emulator never
/// pause, never lose a byte, whichever way the data goes.
@Suite("SSH channel pump: bulk transfers without pauses", .serialized, .ownThreads)
struct SSHPumpTests {
    private func openSession(_ sshd: SSHDFixture, _ edge: EdgeFixture, engine: SSHEngineKind,
                             keepalive: SSHKeepalive = SSHKeepalive(interval: .seconds(30))) async throws -> (AccessTunnel, SSHSession) {
        let options = AccessTunnel.Options(connectTo: try ConnectTarget.parse("127.0.0.1:\(edge.port)"),
                                           caFile: edge.certs.caFile.path, retry: .never)
        let tunnel = AccessTunnel(options: options, logger: quietLogger)
        let token = try ServiceToken(clientID: testTokenID, clientSecret: testTokenSecret)
        let stream = try await tunnel.openStream(hostname: testHost, method: .serviceToken(token))
        var configuration = SSHSession.Configuration(hostKeyDelegate: AcceptAnyHostKey(), keepalive: keepalive)
        configuration.engine = engine
        let ssh = try SSHSession(stream: stream, configuration: configuration)
        try await ssh.handshake()
        try await ssh.authenticate(user: sshd.keyUser, offer: .privateKey(path: sshd.clientKeyPath.path))
        return (tunnel, ssh)
    }

    /// Runs `command` with pipes for its three streams: `input` bytes are written (after the
    /// command printed its one-byte ready mark `R`, when `waitForMark`) in pieces of `piece`,
    /// stdout is counted (and compared to `expect`, a function of the offset) as it arrives.
    private func transfer(_ ssh: SSHSession, name: String, command: String, input: Int = 0, piece: Int = 64 * 1024,
                          waitForMark: Bool = false, expectOutput: Int, expectError: Int = 0) async throws -> TransferRecord {
        let stdin = try Pipe(), stdout = try Pipe(), stderr = try Pipe()
        let record = LockedBox(TransferRecord(name: name))
        let marked = DispatchSemaphore(value: 0)
        let readers = DispatchGroup()
        func reader(_ pipe: Pipe, isOutput: Bool) {
            readers.enter()
            Thread {
                defer { readers.leave() }
                var buffer = [UInt8](repeating: 0, count: 1 << 20)
                var last: Date?
                var sawMark = !(isOutput && waitForMark)
                while true {
                    let n = read(pipe.read, &buffer, buffer.count)
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    let now = Date()
                    var count = n
                    if !sawMark {
                        // The ready mark: what follows is measured from the next chunk on.
                        sawMark = true
                        count -= 1
                        marked.signal()
                        if count == 0 { continue }
                    }
                    record.withLock { r in
                        if let last { r.longestPause = max(r.longestPause, now.timeIntervalSince(last)) }
                        if isOutput { r.received += count }
                    }
                    last = now
                }
                if !sawMark { marked.signal() }
            }.start()
        }
        reader(stdout, isOutput: true)
        reader(stderr, isOutput: false)
        let writer = Thread {
            defer { stdin.closeWrite() }
            if waitForMark { marked.wait() }
            let chunk = [UInt8](repeating: 0x5a, count: piece)
            var sent = 0
            var last: Date?
            while sent < input {
                let n = chunk.withUnsafeBytes { write(stdin.write, $0.baseAddress, min(piece, input - sent)) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                let now = Date()
                sent += n
                record.withLock { r in
                    if let last { r.longestPause = max(r.longestPause, now.timeIntervalSince(last)) }
                    r.sent = sent
                }
                last = now
            }
        }
        writer.start()
        let end: SSHChannelEnd
        do {
            end = try await ssh.exec(command, standardInput: FileDescriptor(rawValue: stdin.read),
                                     standardOutput: FileDescriptor(rawValue: stdout.write),
                                     standardError: FileDescriptor(rawValue: stderr.write))
        } catch {
            end = .lost(error)
        }
        stdout.closeWrite()
        stderr.closeWrite()
        stdin.closeRead()
        try await offPool { readers.wait() }
        var result = record.withLock { $0 }
        result.end = end
        if end != .exited(0) {
            result.problem = "the command did not exit 0"
        } else if result.received != expectOutput {
            result.problem = "expected \(expectOutput) bytes of output"
        } else if result.sent != input {
            result.problem = "only \(result.sent) of \(input) input bytes were taken"
        }
        return result
    }

    @Test("bulk downloads, uploads and echoes (both ways at once), many of them: every byte arrives and no pause between chunks is longer than a second", arguments: SSHEngineKind.allCases)
    func noPauses(engine: SSHEngineKind) async throws {
        let sshd = try SSHDFixture()
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let mib = 1 << 20
        var records: [TransferRecord] = []
        // Each shape on a session of its own, so one that breaks its session does not hide the others.
        func onSession(_ body: (SSHSession) async throws -> Void) async throws {
            let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
            try await body(ssh)
            await ssh.disconnect()
            await tunnel.disconnect()
        }
        for round in 1...3 {
            // Download: stdout only, then stdout and stderr interleaved.
            try await onSession { ssh in
                records.append(try await transfer(ssh, name: "download #\(round)", command: "head -c \(48 * mib) /dev/zero",
                                                  expectOutput: 48 * mib))
                records.append(try await transfer(ssh, name: "download with stderr #\(round)",
                                                  command: "head -c \(16 * mib) /dev/zero | tee /dev/stderr",
                                                  expectOutput: 16 * mib))
            }
            // Upload, counted by the remote.
            try await onSession { ssh in
                records.append(try await transfer(ssh, name: "upload #\(round)", command: "printf R; exec wc -c",
                                                  input: 32 * mib, waitForMark: true, expectOutput: "\(32 * mib)\n".utf8.count))
            }
            // Echo: the same bytes both ways at once.
            try await onSession { ssh in
                records.append(try await transfer(ssh, name: "echo #\(round)", command: "printf R; exec cat",
                                                  input: 32 * mib, waitForMark: true, expectOutput: 32 * mib))
            }
        }
        // Many echoes in a row on one channel: each reply must come back before the next piece
        // is sent, so a reply left behind in libssh2's queue stops the exchange until the next
        // keepalive (30 s here). Before the fix about one run in two of 300 rounds did.
        for size in [48_000, 200_000, 200_000, 200_000, 200_000, 200_000] {
            try await onSession { ssh in records.append(try await pingPong(ssh, rounds: 300, size: size)) }
        }
        expectWholeAndSteady(records)
    }

    @Test("sshd rekeys every MiB (RekeyLimit 1M) in the middle of a download, an upload and an echo: every byte arrives, no pause over a second", arguments: SSHEngineKind.allCases)
    func rekeyingMidTransfer(engine: SSHEngineKind) async throws {
        // sshd takes a keyword's first value: these come before the fixture's LogLevel VERBOSE.
        let sshd = try SSHDFixture(extraConfig: "RekeyLimit 1M\nLogLevel DEBUG1\n")
        let edge = try EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                   serviceTokens: [(testTokenID, testTokenSecret)])
        let mib = 1 << 20
        let (tunnel, ssh) = try await openSession(sshd, edge, engine: engine)
        var records: [TransferRecord] = []
        records.append(try await transfer(ssh, name: "download while rekeying", command: "head -c \(24 * mib) /dev/zero",
                                          expectOutput: 24 * mib))
        records.append(try await transfer(ssh, name: "upload while rekeying", command: "printf R; exec wc -c",
                                          input: 24 * mib, waitForMark: true, expectOutput: "\(24 * mib)\n".utf8.count))
        records.append(try await transfer(ssh, name: "echo while rekeying", command: "printf R; exec cat",
                                          input: 24 * mib, waitForMark: true, expectOutput: 24 * mib))
        await ssh.disconnect()
        await tunnel.disconnect()
        expectWholeAndSteady(records)
        // The key exchanges did happen: sshd logs each KEXINIT it sends (one at the start).
        let kexinits = sshd.logText.components(separatedBy: "SSH2_MSG_KEXINIT sent").count - 1
        #expect(kexinits > 20, "sshd sent \(kexinits) KEXINITs:\n\(sshd.logText.suffix(2000))")
    }

    /// Every transfer moved all its bytes and ended as it should, with no pause over a second.
    private func expectWholeAndSteady(_ records: [TransferRecord]) {
        for record in records {
            print("pump: \(record)")
            #expect(record.problem == nil, "\(record)")
            #expect(record.longestPause < 1, "a pause of more than a second: \(record)")
        }
    }

    /// `rounds` messages of `size` bytes, each echoed by `cat` before the next goes out; the
    /// longest round (not counting the first) is the record's pause.
    private func pingPong(_ ssh: SSHSession, rounds: Int, size: Int) async throws -> TransferRecord {
        let stdin = try Pipe(), stdout = try Pipe(), stderr = try Pipe()
        let record = LockedBox(TransferRecord(name: "ping-pong \(rounds) × \(size) B"))
        let echoed = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        done.enter()
        Thread {
            defer { done.leave() }
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            var got = 0
            while true {
                let n = read(stdout.read, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                got += n
                record.withLock { $0.received += n }
                while got >= size {
                    got -= size
                    echoed.signal()
                }
            }
            echoed.signal()
        }.start()
        Thread {
            defer { stdin.closeWrite() }
            let message = [UInt8](repeating: 0x33, count: size)
            for round in 0..<rounds {
                let started = Date()
                var offset = 0
                while offset < size {
                    let n = message.withUnsafeBytes { write(stdin.write, $0.baseAddress! + offset, size - offset) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { return }
                    offset += n
                }
                record.withLock { $0.sent += size }
                // A generous bound: a stalled round shows as its length, a dead one ends the loop.
                if echoed.wait(timeout: .now() + 60) == .timedOut { return }
                if round > 0 {
                    let took = Date().timeIntervalSince(started)
                    record.withLock { $0.longestPause = max($0.longestPause, took) }
                }
            }
        }.start()
        let end: SSHChannelEnd
        do {
            end = try await ssh.exec("cat", standardInput: FileDescriptor(rawValue: stdin.read),
                                     standardOutput: FileDescriptor(rawValue: stdout.write),
                                     standardError: FileDescriptor(rawValue: stderr.write))
        } catch {
            end = .lost(error)
        }
        stdout.closeWrite()
        stdin.closeRead()
        try await offPool { done.wait() }
        var result = record.withLock { $0 }
        result.end = end
        if end != .exited(0) {
            result.problem = "cat did not exit 0"
        } else if result.received != rounds * size || result.sent != rounds * size {
            result.problem = "expected \(rounds * size) bytes each way"
        }
        return result
    }
}

/// Accepts any host key (these tests are about the data path, not trust).
struct AcceptAnyHostKey: SSHHostKeyDelegate {
    func validateHostKey(_ key: SSHHostKey) async throws(SSHFailure) {}
}
