internal import CCFLibSSH

/// Reads what a server sends before its SSH identification (`SSH-2.0-…`, RFC 4253 §4.2) the way
/// OpenSSH does, before libssh reads the identification itself: lines before it are dropped, at
/// most ``maxLines`` of them, each at most ``maxLineLength`` bytes; a NUL byte, a longer line or
/// more lines mean the peer is not an SSH server. A pure value fed with the bytes as they arrive.
package struct IdentificationScanner: Sendable {
    /// What the bytes so far amount to.
    package enum Outcome: Sendable, Equatable {
        /// No identification yet: read more.
        case needMore
        /// The identification arrived: ``passOn`` holds it and every byte after it.
        case identified
        /// Not an SSH server: the reason, one line.
        case refused(String)
    }

    /// OpenSSH's limit on a line before or of the identification (`SSH_MAX_BANNER_LEN`).
    package static let maxLineLength = 8192
    /// OpenSSH's limit on the lines before the identification (`SSH_MAX_PRE_BANNER_LINES`).
    package static let maxLines = 1024
    /// The longest identification line RFC 4253 §4.2 allows, CR LF included.
    package static let maxIdentificationLength = 255

    private var buffer: [UInt8] = []
    private var firstLine: [UInt8]?
    /// Lines dropped before the identification.
    package private(set) var ignoredLines = 0
    /// Once identified: the identification line and what followed it.
    package private(set) var passOn: [UInt8] = []
    /// The length of the identification line, line end included, at the start of ``passOn``.
    package private(set) var identificationLineLength = 0
    /// The identification without its line end, visible-safe (`SSH-2.0-OpenSSH_9.2p1 Debian-2`).
    package private(set) var identification: String?
    /// The outcome so far.
    package private(set) var outcome = Outcome.needMore

    /// A scanner that has seen nothing.
    package init() {}

    /// Feeds the next bytes from the server; returns the outcome so far.
    @discardableResult
    package mutating func feed<Bytes: Collection>(_ bytes: Bytes) -> Outcome where Bytes.Element == UInt8 {
        guard outcome == .needMore else { return outcome }
        buffer.append(contentsOf: bytes)
        while true {
            guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else {
                if buffer.contains(0) { return refuse("a NUL byte") }
                if buffer.count > Self.maxLineLength {
                    return refuse("\(Self.maxLineLength) bytes without a line end")
                }
                return .needMore
            }
            let line = Array(buffer[..<newline])
            if line.count + 1 > Self.maxLineLength { return refuse("a line longer than \(Self.maxLineLength) bytes") }
            if line.contains(0) { return refuse("a NUL byte") }
            if line.starts(with: Array("SSH-".utf8)) {
                guard line.count + 1 <= Self.maxIdentificationLength else {
                    outcome = .refused("the SSH server's identification line is longer than \(Self.maxIdentificationLength) bytes (RFC 4253)")
                    return outcome
                }
                var text = line[...]
                if text.last == UInt8(ascii: "\r") { text = text.dropLast() }
                identification = ServerText.visible(text)
                identificationLineLength = newline + 1
                passOn = buffer
                buffer = []
                outcome = .identified
                return outcome
            }
            if firstLine == nil { firstLine = line }
            ignoredLines += 1
            if ignoredLines > Self.maxLines { return refuse("more than \(Self.maxLines) lines") }
            buffer.removeFirst(newline + 1)
        }
    }

    /// What the peer sent first, visible-safe and short, for messages.
    package var sample: String {
        var bytes = firstLine ?? buffer
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        return ServerText.visible(bytes.prefix(48)) + (bytes.count > 48 ? "…" : "")
    }

    private mutating func refuse(_ what: String) -> Outcome {
        outcome = .refused("not an SSH server: it sent \(what) and no SSH identification (it began \"\(sample)\")")
        return outcome
    }
}

