import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 27 point 4: a listener spreads its connections over several carrier threads (one per
/// core by default, `--threads N` at most), started only as connections need them, and every
/// byte of connections carried side by side on different threads arrives.
@Suite("the listener's carrier threads", .serialized, OwnThreadsTrait())
struct CarrierThreadsTests {
    /// The threads of `pid` named as the carrier names its own.
    private func carrierThreads(_ pid: pid_t) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? ""
            return name.hasPrefix("cfat carrier")
        }.count
    }

    /// Echoes `bytes` through a new connection, sending on a thread of its own while reading, and
    /// says whether every byte came back in order.
    private func echoesIntact(_ bytes: [UInt8], port: Int) throws -> Bool {
        let client = try ClientSocket(port: port)
        let sent = OneShotResult()
        Thread { sent.set(Result { try client.send(bytes) }) }.start()
        var back = [UInt8]()
        back.reserveCapacity(bytes.count)
        _ = try client.receive(count: bytes.count) { back += $0 }
        try sent.wait()
        return back == bytes
    }

    /// Sends one line on `client` and says whether the echo target sent it back.
    private func echoesLine(_ client: ClientSocket, _ line: String) throws -> Bool {
        let text = Array((line + "\n").utf8)
        try client.send(text)
        var back = [UInt8]()
        _ = try client.receive(count: text.count) { back += $0 }
        return back == text
    }

    @Test("--threads 2: one connection runs one carrier thread, a second connection starts the second, a third shares one; all three carry bytes")
    func threadsStartAsConnectionsCome() throws {
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--threads", "2"]))
        defer { listener.stop() }
        let pid = listener.process.pid
        #expect(carrierThreads(pid) <= 1, "a listener with no connection yet")

        var held: [ClientSocket] = []
        for (index, expected) in [1, 2, 2].enumerated() {
            let client = try ClientSocket(port: listener.port)
            #expect(try echoesLine(client, "connection \(index)"))
            held.append(client)
            #expect(carrierThreads(pid) == expected, "after connection \(index + 1)")
        }
        // Every held connection still carries bytes, whichever thread it is on.
        for (index, client) in held.enumerated() {
            #expect(try echoesLine(client, "again \(index)"))
        }
    }

    @Test("by default one carrier thread per core the process may use: under taskset -c 0, three connections share one")
    func defaultFollowsTheAffinityMask() throws {
        let taskset = which("taskset")
        try requireRealPart(taskset != nil, "taskset (package util-linux)")
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let process = try ManagedProcess(URL(fileURLWithPath: try #require(taskset)),
                                         ["-c", "0", try TestPaths.binary("cf-access-tcp").path]
                                         + (try clientArguments(edge: edge)) + ["--url", "127.0.0.1:0"])
        defer { process.terminate() }
        let line = try process.waitForStderr(containing: "listening on 127.0.0.1:", timeout: 30)
        let port = try #require(Int(line[line.range(of: "listening on 127.0.0.1:")!.upperBound...].prefix { $0.isNumber }))
        var held: [ClientSocket] = []
        for index in 0..<3 {
            let client = try ClientSocket(port: port)
            #expect(try echoesLine(client, "pinned \(index)"))
            held.append(client)
        }
        #expect(carrierThreads(process.pid) == 1)
    }

    @Test("four 4 MiB echoes at once over two carrier threads: every byte back in order on each (our emulator, websockify)",
          arguments: ["emulator", "websockify"])
    func parallelTransfersIntact(_ edgeKind: String) async throws {
        let target = try TargetFixture(.echo)
        var keep: [AnyObject] = [target]
        let arguments: [String]
        let tokens = try makeTempDir("cfat-threads")
        defer { try? FileManager.default.removeItem(at: tokens) }
        if edgeKind == "websockify" {
            let websockify = try WebsockifyFixture(target: target.address)
            keep.append(websockify)
            arguments = ["--hostname", testHost, "--connect-to", "127.0.0.1:\(websockify.port)", "--ca-file",
                         try certs().caFile.path, "--token-dir", tokens.path, "--no-browser"]
        } else {
            let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
            keep.append(edge)
            arguments = try clientArguments(edge: edge)
        }
        defer { withExtendedLifetime(keep) {} }
        let listener = try ListenerProcess(arguments: arguments + ["--threads", "2"])
        defer { listener.stop() }
        let port = listener.port
        let payloads = try (0..<4).map { _ in try randomBytes(4 << 20) }
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for payload in payloads {
                group.addTask { try await offPool { try self.echoesIntact(payload, port: port) } }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == [true, true, true, true])
        #expect(carrierThreads(listener.process.pid) == 2)
    }
}

/// A sending thread's outcome, awaited by the reading one.
private final class OneShotResult: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: Result<Void, any Error>?

    func set(_ value: Result<Void, any Error>) {
        result = value
        done.signal()
    }

    func wait() throws {
        done.wait()
        try result?.get()
    }
}
