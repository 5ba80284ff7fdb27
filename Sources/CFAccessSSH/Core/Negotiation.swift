import FoundationEssentials

// The algorithm lists a session offers, and why a negotiation failed: pure values, for both
// libraries.

/// Which host-key algorithms the session asks for, in which order (issue 16 point 1): those of
/// the key types already known for the host first, as OpenSSH does, then the others in
/// OpenSSH's order. The preferred list holds the certificate algorithms (``certificateOrder``)
/// when a `@cert-authority` line names the host: neither library takes them in its key exchange
/// (``HostCertificateProbe`` reads the certificate on a connection of its own), so they are
/// dropped from what a library offers. DSA is never asked for.
package enum HostKeyAlgorithms {
    /// What every certificate algorithm's name ends with.
    package static let certificateSuffix = "-cert-v01@openssh.com"

    /// OpenSSH's order of host-certificate algorithms.
    package static let certificateOrder = ["ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
                                           "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521-cert-v01@openssh.com",
                                           "rsa-sha2-512-cert-v01@openssh.com", "rsa-sha2-256-cert-v01@openssh.com"]

    /// OpenSSH's order of plain host-key algorithms; `ssh-rsa` (SHA-1) last, for old servers and
    /// for libssh2 1.10, which verifies RSA host keys with nothing else.
    package static let openSSHOrder = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                                       "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]

    /// The algorithms that verify keys of the known_hosts `types` (`ssh-ed25519`, `ssh-rsa`,
    /// `ecdsa-sha2-nistp256`, …), in OpenSSH's order; every certificate algorithm first when a
    /// CA is trusted for the host (`certificateAuthority`).
    package static func preferred(forKnownTypes types: Set<String>, certificateAuthority: Bool = false) -> [String] {
        (certificateAuthority ? certificateOrder : []) + openSSHOrder.filter { algorithm in
            switch algorithm {
            case "rsa-sha2-512", "rsa-sha2-256": return types.contains("ssh-rsa")
            default: return types.contains(algorithm)
            }
        }
    }

    /// The list handed to the library: `preferred` first, then the rest of OpenSSH's order, each
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
/// AES-CTR from 128 bits up, AES-GCM): libssh has them all, libssh2 some.
package enum CipherAlgorithms {
    package static let openSSHOrder = ["chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
                                       "aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]

    /// OpenSSH's order first (what `supported` has of it), then whatever else the library
    /// offers, in its own order. libssh2 1.10 alone would start with aes256-ctr; aes128-ctr is
    /// OpenSSH's first choice that libssh2 1.10 has, and costs 10 AES rounds per block instead
    /// of 14 (issue 16 point 17).
    package static func preference(supported: [String]) -> [String] {
        openSSHOrder.filter { supported.contains($0) } + supported.filter { !openSSHOrder.contains($0) }
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

/// Why a key exchange could not agree, from the server's KEXINIT and what this client offered
/// (issue 16 point 9): one plain line instead of libssh2's "Unable to exchange encryption keys".
package enum KexDiagnosis {
    /// The first list with nothing in common, said plainly; nil if every list has a common
    /// name (the failure was something else).
    package static func explain(server: KexInit, hostKeysOffered: [String], kexOffered: [String],
                                ciphersOffered: [String], macsOffered: [String], features: SSHEngineFeatures) -> SSHFailure? {
        guard let why = explainText(server: server, hostKeysOffered: hostKeysOffered, kexOffered: kexOffered,
                                    ciphersOffered: ciphersOffered, macsOffered: macsOffered, features: features) else { return nil }
        var failure = SSHFailure(.protocolError, why.text)
        failure.engineLimitation = why.limitation
        return failure
    }

    private static func explainText(server: KexInit, hostKeysOffered: [String], kexOffered: [String], ciphersOffered: [String],
                                    macsOffered: [String], features: SSHEngineFeatures) -> (text: String, limitation: String?)? {
        func common(_ theirs: [String], _ ours: [String]) -> Bool { theirs.contains(where: ours.contains) }
        if !common(server.hostKey, hostKeysOffered) {
            let rsaOnly = server.hostKey.contains(where: { $0.hasPrefix("rsa-sha2-") })
                && !server.hostKey.contains(where: { HostKeyAlgorithms.openSSHOrder.contains($0) && !$0.contains("rsa") })
            if rsaOnly, let limitation = features.rsaLimitation {
                return ("The SSH server has only an RSA host key (it offers \(server.hostKey.joined(separator: ","))): \(limitation)",
                        limitation)
            }
            return ("No host-key algorithm in common: the SSH server offers \(server.hostKey.joined(separator: ",")); "
                + "this client (\(features.version)) offers \(hostKeysOffered.joined(separator: ","))", nil)
        }
        if !common(server.kex, kexOffered) {
            return ("No key-exchange method in common: the SSH server offers \(server.kex.joined(separator: ",")); "
                + "this client (\(features.version)) offers \(kexOffered.joined(separator: ","))", nil)
        }
        if !common(server.ciphers, ciphersOffered) {
            return ("No cipher in common: the SSH server offers \(server.ciphers.joined(separator: ",")); "
                + "this client (\(features.version)) offers \(ciphersOffered.joined(separator: ","))", nil)
        }
        if !common(server.macs, macsOffered) {
            return ("No MAC in common: the SSH server offers \(server.macs.joined(separator: ",")); "
                + "this client (\(features.version)) offers \(macsOffered.joined(separator: ","))", nil)
        }
        return nil
    }
}

/// Why a server refused to open a channel (RFC 4254 §5.1), as OpenSSH's ssh says it
/// (`connect failed: Connection refused`).
enum ChannelOpenFailure {
    /// The reason codes' names, as OpenSSH prints them.
    static let names: [Int: String] = [1: "administratively prohibited", 2: "connect failed",
                                       3: "unknown channel type", 4: "resource shortage"]

    /// From libssh 0.10's message, `Channel opening failure: channel 54 error (2) Connection
    /// refused`: the code's name, then the server's own description (already visible-safe).
    /// Another message is returned as it is.
    static func reason(libsshError text: String) -> String {
        guard let marker = text.firstRange(of: "error (") else { return text }
        let rest = text[marker.upperBound...]
        guard let close = rest.firstIndex(of: ")"), let code = Int(rest[..<close]) else { return text }
        let description = String(rest[rest.index(after: close)...]).trimmingHorizontalWhitespace
        let name = names[code] ?? "reason \(code)"
        return description.isEmpty ? name : "\(name): \(description)"
    }

    /// From libssh2's message, `Channel open failure (connect failed)`: the words in brackets.
    static func reason(libssh2Error text: String) -> String {
        if let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")"), open < close {
            return String(text[text.index(after: open)..<close])
        }
        return text
    }
}
