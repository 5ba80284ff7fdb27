// `scripts/hostile-ssh.py`: a small hostile or misconfigured SSH server (paramiko, Debian's
// python3-paramiko) for the shell's trust tests (issue 16).

import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Debian's python3 (the one with python3-paramiko), not whatever `python3` comes first in PATH.
let debianPython = "/usr/bin/python3"

/// `scripts/hostile-ssh.py` in `mode` (see the script's header) on 127.0.0.1, with host keys of
/// the given types made by ssh-keygen for it.
final class HostileSSHServer: @unchecked Sendable {
    let process: ManagedProcess
    let port: Int
    let directory: URL
    /// Each host key's public line (`type base64`), by the ssh-keygen type (`ed25519`, `ecdsa`, `rsa`).
    private(set) var publicLines: [String: String] = [:]

    init(mode: String, hostKeys: [String] = [], extra: [String] = []) throws {
        try requireRealPart(FileManager.default.fileExists(atPath: debianPython), "Debian's python3 (package python3)")
        let check = try run(URL(fileURLWithPath: debianPython), ["-c", "import paramiko"], timeout: 30)
        try requireRealPart(check.status == 0, "paramiko for \(debianPython) (package python3-paramiko)")
        directory = try makeTempDir("cfat-hostile-ssh")
        var arguments = ["-u", repositoryRoot.appendingPathComponent("scripts/hostile-ssh.py").path, "--mode", mode]
        for type in hostKeys {
            let file = directory.appendingPathComponent("host_\(type)")
            var keygen = ["-q", "-t", type, "-N", "", "-f", file.path]
            if type != "ed25519" { keygen += ["-m", "PEM"] }
            if type == "rsa" { keygen += ["-b", "2048"] }
            let made = try run("ssh-keygen", keygen, timeout: 60)
            guard made.status == 0 else { throw FixtureError("ssh-keygen -t \(type) failed: \(made.stderr)") }
            publicLines[type] = try String(contentsOf: file.appendingPathExtension("pub"), encoding: .utf8)
                .split(separator: " ").prefix(2).joined(separator: " ")
            arguments += ["--host-key", file.path]
        }
        process = try ManagedProcess(URL(fileURLWithPath: debianPython), arguments + extra)
        let prefix = "hostile-ssh listening on 127.0.0.1:"
        let line = try process.waitForLine(matching: prefix, timeout: 30)
        guard let port = Int(line.dropFirst(prefix.count)) else { throw FixtureError("no port in: \(line)") }
        self.port = port
    }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }

    /// `127.0.0.1:port`, the emulator's target.
    var address: String { "127.0.0.1:\(port)" }

    /// The event lines printed so far (after the "listening" line).
    var events: [String] {
        process.stdoutText.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("hostile-ssh listening") }
    }

    /// A new key of `type` that this server does not have: `type base64`.
    func otherKey(_ type: String) throws -> String {
        let file = directory.appendingPathComponent("other_\(type)_\(Int.random(in: 0..<1_000_000))")
        let made = try run("ssh-keygen", ["-q", "-t", type, "-N", "", "-f", file.path], timeout: 60)
        guard made.status == 0 else { throw FixtureError("ssh-keygen failed: \(made.stderr)") }
        return try String(contentsOf: file.appendingPathExtension("pub"), encoding: .utf8)
            .split(separator: " ").prefix(2).joined(separator: " ")
    }
}

/// A Unix socket that accepts D-Bus clients and never answers: a wedged session bus.
final class WedgedBus: @unchecked Sendable {
    let path: String
    private let process: ManagedProcess
    private let directory: URL

    init() throws {
        directory = try makeTempDir("cfat-wedged-bus")
        path = directory.appendingPathComponent("bus").path
        let script = """
        import socket, sys, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(sys.argv[1]); s.listen(16)
        print("listening", flush=True)
        held = []
        while True:
            c, _ = s.accept(); held.append(c); print("accepted", flush=True)
        """
        process = try ManagedProcess(URL(fileURLWithPath: debianPython), ["-u", "-c", script, path])
        _ = try process.waitForLine(matching: "listening", timeout: 30)
    }

    deinit {
        process.terminate()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Whether a client connected to it.
    var accepted: Bool { process.stdoutText.contains("accepted") }

    /// `DBUS_SESSION_BUS_ADDRESS` for it.
    var address: String { "unix:path=\(path)" }
}
