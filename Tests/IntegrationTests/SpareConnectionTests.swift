import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 27 point 3: a listener dials one spare connection to the edge (TCP and TLS, no request)
/// once a connection has carried bytes, and the next local connection takes it over, so it waits
/// only for the upgrade's round trip. Against our emulator, and against a hostile edge that closes
/// idle connections (while the spare waits, or just as its request arrives).
@Suite("the listener's spare connection", .serialized, .ownThreads)
struct SpareConnectionTests {
    /// Sends one line on a new connection and says whether it came back.
    private func echoesLine(port: Int, _ line: String) throws -> Bool {
        let client = try ClientSocket(port: port)
        let text = Array((line + "\n").utf8)
        try client.send(text)
        var back = [UInt8]()
        _ = try client.receive(count: text.count) { back += $0 }
        return back == text
    }

    /// The established TCP connections of process `pid` to 127.0.0.1:`port` (its sockets' inodes
    /// matched in /proc/net/tcp).
    private func connections(of pid: pid_t, toPort port: Int) -> Int {
        let fdDirectory = "/proc/\(pid)/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: fdDirectory)) ?? []
        var inodes = Set<String>()
        for entry in entries {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "\(fdDirectory)/\(entry)"),
                  target.hasPrefix("socket:[") else { continue }
            inodes.insert(String(target.dropFirst("socket:[".count).dropLast()))
        }
        // Read to its end: the kernel makes the table a page at a time.
        let table = FileHandle(forReadingAtPath: "/proc/net/tcp").map { String(decoding: $0.readDataToEndOfFile(), as: UTF8.self) } ?? ""
        let remote = String(format: "0100007F:%04X", port)
        return table.split(separator: "\n").dropFirst().filter { row in
            let fields = row.split(separator: " ", omittingEmptySubsequences: true)
            // sl local remote st tx:rx tr:when retrnsmt uid timeout inode
            return fields.count > 9 && fields[2] == remote && fields[3] == "01" && inodes.contains(String(fields[9]))
        }.count
    }

    /// Waits (bounded) until `condition` holds.
    private func eventually(_ seconds: TimeInterval, _ condition: () -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }

    @Test("the next connection takes over the spare the first one left: no TCP or TLS handshake of its own, its bytes intact")
    func nextConnectionTakesTheSpare() throws {
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(edge: edge, extra: ["--threads", "1", "--loglevel", "debug"]))
        defer { listener.stop() }
        #expect(try echoesLine(port: listener.port, "first"))
        try listener.process.waitForStderr(containing: "spare connection: TLS open", timeout: 30)
        #expect(try echoesLine(port: listener.port, "second"))
        let log = listener.process.stderrText
        #expect(log.contains("on a spare connection to the edge (TLS open)"), "log: \(log)")
        // Taken, so a new spare follows the second connection.
        try listener.process.waitForStderr(containing: "connection 2 established", timeout: 30)
        #expect(eventually(30) { listener.process.stderrText.components(separatedBy: "spare connection: dialing").count - 1 == 2 })
        #expect(!listener.process.stderrText.contains("connection 28147"), "a spare's own id never shows")
    }

    @Test("two loops: a new connection goes to the idle loop whose spare is parked, not to the first idle loop without one")
    func connectionGoesToTheLoopWithAParkedSpare() throws {
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(
            edge: edge, extra: ["--threads", "2", "--half-close-linger", "0", "--loglevel", "debug"]))
        defer { listener.stop() }
        let process = listener.process
        func count(_ text: String) -> Int { process.stderrText.components(separatedBy: text).count - 1 }
        let taken = "on a spare connection to the edge (TLS open)"
        // Connection 1 on loop 1; connection 2, while 1 is open, starts loop 2. Each has carried
        // bytes, so each loop parks a spare.
        let first = try ClientSocket(port: listener.port)
        try first.send(Array("one\n".utf8))
        _ = try first.receive(count: 4) { _ in }
        let second = try ClientSocket(port: listener.port)
        try second.send(Array("two\n".utf8))
        _ = try second.receive(count: 4) { _ in }
        #expect(eventually(30) { count("spare connection: TLS open") == 2 }, "log: \(process.stderrText)")
        #expect(process.stderrText.contains("carrier loop 2 of at most 2 started"))
        shutdown(first.fd, Int32(SHUT_WR))
        shutdown(second.fd, Int32(SHUT_WR))
        #expect(first.readToEnd(timeout: 30).end == 0)
        #expect(second.readToEnd(timeout: 30).end == 0)
        try process.waitForStderr(containing: "connection 1 ended", timeout: 30)
        try process.waitForStderr(containing: "connection 2 ended", timeout: 30)
        // Connection 3 (both loops idle, both spares parked) takes loop 1's and carries no byte, so
        // loop 1 dials no spare after it.
        let third = try ClientSocket(port: listener.port)
        shutdown(third.fd, Int32(SHUT_WR))
        let thirdEnd = third.readToEnd(timeout: 30)
        #expect(thirdEnd.bytes.isEmpty && thirdEnd.end == 0)
        try process.waitForStderr(containing: "connection 3 ended", timeout: 30)
        #expect(count(taken) == 1, "log: \(process.stderrText)")
        usleep(200_000)   // the loop forgets connection 3 just after it logs its end
        // Connection 4: both loops idle, loop 1 with no spare, loop 2 with its parked one.
        #expect(try echoesLine(port: listener.port, "four, on loop 2's spare"))
        #expect(count(taken) == 2, "the fourth connection dialled anew instead of taking loop 2's spare: \(process.stderrText)")
    }

    @Test("a spare nobody takes is closed after --spare-lifetime, and none follows until a connection opens again")
    func spareExpires() throws {
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(
            edge: edge, extra: ["--threads", "1", "--spare-lifetime", "3", "--half-close-linger", "0", "--loglevel", "debug"]))
        defer { listener.stop() }
        let pid = listener.process.pid
        #expect(connections(of: pid, toPort: edge.port) == 0, "an idle listener holds no connection to the edge")
        #expect(try echoesLine(port: listener.port, "only one"))
        try listener.process.waitForStderr(containing: "spare connection: TLS open", timeout: 30)
        var seen: [Int] = []
        #expect(eventually(10) { seen.append(connections(of: pid, toPort: edge.port)); return seen.last == 1 },
                "the spare alone, once the connection ended: \(seen) \(listener.process.stderrText)")
        try listener.process.waitForStderr(containing: "spare connection: unused for 3 s; closed", timeout: 30)
        #expect(eventually(10) { connections(of: pid, toPort: edge.port) == 0 })
        usleep(1_500_000)
        #expect(connections(of: pid, toPort: edge.port) == 0, "no spare without a connection")
        #expect(listener.process.stderrText.components(separatedBy: "spare connection: dialing").count - 1 == 1)
    }

    @Test("--spare-lifetime 0: no spare at all")
    func noSpare() throws {
        let target = try TargetFixture(.echo)
        let edge = try EdgeFixture(certs: try certs(), target: target.address, serviceTokens: [(testTokenID, testTokenSecret)])
        let listener = try ListenerProcess(arguments: try clientArguments(
            edge: edge, extra: ["--threads", "1", "--spare-lifetime", "0", "--half-close-linger", "0", "--loglevel", "debug"]))
        defer { listener.stop() }
        #expect(try echoesLine(port: listener.port, "first"))
        #expect(try echoesLine(port: listener.port, "second"))
        #expect(eventually(10) { connections(of: listener.process.pid, toPort: edge.port) == 0 })
        #expect(!listener.process.stderrText.contains("spare connection"))
    }

    @Test("hostile edge: a spare the edge closes while it waits is dropped, and the next connection dials a new one")
    func edgeClosesTheWaitingSpare() throws {
        let edge = try HostileEdge(mode: "idle-drop", extra: ["--idle-limit", "0.3"], script: "hostile-tls-edge.py")
        let listener = try ListenerProcess(arguments: try edge.clientArguments(extra: ["--threads", "1", "--loglevel", "debug"]))
        defer { listener.stop() }
        #expect(try echoesLine(port: listener.port, "first"))
        try edge.waitForEvent { $0 == "idle-closed" }
        try listener.process.waitForStderr(containing: "spare connection: the edge ended it while it waited", timeout: 30)
        #expect(try echoesLine(port: listener.port, "second, on a new connection"))
        #expect(!listener.process.stderrText.contains("on a spare connection to the edge"))
    }

    @Test("hostile edge: a spare the edge closes just as the request arrives is dialled again on a new connection, bytes intact")
    func edgeClosesTheSpareAtTheRequest() throws {
        let edge = try HostileEdge(mode: "idle-race", extra: ["--idle-limit", "0.3"], script: "hostile-tls-edge.py")
        let listener = try ListenerProcess(arguments: try edge.clientArguments(extra: ["--threads", "1", "--loglevel", "debug"]))
        defer { listener.stop() }
        #expect(try echoesLine(port: listener.port, "first"))
        try listener.process.waitForStderr(containing: "spare connection: TLS open", timeout: 30)
        usleep(600_000)   // the spare waits past the edge's idle limit
        #expect(try echoesLine(port: listener.port, "second: its spare is refused, its redial answered"))
        try edge.waitForEvent { $0.hasPrefix("request-after-idle") }
        let log = listener.process.stderrText
        #expect(log.contains("on a spare connection to the edge (TLS open)"), "log: \(log)")
        #expect(log.contains("the spare connection was closed by the edge"), "log: \(log)")
        let reported = log.split(separator: "\n").filter { $0.hasPrefix("cf-access-tcp: ") && !$0.contains("listening on") }
        #expect(reported.isEmpty, "no failure reported: \(reported)")
    }
}
