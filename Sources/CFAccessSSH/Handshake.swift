internal import CCFSSH2

/// Reads what a server sends before its SSH identification (`SSH-2.0-…`, RFC 4253 §4.2) the way
/// OpenSSH does, for the session's receive callback: lines before it are dropped, at most
/// ``maxLines`` of them, each at most ``maxLineLength`` bytes; a NUL byte, a longer line or more
/// lines mean the peer is not an SSH server. libssh2 1.10 alone would read such a stream for as
/// long as it lasts. A pure value fed with the bytes as they arrive.
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
    /// The longest identification line libssh2 can take, CR LF included (RFC 4253 §4.2).
    package static let maxIdentificationLength = 255

    private var buffer: [UInt8] = []
    private var firstLine: [UInt8]?
    /// Lines dropped before the identification.
    package private(set) var ignoredLines = 0
    /// The bytes for libssh2 once identified: the identification line and what followed it.
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

/// The algorithm lists of a peer's first key-exchange message (SSH_MSG_KEXINIT, RFC 4253 §7.1),
/// read from the first binary packet the server sends (unencrypted by definition).
package struct KexInit: Sendable, Equatable {
    /// Key-exchange methods.
    package var kex: [String]
    /// Host-key algorithms.
    package var hostKey: [String]
    /// Ciphers, client to server.
    package var ciphers: [String]
    /// MACs, client to server.
    package var macs: [String]

    /// The lists of a KEXINIT.
    package init(kex: [String], hostKey: [String], ciphers: [String], macs: [String]) {
        self.kex = kex
        self.hostKey = hostKey
        self.ciphers = ciphers
        self.macs = macs
    }

    /// The lists of `packet` (the whole binary packet: length, padding length, payload,
    /// padding), or nil if it is not a whole KEXINIT.
    package static func parse(packet: [UInt8]) -> KexInit? {
        guard packet.count >= 6 else { return nil }
        let length = Int(packet[0]) << 24 | Int(packet[1]) << 16 | Int(packet[2]) << 8 | Int(packet[3])
        let padding = Int(packet[4])
        guard length >= padding + 1, packet.count >= 4 + length else { return nil }
        let payload = packet[5..<(5 + length - padding - 1)]
        guard payload.first == 20 else { return nil }   // SSH_MSG_KEXINIT
        var offset = payload.startIndex + 1 + 16        // the type and the cookie
        var lists: [[String]] = []
        for _ in 0..<6 {   // kex, host key, ciphers both ways, MACs both ways
            guard offset + 4 <= payload.endIndex else { return nil }
            let count = Int(payload[offset]) << 24 | Int(payload[offset + 1]) << 16 | Int(payload[offset + 2]) << 8
                | Int(payload[offset + 3])
            offset += 4
            guard count >= 0, offset + count <= payload.endIndex else { return nil }
            let names = payload[offset..<(offset + count)].split(separator: UInt8(ascii: ","))
            lists.append(names.map { ServerText.visible($0, limit: 128) })
            offset += count
        }
        return KexInit(kex: lists[0], hostKey: lists[1], ciphers: lists[2], macs: lists[4])
    }
}

/// Which host-key algorithms the session asks for, in which order (issue 16 point 1): those of
/// the key types already known for the host first, as OpenSSH does, then the others in
/// OpenSSH's order. Host certificates are never asked for (libssh2 cannot check them against
/// `@cert-authority` lines), nor DSA.
package enum HostKeyAlgorithms {
    /// OpenSSH's order of plain host-key algorithms; `ssh-rsa` (SHA-1) last, for libssh2 1.10,
    /// which verifies RSA host keys with nothing else.
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

    /// The list handed to libssh2: `preferred` first, then the rest of OpenSSH's order, each
    /// only if `supported` (libssh2's own list) has it.
    package static func preference(preferred: [String]?, supported: [String]) -> [String] {
        var list: [String] = []
        for algorithm in (preferred ?? []) + openSSHOrder where supported.contains(algorithm) && !list.contains(algorithm) {
            list.append(algorithm)
        }
        return list
    }
}

