internal import CCFLibSSH


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


extension SSHEngineFeatures {
    /// The linked libssh (`libssh 0.10.6`): it signs and verifies RSA with rsa-sha2.
    package static let libssh = SSHEngineFeatures(
        version: "libssh " + (ssh_version(0).map { String(cString: $0) }?.split(separator: "/").first.map(String.init) ?? "unknown"),
        rsaSHA2: true)
}
