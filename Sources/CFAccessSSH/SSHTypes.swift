import AccessCore
import AccessTransport
import FoundationEssentials

/// A server's public host key as sent in the handshake.
public struct SSHHostKey: Sendable, Equatable {
    /// The key blob (SSH wire format), as known_hosts stores it in base64.
    public let blob: [UInt8]
    /// SHA-256 of `blob`.
    public let sha256: [UInt8]

    /// Creates a key from its blob and the blob's SHA-256.
    public init(blob: [UInt8], sha256: [UInt8]) {
        self.blob = blob
        self.sha256 = sha256
    }

    /// The key's algorithm name, the blob's first field (`ssh-ed25519`, `ssh-rsa`,
    /// `ecdsa-sha2-nistp256`, …); empty if the blob is malformed.
    public var algorithm: String { SSHPublicKeyBlob.algorithm(blob) }

    /// Whether the key is an OpenSSH certificate (`…-cert-v01@openssh.com`).
    public var isCertificate: Bool { algorithm.hasSuffix(HostKeyAlgorithms.certificateSuffix) }

    /// The name OpenSSH shows for the key type: `ED25519`, `RSA`, `ECDSA`, `DSA`; `ED25519-CERT`
    /// and the like for certificates.
    public var displayType: String {
        if isCertificate { return Self.displayType(of: String(algorithm.dropLast(HostKeyAlgorithms.certificateSuffix.count))) + "-CERT" }
        return Self.displayType(of: algorithm)
    }

    private static func displayType(of algorithm: String) -> String {
        switch algorithm {
        case "ssh-ed25519": return "ED25519"
        case "ssh-rsa": return "RSA"
        case "ssh-dss": return "DSA"
        case let name where name.hasPrefix("ecdsa-"): return "ECDSA"
        case let name: return name.uppercased()
        }
    }

    /// `SHA256:` and the unpadded base64 of the digest, as `ssh-keygen -lf` prints it.
    public var fingerprint: String {
        "SHA256:" + Base64.encode(sha256, alphabet: .standard, padded: false)
    }

    /// The key as a known_hosts line's key part: `algorithm base64`.
    public var knownHostsText: String {
        "\(algorithm) \(Base64.encode(blob, alphabet: .standard, padded: true))"
    }
}

/// What can be read from an SSH public key blob (wire format) without parsing the key.
package enum SSHPublicKeyBlob {
    /// The blob's first field, the key type (`ssh-ed25519`, `ssh-rsa`, …); empty if malformed.
    package static func algorithm(_ blob: [UInt8]) -> String {
        guard blob.count >= 4 else { return "" }
        let length = Int(blob[0]) << 24 | Int(blob[1]) << 16 | Int(blob[2]) << 8 | Int(blob[3])
        guard length > 0, blob.count >= 4 + length else { return "" }
        return String(decoding: blob[4..<(4 + length)], as: UTF8.self)
    }

    /// `SHA256:` and the unpadded base64 of the blob's digest, as `ssh-keygen -l` prints it.
    package static func fingerprint(_ blob: [UInt8]) -> String {
        "SHA256:" + Base64.encode(Digest.sha256(blob), alphabet: .standard, padded: false)
    }
}

/// The terminal of an interactive channel.
public struct SSHTerminal: Sendable, Equatable {
    /// The terminal type sent with the PTY request (`TERM`), e.g. `xterm-256color`.
    public var term: String
    /// Width in characters.
    public var columns: Int
    /// Height in lines.
    public var rows: Int
    /// The local terminal's modes (interrupt character, erase, CR/NL handling, speeds, …),
    /// sent with the PTY request so the remote terminal behaves like the local one. Only a
    /// libssh of 0.11 or later can send them: with libssh 0.10 (Debian 12) the request carries
    /// an empty list and the server's defaults apply.
    public var modes: SSHTerminalModes

    /// Creates a terminal description.
    public init(term: String, columns: Int, rows: Int, modes: SSHTerminalModes = .none) {
        self.term = term
        self.columns = columns
        self.rows = rows
        self.modes = modes
    }
}

/// One round of keyboard-interactive prompts.
public struct SSHKeyboardPrompt: Sendable, Equatable {
    /// A question of the round.
    public struct Question: Sendable, Equatable {
        /// The prompt text, e.g. `Password: `.
        public let text: String
        /// Whether the answer may be shown while typed.
        public let echo: Bool

        /// A question with its prompt text.
        public init(text: String, echo: Bool) {
            self.text = text
            self.echo = echo
        }
    }
    /// The round's name (often empty).
    public let name: String
    /// The round's instruction (often empty).
    public let instruction: String
    /// The questions, in order; answer each.
    public let questions: [Question]

    /// A round (as a server sends it; for tests and scripted delegates).
    public init(name: String, instruction: String, questions: [Question]) {
        self.name = name
        self.instruction = instruction
        self.questions = questions
    }
}

/// How a channel ended.
public enum SSHChannelEnd: Sendable, Equatable {
    /// The remote command or shell exited with this status.
    case exited(Int32)
    /// The remote command was killed by this signal (e.g. `TERM`).
    case signalled(String)
    /// The channel closed without an exit status, or was closed locally.
    case closed
    /// The connection broke (tunnel or SSH transport).
    case lost(SSHFailure)
    /// Writing the channel's output locally failed (e.g. a full disk).
    case localOutputFailed(String)
    /// The local reader of the output went away (a closed pipe, as in `… | head -1`); the
    /// channel was closed, so the remote command gets no more room to write.
    case outputClosed
}

/// The output and exit status of a command run with ``SSHSession/exec(_:input:environment:)``.
public struct SSHExecResult: Sendable, Equatable {
    /// Everything the command wrote to stdout.
    public let standardOutput: Data
    /// Everything the command wrote to stderr.
    public let standardError: Data
    /// How the command ended.
    public let end: SSHChannelEnd

    /// The exit status, if the command exited with one.
    public var exitStatus: Int32? {
        if case .exited(let status) = end { return status }
        return nil
    }
}