/// The cipher order offered in the key exchange: OpenSSH's client order first (chacha20, then
/// AES-CTR from 128 bits up, then AES-GCM: what libssh2 has of them), then whatever else the
/// linked libssh2 offers, in its own order. libssh2 1.10 alone would start with aes256-ctr;
/// aes128-ctr is OpenSSH's first choice that libssh2 1.10 has, and costs 10 AES rounds per
/// block instead of 14 (issue 16 point 17).
package enum CipherAlgorithms {
    package static let openSSHOrder = ["chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
                                       "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]

    package static func preference(supported: [String]) -> [String] {
        openSSHOrder.filter { supported.contains($0) } + supported.filter { !openSSHOrder.contains($0) }
    }
}

/// What the linked libssh2 can do, checked at run time (the library may be newer than the
/// headers it was built with).
package struct LibSSH2Features: Sendable, Equatable {
    /// The version text, e.g. `1.10.0`.
    package var version: String
    /// Whether RSA keys sign and verify with `rsa-sha2-256/512` (libssh2 ≥ 1.11); before that
    /// only with `ssh-rsa` (SHA-1), which OpenSSH ≥ 8.8 refuses by default.
    package var rsaSHA2: Bool

    /// Features of a libssh2 of `version`.
    package init(version: String, rsaSHA2: Bool) {
        self.version = version
        self.rsaSHA2 = rsaSHA2
    }

    /// The libssh2 this process runs with.
    package static let linked = LibSSH2Features(version: LibSSH2Version.text, rsaSHA2: libssh2_version(0x010b00) != nil)

    /// Why RSA keys fail with this libssh2, naming the way out (nil when they do not).
    package var rsaLimitation: String? {
        guard !rsaSHA2 else { return nil }
        return "RSA keys need libssh2 ≥ 1.11 (this is libssh2 \(version): it signs and verifies RSA only as ssh-rsa, "
            + "SHA-1, which OpenSSH ≥ 8.8 refuses); use an ed25519 or ECDSA key, or ssh with ProxyCommand"
    }
}

/// Why a key exchange could not agree, from the server's KEXINIT and what this client offered
/// (issue 16 point 9): one plain line instead of libssh2's "Unable to exchange encryption keys".
package enum NegotiationDiagnosis {
    /// The first list with nothing in common, said plainly; nil if every list has a common
    /// name (the failure was something else).
    package static func explain(server: KexInit, hostKeysOffered: [String], kexOffered: [String],
                                ciphersOffered: [String], macsOffered: [String], features: LibSSH2Features) -> String? {
        func common(_ theirs: [String], _ ours: [String]) -> Bool { theirs.contains(where: ours.contains) }
        if !common(server.hostKey, hostKeysOffered) {
            let rsaOnly = server.hostKey.contains(where: { $0.hasPrefix("rsa-sha2-") })
                && !server.hostKey.contains(where: { HostKeyAlgorithms.openSSHOrder.contains($0) && !$0.contains("rsa") })
            if rsaOnly, let limitation = features.rsaLimitation {
                return "The SSH server has only an RSA host key (it offers \(server.hostKey.joined(separator: ","))): \(limitation)"
            }
            return "No host-key algorithm in common: the SSH server offers \(server.hostKey.joined(separator: ",")); "
                + "this client (libssh2 \(features.version)) offers \(hostKeysOffered.joined(separator: ","))"
        }
        if !common(server.kex, kexOffered) {
            return "No key-exchange method in common: the SSH server offers \(server.kex.joined(separator: ",")); "
                + "this client (libssh2 \(features.version)) offers \(kexOffered.joined(separator: ","))"
        }
        if !common(server.ciphers, ciphersOffered) {
            return "No cipher in common: the SSH server offers \(server.ciphers.joined(separator: ",")); "
                + "this client (libssh2 \(features.version)) offers \(ciphersOffered.joined(separator: ","))"
        }
        if !common(server.macs, macsOffered) {
            return "No MAC in common: the SSH server offers \(server.macs.joined(separator: ",")); "
                + "this client (libssh2 \(features.version)) offers \(macsOffered.joined(separator: ","))"
        }
        return nil
    }
}
