import FoundationEssentials

/// Looks at a private key file without decrypting it.
package enum PrivateKeyFile {
    /// Whether the key at `path` is protected by a passphrase (false if it cannot be read).
    package static func isEncrypted(path: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: path) else { return false }
        return isEncrypted(contents: data)
    }

    /// Whether a key file's `contents` are protected by a passphrase: an OpenSSH key whose cipher
    /// is not "none", or an encrypted PEM key.
    package static func isEncrypted(contents: Data) -> Bool {
        let text = String(decoding: contents, as: UTF8.self)
        if text.contains("ENCRYPTED") { return true }   // PEM: Proc-Type: 4,ENCRYPTED / BEGIN ENCRYPTED PRIVATE KEY
        let begin = "-----BEGIN OPENSSH PRIVATE KEY-----", end = "-----END OPENSSH PRIVATE KEY-----"
        guard let start = text.firstRange(of: begin), let stop = text.firstRange(of: end), start.upperBound <= stop.lowerBound else {
            return false
        }
        let body = text[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
        guard let blob = Data(base64Encoded: String(body)) else { return false }
        // "openssh-key-v1\0", then the cipher name as an SSH string.
        let magic = 15
        let bytes = [UInt8](blob)
        guard bytes.count > magic + 4 else { return false }
        let length = Int(bytes[magic]) << 24 | Int(bytes[magic + 1]) << 16 | Int(bytes[magic + 2]) << 8 | Int(bytes[magic + 3])
        guard length > 0, bytes.count >= magic + 4 + length else { return false }
        return String(decoding: bytes[(magic + 4)..<(magic + 4 + length)], as: UTF8.self) != "none"
    }
}
