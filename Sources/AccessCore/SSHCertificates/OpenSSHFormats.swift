import FoundationEssentials

/// Why an OpenSSH public key or certificate line could not be read. Never shows the line.
package struct OpenSSHFormatError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What is wrong, e.g. "the base64 part does not decode".
    package let reason: String
    /// The reason.
    package var description: String { reason }
    init(_ reason: String) { self.reason = reason }
}

/// Reads the SSH wire encoding (RFC 4251 §5): `uint32`, `uint64`, `string`.
package struct SSHWireReader {
    private let bytes: [UInt8]
    private var offset = 0

    /// A reader at the start of `bytes`.
    package init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether every byte was read.
    package var isAtEnd: Bool { offset == bytes.count }

    /// How many bytes were read.
    package var position: Int { offset }

    /// A big-endian `uint32`.
    package mutating func uint32() throws(OpenSSHFormatError) -> UInt32 {
        guard bytes.count - offset >= 4 else { throw OpenSSHFormatError("it ends inside a number") }
        var value: UInt32 = 0
        for byte in bytes[offset..<(offset + 4)] { value = value << 8 | UInt32(byte) }
        offset += 4
        return value
    }

    /// A big-endian `uint64`.
    package mutating func uint64() throws(OpenSSHFormatError) -> UInt64 {
        let high = try uint32()
        let low = try uint32()
        return UInt64(high) << 32 | UInt64(low)
    }

    /// A `string`: its bytes.
    package mutating func string() throws(OpenSSHFormatError) -> [UInt8] {
        let length = Int(try uint32())
        guard bytes.count - offset >= length else { throw OpenSSHFormatError("a field is longer than the data") }
        defer { offset += length }
        return Array(bytes[offset..<(offset + length)])
    }

    /// A `string` that must be UTF-8.
    package mutating func text() throws(OpenSSHFormatError) -> String {
        let raw = try string()
        guard let text = String(validating: raw, as: UTF8.self) else { throw OpenSSHFormatError("a name is not UTF-8") }
        return text
    }
}