/// Which host-key algorithms the session asks for, in which order (issue 16 point 1): those of
/// the key types already known for the host first, as OpenSSH does, then the others in
/// OpenSSH's order. Host certificates are never asked for (our known_hosts rules do not check
/// them against `@cert-authority` lines), nor DSA.
package enum HostKeyAlgorithms {
    /// OpenSSH's order of plain host-key algorithms (libssh has them all); `ssh-rsa` (SHA-1) last,
    /// for old servers.
    package static let openSSHOrder = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                                       "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]

    /// The algorithms that verify keys of the known_hosts `types` (`ssh-ed25519`, `ssh-rsa`,
    /// `ecdsa-sha2-nistp256`, …), in OpenSSH's order.
    package static func preferred(forKnownTypes types: Set<String>) -> [String] {
        openSSHOrder.filter { algorithm in
            switch algorithm {
            case "rsa-sha2-512", "rsa-sha2-256": return types.contains("ssh-rsa")
            default: return types.contains(algorithm)
            }
        }
    }

    /// The list handed to libssh: `preferred` first, then the rest of OpenSSH's order, each
    /// only if `supported` has it.
    package static func preference(preferred: [String]?, supported: [String]) -> [String] {
        var list: [String] = []
        for algorithm in (preferred ?? []) + openSSHOrder where supported.contains(algorithm) && !list.contains(algorithm) {
            list.append(algorithm)
        }
        return list
    }
}

/// The cipher order offered in the key exchange: OpenSSH's client order (chacha20-poly1305,
/// AES-CTR from 128 bits up, AES-GCM), all of which libssh has.
package enum CipherAlgorithms {
    package static let openSSHOrder = ["chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
                                       "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]
}

/// The SSH engine this process runs with: libssh, its version read at run time.
package enum SSHEngine {
    /// `libssh 0.10.6`.
    package static var text: String {
        "libssh " + (ssh_version(0).map { String(cString: $0) }?.split(separator: "/").first.map(String.init) ?? "unknown")
    }
}

/// Why a key exchange could not agree (issue 16 point 9), from libssh's error ("kex error : no
/// match for method M: server [S], client [C]"): one plain line naming both lists.
package enum NegotiationDiagnosis {
    /// The plain line, or nil when `libsshError` is not a failed negotiation.
    package static func explain(libsshError: String, engine: String) -> String? {
        guard let method = libsshError.firstRange(of: "no match for method ") else { return nil }
        let rest = libsshError[method.upperBound...]
        guard let serverStart = rest.firstRange(of: ": server ["),
              let serverEnd = rest[serverStart.upperBound...].firstRange(of: "], client ["),
              let clientEnd = rest[serverEnd.upperBound...].lastIndex(of: "]") else { return nil }
        let name = rest[..<serverStart.lowerBound]
        let server = rest[serverStart.upperBound..<serverEnd.lowerBound]
        let client = rest[serverEnd.upperBound..<clientEnd]
        let what: String
        switch name {
        case let name where name.hasPrefix("kex"): what = "No key-exchange method in common"
        case let name where name.contains("host key"): what = "No host-key algorithm in common"
        case let name where name.hasPrefix("encryption"): what = "No cipher in common"
        case let name where name.hasPrefix("mac"): what = "No MAC in common"
        case let name where name.hasPrefix("compression"): what = "No compression method in common"
        default: what = "No \(name) in common"
        }
        return "\(what): the SSH server offers \(ServerText.visible(String(server), limit: 1024)); this client (\(engine)) offers \(client)"
    }
}

/// What the linked SSH engine can do.
package struct SSHEngineFeatures: Sendable, Equatable {
    /// The engine and its version, e.g. `libssh 0.10.6`.
    package var version: String
    /// Whether RSA keys sign and verify with `rsa-sha2-256/512`; without it only with `ssh-rsa`
    /// (SHA-1), which OpenSSH ≥ 8.8 refuses by default.
    package var rsaSHA2: Bool

    /// Features of an engine.
    package init(version: String, rsaSHA2: Bool) {
        self.version = version
        self.rsaSHA2 = rsaSHA2
    }

    /// The engine this process runs with: libssh signs and verifies with rsa-sha2.
    package static let linked = SSHEngineFeatures(version: SSHEngine.text, rsaSHA2: true)

    /// Whether the linked libssh sends terminal modes with a PTY request: 0.11 and later do;
    /// 0.10 (Debian 12) always sends an empty list, and the server keeps its defaults.
    package static var sendsTerminalModes: Bool { PTYRequest.withModes != nil }

    /// Why RSA keys fail with this engine, naming the way out (nil when they do not).
    package var rsaLimitation: String? {
        guard !rsaSHA2 else { return nil }
        return "RSA keys need rsa-sha2-256/512 signatures, which \(version) cannot make (it signs and verifies RSA only as "
            + "ssh-rsa, SHA-1, which OpenSSH ≥ 8.8 refuses); use an ed25519 or ECDSA key, or ssh with ProxyCommand"
    }
}
