import Foundation

/// The team's SSH user CA of Access short-lived certificates (PROTOCOL.md §4), played with the
/// `ssh-keygen` command: it signs the key a client sends to `/cdn-cgi/access/cert_sign`, and
/// sshd trusts its public key (`TrustedUserCAKeys`).
///
/// The CA key is `--ssh-ca-key` when given (made by `cf-access-edge ssh-ca`), else an ECDSA
/// P-256 key made at the first use in a private temporary directory that dies with the process.
final class SSHUserCA: @unchecked Sendable {
    /// Lifetime of a certificate, in seconds.
    let validitySeconds: Int
    private let configuredKey: String?
    private let lock = NSLock()
    private var madeKey: String?
    private var workDirectory: URL?

    init(keyPath: String?, validitySeconds: Int) {
        configuredKey = keyPath
        self.validitySeconds = validitySeconds
    }

    deinit {
        if let workDirectory { try? FileManager.default.removeItem(at: workDirectory) }
    }

    /// A signed certificate and when it ends.
    struct Signed {
        var certificate: String
        var keyID: String
        var expiresAt: Date
    }

    /// Makes a CA key pair `ssh-ca` (0600) and `ssh-ca.pub` in `directory`; returns the public line.
    static func make(in directory: URL) throws -> String {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let key = directory.appendingPathComponent("ssh-ca").path
        try? FileManager.default.removeItem(atPath: key)
        try? FileManager.default.removeItem(atPath: key + ".pub")
        _ = try sshKeygen("make the SSH CA key", ["-q", "-t", "ecdsa", "-b", "256", "-N", "", "-C", "cf-access-edge SSH user CA",
                                                  "-f", key])
        return try String(contentsOfFile: key + ".pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The CA's public key line, for sshd's `TrustedUserCAKeys`.
    func publicKeyLine() throws -> String {
        let key = try caKey()
        return try Self.sshKeygen("read the SSH CA key", ["-y", "-f", key]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Signs `publicKeyLine` as a user certificate for `principal`, valid from a minute ago
    /// (clock skew) for `validitySeconds`.
    func sign(publicKeyLine: String, principal: String) throws -> Signed {
        let key = try caKey()
        // cloudflared sends the authorized_keys form, newline included (Go's MarshalAuthorizedKey).
        let line = publicKeyLine.trimmingCharacters(in: .whitespacesAndNewlines)
        let fields = line.split(separator: " ")
        guard !line.contains(where: \.isNewline), fields.count >= 2,
              fields[0].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-@.".contains($0)) }),
              !fields[0].hasSuffix("-cert-v01@openssh.com") else {
            throw EdgeError("public_key is not one OpenSSH public key line")
        }
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("cf-access-edge-sign-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(at: work) }
        let file = work.appendingPathComponent("key.pub")
        try Data((fields[0] + " " + fields[1] + "\n").utf8).write(to: file)
        let keyID = UUID().uuidString.lowercased()
        let serial = String(UInt64.random(in: 1...UInt64(Int64.max)))
        let expiresAt = Date().addingTimeInterval(TimeInterval(validitySeconds))
        _ = try Self.sshKeygen("sign the certificate", ["-q", "-s", key, "-I", keyID, "-n", principal, "-z", serial,
                                                         "-V", "-1m:+\(validitySeconds)s", file.path])
        let certificate = try String(contentsOf: work.appendingPathComponent("key-cert.pub"), encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return Signed(certificate: certificate, keyID: keyID, expiresAt: expiresAt)
    }

    /// The CA private key's path, making one at the first call when none was configured.
    private func caKey() throws -> String {
        if let configuredKey { return configuredKey }
        lock.lock()
        defer { lock.unlock() }
        if let madeKey { return madeKey }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cf-access-edge-ca-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        workDirectory = directory
        _ = try Self.make(in: directory)
        let key = directory.appendingPathComponent("ssh-ca").path
        madeKey = key
        return key
    }

    /// Runs `ssh-keygen ARGS` (from PATH) and returns its stdout; throws with its last stderr line.
    @discardableResult
    static func sshKeygen(_ step: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["ssh-keygen"] + arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw EdgeError("cannot run ssh-keygen to \(step): \(error.localizedDescription)")
        }
        let text = output.fileHandleForReading.readDataToEndOfFile()
        let errorText = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let lastLine = String(decoding: errorText, as: UTF8.self).split(whereSeparator: \.isNewline).last.map(String.init)
                ?? "exit status \(process.terminationStatus)"
            throw EdgeError("ssh-keygen could not \(step): "
                            + (process.terminationStatus == 127 ? "ssh-keygen not found on PATH (package openssh-client)" : lastLine))
        }
        return String(decoding: text, as: UTF8.self)
    }
}
