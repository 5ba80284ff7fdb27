import Foundation

/// Makes a throw-away test PKI with the `openssl` command-line tool: a CA and a server
/// certificate it signs, all EC P-256, valid for `validityDays`.
///
/// Files written to `directory`: `ca.pem`, `ca-key.pem`, `server.pem`, `server-key.pem`
/// (key files mode 0600), and with `perHost` `<host>.pem` and `<host>-key.pem` for each host,
/// valid for that host only. The server certificate's SAN holds every host (as DNS, or IP
/// when it is an address literal) plus `DNS:localhost`, `IP:127.0.0.1` and `IP:::1`.
struct CertificateFactory {
    var directory: URL
    var hosts: [String]
    var validityDays = 30
    /// Also write `<host>.pem` and `<host>-key.pem` per host, each valid for that host only.
    var perHost = false

    /// The certificate and key files `--per-host` writes for `host`.
    static func perHostFiles(directory: URL, host: String) -> (certificate: String, key: String) {
        let name = host.lowercased()
        return (directory.appendingPathComponent("\(name).pem").path, directory.appendingPathComponent("\(name)-key.pem").path)
    }

    /// Writes the four files or throws an `EdgeError` naming the failing step.
    func generate() throws {
        let fileManager = FileManager.default
        do {
            try fileManager.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw EdgeError("cannot create \(directory.path): \(error.localizedDescription)")
        }
        let work = fileManager.temporaryDirectory
            .appendingPathComponent("cf-access-edge-certs-\(UUID().uuidString)")
        try fileManager.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? fileManager.removeItem(at: work) }

        let caKey = path("ca-key.pem"), caCert = path("ca.pem")
        let caConfig = work.appendingPathComponent("ca.cnf")
        do {
            try opensslConfiguration().write(to: caConfig, atomically: true, encoding: .utf8)
        } catch {
            throw EdgeError("cannot write \(caConfig.path): \(error.localizedDescription)")
        }
        try Self.openssl("CA key", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                                    "-out", caKey])
        try Self.restrict(caKey)
        try Self.openssl("CA certificate", ["req", "-x509", "-new", "-key", caKey, "-sha256",
                                            "-days", String(validityDays),
                                            "-subj", "/O=cf-access-edge/CN=cf-access-edge test CA",
                                            "-config", caConfig.path, "-extensions", "ca_ext",
                                            "-out", caCert])
        try issue(certificate: path("server.pem"), key: path("server-key.pem"), hosts: hosts, withLoopback: true,
                  caCert: caCert, caKey: caKey, work: work)
        if perHost {
            for host in hosts {
                let files = Self.perHostFiles(directory: directory, host: host)
                try issue(certificate: files.certificate, key: files.key, hosts: [host], withLoopback: false,
                          caCert: caCert, caKey: caKey, work: work)
            }
        }
    }

    /// A server key and certificate signed by the CA, for `hosts` (and the loopback names).
    private func issue(certificate: String, key: String, hosts: [String], withLoopback: Bool,
                       caCert: String, caKey: String, work: URL) throws {
        let config = work.appendingPathComponent("server-\(UUID().uuidString).cnf")
        let csr = work.appendingPathComponent("server-\(UUID().uuidString).csr")
        do {
            try opensslConfiguration(for: hosts, withLoopback: withLoopback).write(to: config, atomically: true, encoding: .utf8)
        } catch {
            throw EdgeError("cannot write \(config.path): \(error.localizedDescription)")
        }
        try Self.openssl("server key", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                                        "-out", key])
        try Self.restrict(key)
        try Self.openssl("server request", ["req", "-new", "-key", key, "-sha256",
                                            "-subj", "/O=cf-access-edge/CN=\(hosts.first ?? "localhost")",
                                            "-config", config.path, "-out", csr.path])
        try Self.openssl("server certificate", ["x509", "-req", "-in", csr.path,
                                                "-CA", caCert, "-CAkey", caKey,
                                                "-set_serial", Self.randomSerial(),
                                                "-days", String(validityDays), "-sha256",
                                                "-extfile", config.path, "-extensions", "server_ext",
                                                "-out", certificate])
    }

    private func path(_ name: String) -> String {
        directory.appendingPathComponent(name).path
    }

    /// The OpenSSL configuration: request defaults and the two extension sections.
    func opensslConfiguration() -> String {
        opensslConfiguration(for: hosts, withLoopback: true)
    }

    /// The configuration whose `alt_names` are `hosts` (plus the loopback names when asked).
    func opensslConfiguration(for hosts: [String], withLoopback: Bool) -> String {
        var dns: [String] = []
        var ips: [String] = []
        for host in hosts + (withLoopback ? ["localhost", "127.0.0.1", "::1"] : []) {
            if Self.isIPAddress(host) {
                if !ips.contains(host) { ips.append(host) }
            } else if !dns.contains(host.lowercased()) {
                dns.append(host.lowercased())
            }
        }
        var alt = dns.enumerated().map { "DNS.\($0.offset + 1) = \($0.element)" }
        alt += ips.enumerated().map { "IP.\($0.offset + 1) = \($0.element)" }
        return """
        [ req ]
        distinguished_name = req_dn
        prompt = no

        [ req_dn ]
        CN = cf-access-edge

        [ ca_ext ]
        basicConstraints = critical, CA:TRUE
        keyUsage = critical, keyCertSign, cRLSign, digitalSignature
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid:always

        [ server_ext ]
        basicConstraints = critical, CA:FALSE
        keyUsage = critical, digitalSignature, keyEncipherment
        extendedKeyUsage = serverAuth
        subjectKeyIdentifier = hash
        authorityKeyIdentifier = keyid, issuer
        subjectAltName = @alt_names

        [ alt_names ]
        \(alt.joined(separator: "\n"))

        """
    }

    /// True for an IPv4 or IPv6 address literal.
    static func isIPAddress(_ text: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, text, &v4) == 1 || inet_pton(AF_INET6, text, &v6) == 1
    }

    /// True for something that may go into a SAN: an address literal or a DNS name
    /// (letters, digits, `-`, `.`, `_`, and a leading `*.` wildcard).
    static func isValidHost(_ text: String) -> Bool {
        if isIPAddress(text) { return true }
        var name = Substring(text)
        if name.hasPrefix("*.") { name = name.dropFirst(2) }
        guard !name.isEmpty, name.count <= 253, !name.hasPrefix("."), !name.hasSuffix("."),
              !name.contains("..") else { return false }
        return name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_") }
    }

    private static func randomSerial() -> String {
        // 16 random bytes with the top bit clear: a positive serial, like OpenSSL's own.
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255) }
        bytes[0] &= 0x7f
        bytes[0] |= 0x01
        return "0x" + bytes.map { String(format: "%02x", $0) }.joined()
    }

    private static func restrict(_ path: String) throws {
        do {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        } catch {
            throw EdgeError("cannot set mode 0600 on \(path): \(error.localizedDescription)")
        }
    }

    /// Runs `openssl ARGS` (found on PATH); throws with openssl's last stderr line on failure.
    private static func openssl(_ step: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["openssl"] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw EdgeError("cannot run openssl: \(error.localizedDescription)")
        }
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let text = String(decoding: output, as: UTF8.self)
            let lastLine = text.split(whereSeparator: \.isNewline).last.map(String.init)
                ?? "exit status \(process.terminationStatus)"
            let reason = process.terminationStatus == 127 ? "openssl not found on PATH" : lastLine
            throw EdgeError("openssl failed making the \(step): \(reason)")
        }
    }
}
