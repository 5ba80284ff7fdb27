// Fixtures for `cf-access-tcp shell` (issue 10): a world of sshd + emulator + a private HOME,
// a tmux pseudo-terminal to drive the tool like a person, an ssh-agent, and a real
// gnome-keyring Secret Service on a private D-Bus session bus.

import CFAccessSSH
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real sshd behind the emulator (service token), and a private HOME for the tool.
final class ShellWorld: @unchecked Sendable {
    let sshd: SSHDFixture
    let edge: EdgeFixture
    /// The tool's HOME (its ~/.ssh/known_hosts and default keys live here).
    let home: URL

    init(edge: EdgeFixture? = nil, sshd: SSHDFixture? = nil) throws {
        let sshd = try sshd ?? SSHDFixture()
        self.sshd = sshd
        self.edge = try edge ?? EdgeFixture(certs: try certs(), target: "127.0.0.1:\(sshd.port)",
                                            serviceTokens: [(testTokenID, testTokenSecret)])
        home = try makeTempDir("cfat-shell-home")
        try FileManager.default.createDirectory(at: sshDirectory, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: home) }

    var sshDirectory: URL { home.appendingPathComponent(".ssh") }
    var knownHostsFile: URL { sshDirectory.appendingPathComponent("known_hosts") }

    /// Writes known_hosts naming sshd's host key for the Access hostname.
    func trustHostKey() throws {
        try "\(testHost) \(sshd.hostKeyPublicLine)\n".write(to: knownHostsFile, atomically: true, encoding: .utf8)
    }

    /// `shell USER@HOST` with the edge's address and CA, then `extra`, then `-- command`.
    func arguments(user: String, extra: [String] = [], command: [String]? = nil) -> [String] {
        var arguments = ["shell", "\(user)@\(testHost)", "--connect-to", "127.0.0.1:\(edge.port)",
                         "--ca-file", edge.certs.caFile.path] + extra
        if let command { arguments += ["--"] + command }
        return arguments
    }

    /// The environment for the tool: the service token, this HOME, no agent, no session bus.
    func environment(_ extra: [String: String] = [:]) -> [String: String] {
        var environment = ["TUNNEL_SERVICE_TOKEN_ID": testTokenID, "TUNNEL_SERVICE_TOKEN_SECRET": testTokenSecret,
                           "HOME": home.path, "USER": "nobody-cfat"]
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// Starts the tool without a terminal (this world's environment, no agent, no session bus).
    func startTool(_ arguments: [String], environment extra: [String: String] = [:],
                   stdin: ManagedProcess.Input = .none) throws -> ManagedProcess {
        try ManagedProcess(try TestPaths.binary("cf-access-tcp"), arguments, environment: environment(extra),
                           removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: stdin)
    }

    /// Runs the tool to completion without a terminal.
    func runTool(_ arguments: [String], environment extra: [String: String] = [:], stdin: Data? = nil,
                 timeout: TimeInterval = 90) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try startTool(arguments, environment: extra, stdin: stdin.map { .data($0) } ?? .none)
        let status = try process.waitForExit(timeout: timeout)
        return (status, process.stdoutText, process.stderrText)
    }

    /// A shell command line running the tool with `arguments` and `environment` (quoted for sh).
    func toolCommandLine(_ arguments: [String], environment extra: [String: String] = [:],
                         unset: [String] = ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"]) throws -> String {
        let binary = try TestPaths.binary("cf-access-tcp").path
        let variables = environment(extra).sorted { $0.key < $1.key }.map { "\($0.key)=\(shellQuote($0.value))" }
        return (["env"] + unset.flatMap { ["-u", $0] } + variables + [shellQuote(binary)] + arguments.map(shellQuote))
            .joined(separator: " ")
    }
}

/// `text` quoted for a POSIX shell.
func shellQuote(_ text: String) -> String {
    "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
}

/// A detached tmux session on a private server: a real pseudo-terminal the test types into
/// (send-keys) and reads (capture-pane). The command runs under `sh`; when it ends the pane
/// shows `[exit N]` (and `TTY-RESTORED` if the terminal settings are as before) and stays.
final class TmuxTerminal: @unchecked Sendable {
    let socket: String
    private let directory: URL
    private let tmux: String
    private let environment: [String: String]

    init(command: String, columns: Int = 100, rows: Int = 30, environment: [String: String] = [:]) throws {
        let tmux = which("tmux")
        try requireRealPart(tmux != nil, "tmux (package tmux)")
        self.tmux = tmux!
        directory = try makeTempDir("cfat-tmux")
        socket = directory.appendingPathComponent("socket").path
        self.environment = environment.merging(["TERM": "xterm"]) { old, _ in old }
        let wrapped = "before=$(stty -g); \(command); status=$?; after=$(stty -g); "
            + "[ \"$before\" = \"$after\" ] && echo TTY-RESTORED; echo \"[exit $status]\"; sleep 3600"
        let result = try run(URL(fileURLWithPath: self.tmux),
                             ["-S", socket, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                              "-x", String(columns), "-y", String(rows), "sh", "-c", wrapped],
                             env: self.environment, timeout: 30)
        guard result.status == 0 else { throw FixtureError("tmux new-session failed: \(result.stderr)") }
        _ = try? control(["set-option", "-t", "t", "history-limit", "5000"])
    }

