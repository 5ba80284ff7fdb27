import FoundationEssentials

/// Looks at a private key file without decrypting it.
package enum PrivateKeyFile {
    /// Whether the key at `path` is protected by a passphrase (false if it cannot be read).
    package static func isEncrypted(path: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: path) else { return false }
        return isEncrypted(contents: data)
    }

    /// The public key blob of the private key at `path`: from `path.pub` if it is there (as
    /// OpenSSH reads it), else from an OpenSSH key's header (unencrypted even when the key is);
    /// nil for a PEM key without a `.pub` file.
    package static func publicKey(path: String) -> [UInt8]? {
        if let data = FileManager.default.contents(atPath: path + ".pub") {
            let fields = String(decoding: data, as: UTF8.self).split(whereSeparator: \.isWhitespace)
            if fields.count >= 2, let blob = Data(base64Encoded: String(fields[1])), !blob.isEmpty,
               SSHPublicKeyBlob.algorithm([UInt8](blob)) == fields[0] {
                return [UInt8](blob)
            }
        }
        guard let data = FileManager.default.contents(atPath: path), let bytes = openSSHBlob(contents: data) else { return nil }
        // "openssh-key-v1\0", cipher, KDF name, KDF options, the number of keys, the first public key.
        var offset = 15
        func string() -> ArraySlice<UInt8>? {
            guard offset + 4 <= bytes.count else { return nil }
            let length = Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
            guard length >= 0, offset + 4 + length <= bytes.count else { return nil }
            defer { offset += 4 + length }
            return bytes[(offset + 4)..<(offset + 4 + length)]
        }
        guard string() != nil, string() != nil, string() != nil, offset + 4 <= bytes.count else { return nil }
        offset += 4
        guard let key = string(), !key.isEmpty else { return nil }
        return Array(key)
    }

    /// The decoded body of an OpenSSH private key file, or nil if it is not one.
    private static func openSSHBlob(contents: Data) -> [UInt8]? {
        let text = String(decoding: contents, as: UTF8.self)
        let begin = "-----BEGIN OPENSSH PRIVATE KEY-----", end = "-----END OPENSSH PRIVATE KEY-----"
        guard let start = text.firstRange(of: begin), let stop = text.firstRange(of: end), start.upperBound <= stop.lowerBound,
              let blob = Data(base64Encoded: String(text[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace })),
              blob.starts(with: Array("openssh-key-v1\0".utf8)) else { return nil }
        return [UInt8](blob)
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
