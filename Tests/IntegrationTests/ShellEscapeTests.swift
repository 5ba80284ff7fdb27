import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// OpenSSH's escapes on an interactive `shell` (issue 16 point 14), typed into a real
/// pseudo-terminal (tmux) against a real sshd through the emulator.
@Suite("shell escapes: ~. ~? ~~ on the interactive session", .serialized, .ownThreads)
struct ShellEscapeTests {
    @Test("~? lists the escapes, ~~ sends one ~, a ~ in mid-line is text, ~. after a newline disconnects: status 255 (as ssh), terminal restored")
    func escapes() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path])))
        try terminal.waitFor("\(world.sshd.keyUser)@")
        // Not after a newline: plain text for the remote shell.
        try terminal.type("echo mid~.line")
        try terminal.waitFor("mid~.line", count: 2)
        // After the newline: the list, shown locally, nothing sent.
        try terminal.type("~?", enter: false)
        try terminal.waitFor("Supported escape sequences:")
        let listed = try terminal.screen()
        #expect(listed.contains(" ~.   - terminate connection"), "\(listed)")
        #expect(listed.contains(" ~~   - send the escape character by typing it twice"), "\(listed)")
        // Still at the line start: ~~ sends a single ~ to the remote shell.
        try terminal.type("~~cfat-no-such-command")
        try terminal.waitFor("~cfat-no-such-command: command not found")
        #expect(!(try terminal.screen()).contains("~~cfat-no-such-command"))
        // ~. ends the session at once.
        try terminal.type("~.", enter: false)
        #expect(try terminal.exitStatus() == 255, "ssh's status after ~.")
        let screen = try terminal.screen()
        #expect(screen.contains("Connection to \(testHost) closed."), "\(screen)")
        #expect(screen.contains("TTY-RESTORED"), "\(screen)")
    }

    @Test("~. is the way out of a hung session: with the edge frozen (no answer at all), the tool ends within seconds, without waiting for keepalives")
    func hungSession() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let terminal = try TmuxTerminal(command: try world.toolCommandLine(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path, "--server-alive-interval", "60"])))
        try terminal.waitFor("\(world.sshd.keyUser)@")
        kill(world.edge.process.pid, SIGSTOP)
        defer { kill(world.edge.process.pid, SIGCONT) }
        try terminal.type("echo never-answered")
        let typed = Date()
        try terminal.type("~.", enter: false)
        #expect(try terminal.exitStatus(timeout: 30) == 255)
        // The disconnect is bounded (2 s to send, 2 s for the tunnel to close); keepalives would
        // have taken three minutes with this interval.
        #expect(Date().timeIntervalSince(typed) < 25)
        let screen = try terminal.screen()
        #expect(screen.contains("Connection to \(testHost) closed."), "\(screen)")
        #expect(screen.contains("TTY-RESTORED"), "\(screen)")
    }
}

/// Dead-link detection with the tool's defaults (issue 16 point 11).
@Suite("shell: a dead link is noticed within three keepalive intervals", .serialized, .ownThreads)
struct ShellDeadLinkTests {
    @Test("defaults: keepalives every 10 s, so a silent connection (the edge frozen) ends a command with 75 about 30 s later, not after two minutes")
    func defaultDetection() throws {
        let world = try ShellWorld()
        try world.trustHostKey()
        let tool = try world.startTool(
            world.arguments(user: world.sshd.keyUser, extra: ["-i", world.sshd.clientKeyPath.path],
                            command: ["echo running; sleep 600"]))
        defer { tool.terminate() }
        _ = try tool.waitForLine(matching: "running", timeout: 60)
        kill(world.edge.process.pid, SIGSTOP)
        defer { kill(world.edge.process.pid, SIGCONT) }
        let frozen = Date()
        // Three intervals and a second of silence, counted from the last reply before the freeze
        // (at most one interval earlier): 21–31 s after it. The old rule took 91–122 s.
        let status = try tool.waitForExit(timeout: 50)
        let took = Date().timeIntervalSince(frozen)
        #expect(status == 75, "\(tool.stderrText)")
        // The silence when it was noticed: three intervals and a second, give or take the wake-up.
        let silence = tool.stderrText.components(separatedBy: "no answer to keepalives for ").dropFirst().first
            .flatMap { Int($0.prefix { $0.isNumber }) }
        #expect(silence.map { (31...33).contains($0) } == true, "\(tool.stderrText)")
        #expect(took >= 15, "noticed before three intervals could pass: \(took) s")
        #expect(took < 45, "took \(took) s")
    }
}