    deinit {
        _ = try? control(["kill-server"])
        try? FileManager.default.removeItem(at: directory)
    }

    @discardableResult
    func control(_ arguments: [String]) throws -> String {
        let result = try run(URL(fileURLWithPath: tmux), ["-S", socket] + arguments, env: environment, timeout: 30)
        guard result.status == 0 else {
            throw FixtureError("tmux \(arguments.joined(separator: " ")) failed: \(result.stderr)")
        }
        return result.stdout
    }

    /// Types `text` literally, then Enter.
    func type(_ text: String, enter: Bool = true) throws {
        if !text.isEmpty { try control(["send-keys", "-t", "t", "-l", text]) }
        if enter { try control(["send-keys", "-t", "t", "Enter"]) }
    }

    /// The pane's text, with its scroll-back.
    func screen() throws -> String {
        try control(["capture-pane", "-p", "-J", "-t", "t", "-S", "-3000"])
    }

    /// Waits until the screen contains `text` `count` times; returns the screen.
    @discardableResult
    func waitFor(_ text: String, count: Int = 1, timeout: TimeInterval = 60) throws -> String {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            let shown = try screen()
            if shown.components(separatedBy: text).count - 1 >= count { return shown }
            if Date() >= deadline {
                throw FixtureError("tmux: \"\(text)\" (×\(count)) did not appear within \(timeout) s; screen:\n\(shown)")
            }
            usleep(200_000)
        }
    }

    /// The tool's exit status once the pane shows `[exit N]`.
    func exitStatus(timeout: TimeInterval = 60) throws -> Int32 {
        let shown = try waitFor("[exit ", timeout: timeout)
        guard let range = shown.range(of: "[exit "),
              let end = shown[range.upperBound...].firstIndex(of: "]"),
              let status = Int32(shown[range.upperBound..<end]) else {
            throw FixtureError("tmux: no exit status on screen:\n\(shown)")
        }
        return status
    }

    /// The process ids of the pane's command's children (the tool under the wrapping `sh`).
    func commandChildren() throws -> [pid_t] {
        let shell = try control(["list-panes", "-t", "t", "-F", "#{pane_pid}"]).trimmingCharacters(in: .whitespacesAndNewlines)
        let children = (try? String(contentsOfFile: "/proc/\(shell)/task/\(shell)/children", encoding: .utf8)) ?? ""
        return children.split(separator: " ").compactMap { pid_t($0) }
    }

    /// Resizes the window (the tool gets SIGWINCH).
    func resize(columns: Int, rows: Int) throws {
        try control(["resize-window", "-t", "t", "-x", String(columns), "-y", String(rows)])
    }
}

/// A real ssh-agent on a private socket holding `keys` (in that order).
final class AgentFixture: @unchecked Sendable {
    let socket: String
    private let directory: URL
    private let process: ManagedProcess

    convenience init(key: URL) throws { try self.init(keys: [key]) }

    init(keys: [URL]) throws {
        let agent = which("ssh-agent"), add = which("ssh-add")
        try requireRealPart(agent != nil && add != nil, "ssh-agent and ssh-add (package openssh-client)")
        directory = try makeTempDir("cfat-agent")
        socket = directory.appendingPathComponent("agent.sock").path
        process = try ManagedProcess(URL(fileURLWithPath: agent!), ["-D", "-a", socket])
        let deadline = Date(timeIntervalSinceNow: 20)
        while !FileManager.default.fileExists(atPath: socket) {
            guard Date() < deadline, process.isRunning else { throw FixtureError("ssh-agent did not start: \(process.stderrText)") }
            usleep(50_000)
        }
        for key in keys {
            let added = try run(URL(fileURLWithPath: add!), [key.path], env: ["SSH_AUTH_SOCK": socket], timeout: 30)
            guard added.status == 0 else { throw FixtureError("ssh-add failed: \(added.stderr)") }
        }
    }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// A private D-Bus session bus (dbus-run-session) with a real gnome-keyring Secret Service,
/// its keyrings under `home`.
final class KeyringFixture: @unchecked Sendable {
    /// DBUS_SESSION_BUS_ADDRESS of the bus.
    let busAddress: String
    let home: URL
    private let process: ManagedProcess