/// Writes the SSH wire encoding.
package struct SSHWireWriter {
    /// What was written.
    package private(set) var bytes: [UInt8] = []

    /// An empty writer.
    package init() {}

    /// A big-endian `uint32`.
    package mutating func uint32(_ value: UInt32) {
        bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// One byte.
    package mutating func byte(_ value: UInt8) { bytes.append(value) }

    /// Bytes as they are.
    package mutating func raw(_ value: [UInt8]) { bytes += value }

    /// A `string` of `value`'s bytes.
    package mutating func string(_ value: [UInt8]) {
        uint32(UInt32(value.count))
        bytes += value
    }

    /// A `string` of `value`'s UTF-8.
    package mutating func string(_ value: String) { string(Array(value.utf8)) }
}

/// An OpenSSH public key as in `authorized_keys` and `*.pub` files: `type base64(blob) [comment]`.
package struct OpenSSHPublicKey: Sendable, Equatable {
    /// The key type, e.g. `ecdsa-sha2-nistp256`.
    package let type: String
    /// The wire-encoded key (what the base64 part holds).
    package let blob: [UInt8]

    /// The key type of an ECDSA P-256 key.
    package static let ecdsaP256Type = "ecdsa-sha2-nistp256"

    /// The public half of an ECDSA P-256 key from its uncompressed point (`04 ‖ X ‖ Y`, 65 bytes,
    /// as OpenSSL gives it): RFC 5656 §3.1.
    package static func ecdsaP256(point: [UInt8]) throws(OpenSSHFormatError) -> OpenSSHPublicKey {
        guard point.count == 65, point.first == 0x04 else {
            throw OpenSSHFormatError("an ECDSA P-256 public key is a 65-byte uncompressed point")
        }
        var writer = SSHWireWriter()
        writer.string(ecdsaP256Type)
        writer.string("nistp256")
        writer.string(point)
        return OpenSSHPublicKey(type: ecdsaP256Type, blob: writer.bytes)
    }

    /// Reads a `type base64 [comment]` line; the type inside the blob must be the one in front.
    package static func parse(_ line: String) throws(OpenSSHFormatError) -> OpenSSHPublicKey {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" })
        guard fields.count >= 2 else { throw OpenSSHFormatError("it is not \"type base64 [comment]\"") }
        guard let blob = Base64.decode(String(fields[1]), alphabet: .standard), !blob.isEmpty else {
            throw OpenSSHFormatError("the base64 part does not decode")
        }
        var reader = SSHWireReader(blob)
        let inner = try reader.text()
        guard inner == String(fields[0]) else {
            throw OpenSSHFormatError("the key inside is a \(inner), not the \(fields[0]) the line names")
        }
        return OpenSSHPublicKey(type: inner, blob: blob)
    }

    /// `type base64 comment` (one line, no newline).
    package func line(comment: String) -> String {
        type + " " + Base64.encode(blob, alphabet: .standard, padded: true) + (comment.isEmpty ? "" : " " + comment)
    }
}

/// The fields of an OpenSSH certificate (PROTOCOL.certkeys) that a client acts on. A user
/// certificate's signature is the server's to check (sshd, against `TrustedUserCAKeys`); a host
/// certificate's is the client's (against known_hosts' `@cert-authority` lines): ``signatureKey``,
/// ``signature`` and ``signedBytes`` are what that check needs.
package struct OpenSSHCertificate: Sendable, Equatable {
    /// `…-cert-v01@openssh.com`.
    package let type: String
    /// The certified key, as a plain public key of the matching type.
    package let publicKey: OpenSSHPublicKey
    /// The serial number.
    package let serial: UInt64
    /// 1 = user certificate, 2 = host certificate.
    package let certificateType: UInt32
    /// The key ID the CA gave it.
    package let keyID: String
    /// The principals (user names) it is valid for; empty = any.
    package let principals: [String]
    /// Valid from (seconds since 1970).
    package let validAfter: UInt64
    /// Valid until, exclusive (seconds since 1970; `UInt64.max` = forever).
    package let validBefore: UInt64
    /// The names of the critical options (none are defined for host certificates).
    package var criticalOptions: [String] = []
    /// The CA's public key (an SSH key blob).
    package var signatureKey: [UInt8] = []
    /// The CA's signature (`string algorithm, string blob`).
    package var signature: [UInt8] = []
    /// What the signature covers: the certificate up to the signature field.
    package var signedBytes: [UInt8] = []

    /// A user certificate.
    package static let userCertificate: UInt32 = 1
    /// A host certificate.
    package static let hostCertificate: UInt32 = 2

    /// The end of validity as a date (nil for "forever").
    package var expiresAt: Date? {
        validBefore == UInt64.max ? nil : Date(timeIntervalSince1970: TimeInterval(validBefore))
    }

    /// Reads a `…-cert-v01@openssh.com base64 [comment]` line, as `ssh-keygen -s` writes it and
    /// Cloudflare's `cert_sign` returns it.
    package static func parse(_ line: String) throws(OpenSSHFormatError) -> OpenSSHCertificate {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" })
        guard fields.count >= 2 else { throw OpenSSHFormatError("it is not \"type base64 [comment]\"") }
        let type = String(fields[0])
        let suffix = "-cert-v01@openssh.com"
        guard type.hasSuffix(suffix) else { throw OpenSSHFormatError("\(Display.quoted(type, limit: 60)) is not an OpenSSH certificate type") }
        guard let blob = Base64.decode(String(fields[1]), alphabet: .standard) else {
            throw OpenSSHFormatError("the base64 part does not decode")
        }
        var inside = SSHWireReader(blob)
        guard try inside.text() == type else { throw OpenSSHFormatError("the certificate inside is of another type") }
        return try parse(blob: blob)
    }

    /// Reads a certificate blob (SSH wire format), as a server presents it as its host key.
    package static func parse(blob: [UInt8]) throws(OpenSSHFormatError) -> OpenSSHCertificate {
        var reader = SSHWireReader(blob)
        let type = try reader.text()
        let suffix = "-cert-v01@openssh.com"
        guard type.hasSuffix(suffix) else { throw OpenSSHFormatError("\(Display.quoted(type, limit: 60)) is not an OpenSSH certificate type") }
        _ = try reader.string()   // nonce
        let keyType = String(type.dropLast(suffix.count))
        var key = SSHWireWriter()
        key.string(keyType)
        switch keyType {
        case "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521":
            key.string(try reader.string())   // curve
            key.string(try reader.string())   // point
        case "ssh-ed25519":
            key.string(try reader.string())
        case "ssh-rsa":
            let e = try reader.string()
            let n = try reader.string()
            key.string(e)
            key.string(n)
        default:
            throw OpenSSHFormatError("certificates for \(Display.quoted(keyType, limit: 60)) keys are not understood")
        }
        let serial = try reader.uint64()
        let certificateType = try reader.uint32()
        let keyID = String(decoding: try reader.string(), as: UTF8.self)
        var principalsReader = SSHWireReader(try reader.string())
        var principals: [String] = []
        while !principalsReader.isAtEnd { principals.append(try principalsReader.text()) }
        let validAfter = try reader.uint64()
        let validBefore = try reader.uint64()
        var optionsReader = SSHWireReader(try reader.string())
        var criticalOptions: [String] = []
        while !optionsReader.isAtEnd {
            criticalOptions.append(try optionsReader.text())
            _ = try optionsReader.string()   // its data
        }
        _ = try reader.string()   // extensions
        _ = try reader.string()   // reserved
        let signatureKey = try reader.string()
        let signedBytes = Array(blob[..<reader.position])
        let signature = try reader.string()
        guard reader.isAtEnd else { throw OpenSSHFormatError("it has bytes after the signature") }
        var certificate = OpenSSHCertificate(type: type, publicKey: OpenSSHPublicKey(type: keyType, blob: key.bytes),
                                             serial: serial, certificateType: certificateType, keyID: keyID,
                                             principals: principals, validAfter: validAfter, validBefore: validBefore)
        certificate.criticalOptions = criticalOptions
        certificate.signatureKey = signatureKey
        certificate.signature = signature
        certificate.signedBytes = signedBytes
        return certificate
    }
}