    init(home: URL) throws {
        let session = which("dbus-run-session"), keyring = which("gnome-keyring-daemon")
        try requireRealPart(session != nil, "dbus-run-session (package dbus)")
        try requireRealPart(keyring != nil, "gnome-keyring-daemon (package gnome-keyring)")
        try requireRealPart(which("secret-tool") != nil, "secret-tool (package libsecret-tools)")
        self.home = home
        let runtime = home.appendingPathComponent("run")
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let script = "printf 'cfat-keyring' | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; "
            + "echo \"BUS=$DBUS_SESSION_BUS_ADDRESS\"; exec sleep 3600"
        process = try ManagedProcess(URL(fileURLWithPath: session!), ["--", "sh", "-c", script],
                                     environment: ["HOME": home.path, "XDG_RUNTIME_DIR": runtime.path],
                                     removingEnvironment: ["DBUS_SESSION_BUS_ADDRESS"])
        let line = try process.waitForLine(matching: "BUS=", timeout: 30)
        busAddress = String(line.dropFirst(4))
        guard !busAddress.isEmpty else { throw FixtureError("dbus-run-session gave no bus address") }
    }

    deinit { process.terminate() }

    /// The environment that reaches this Secret Service.
    var environment: [String: String] {
        ["DBUS_SESSION_BUS_ADDRESS": busAddress, "XDG_RUNTIME_DIR": home.appendingPathComponent("run").path]
    }

    /// `secret-tool lookup` for the tool's schema: the stored password, or nil.
    func lookup(user: String, host: String, port: Int) throws -> String? {
        let result = try run("secret-tool", ["lookup", "user", user, "host", host, "port", String(port)],
                             env: environment.merging(["HOME": home.path]) { _, new in new }, timeout: 30)
        return result.status == 0 && !result.stdout.isEmpty ? result.stdout : nil
    }
}

/// Whether known_hosts `text` has exactly `count` lines (nil: any number) and one of them names
/// `name` with `key` (the key type and base64): plainly, or hashed as `HashKnownHosts` writes it
/// (Debian's /etc/ssh/ssh_config sets it, and the tool follows it as ssh does).
func knownHosts(_ text: String, names name: String, key: String, lines count: Int? = 1) -> Bool {
    let lines = text.split(separator: "\n")
    if let count, lines.count != count { return false }
    return lines.contains { line in
        let fields = line.split(separator: " ", maxSplits: 1)
        return fields.count == 2 && String(fields[1]) == key && KnownHosts.hostField(fields[0], matches: name)
    }
}

/// A real sshd behind websockify (Debian's WebSocket server, not our emulator: no Access, no
/// credential), the tool's HOME, and `shell` arguments that reach them (issue 25 part 2).
final class WebsockifyShellWorld: @unchecked Sendable {
    let sshd: SSHDFixture
    let websockify: WebsockifyFixture
    let home: URL

    init(sshd given: SSHDFixture? = nil) throws {
        sshd = try given ?? SSHDFixture()
        websockify = try WebsockifyFixture(target: "127.0.0.1:\(sshd.port)")
        home = try makeTempDir("cfat-known-hosts")
        try FileManager.default.createDirectory(at: home.appendingPathComponent(".ssh"), withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: home) }

    func file(_ name: String) -> URL { home.appendingPathComponent(name) }

    /// `shell` as `user` (default: sshd's key user, with its key) with `extra`, then `command`.
    func arguments(_ engine: ShellEngine, _ extra: [String], user: String? = nil, command: [String]? = ["echo", "reached"]) throws -> [String] {
        let key = user == nil ? ["-i", sshd.clientKeyPath.path] : []
        return ["shell", "\(user ?? sshd.keyUser)@\(testHost)", "--connect-to", "127.0.0.1:\(websockify.port)",
                "--ca-file", try certs().caFile.path, "--token-dir", file("tokens").path] + key + engine.flags + extra
            + (command.map { ["--"] + $0 } ?? [])
    }

    /// Starts `shell` (see ``arguments(_:_:user:command:)``) without a terminal.
    func start(_ engine: ShellEngine, _ extra: [String], user: String? = nil, command: [String]? = ["echo", "reached"],
               stdin: Data? = nil, environment: [String: String] = [:]) throws -> ManagedProcess {
        try ManagedProcess(try TestPaths.binary("cf-access-tcp"), try arguments(engine, extra, user: user, command: command),
                           environment: ["HOME": home.path, "USER": "nobody-cfat"].merging(environment) { _, new in new },
                           removingEnvironment: ["SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS"], stdin: stdin.map { .data($0) } ?? .none)
    }

    /// Runs `shell` to its end without a terminal; stdout without carriage returns.
    func run(_ engine: ShellEngine, _ extra: [String], user: String? = nil, command: [String]? = ["echo", "reached"],
             stdin: Data? = nil, environment: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = try start(engine, extra, user: user, command: command, stdin: stdin, environment: environment)
        let status = try process.waitForExit(timeout: 90)
        return (status, process.stdoutText.replacingOccurrences(of: "\r", with: ""), process.stderrText)
    }
}
