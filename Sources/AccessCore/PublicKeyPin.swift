/// A pinned public key of the edge: the SHA-256 of a certificate's SubjectPublicKeyInfo (DER), in
/// curl's `--pinnedpubkey` form `sha256//BASE64` (the form `openssl x509 -pubkey | openssl pkey
/// -pubin -outform der | openssl dgst -sha256 -binary | base64` prints).
///
/// A tunnel with pins opens only when the edge's leaf certificate, or another certificate of the
/// chain it presents, carries one of the pinned keys.
public struct PublicKeyPin: Sendable, Hashable, CustomStringConvertible {
    /// The 32 bytes of the SHA-256 of the SubjectPublicKeyInfo.
    public let sha256: [UInt8]

    /// The pin of a key whose SubjectPublicKeyInfo hashes to `sha256` (32 bytes), or nil.
    public init?(sha256: [UInt8]) {
        guard sha256.count == 32 else { return nil }
        self.sha256 = sha256
    }

    /// `sha256//BASE64`.
    public var description: String { "sha256//" + Base64.encode(sha256, alphabet: .standard, padded: true) }

    /// Parses `sha256//BASE64`, several separated by `,` or `;` (curl's separator), white space
    /// around each ignored. An empty list is refused: no pin at all is said by giving none.
    public static func parseList(_ raw: String) throws(ConfigurationError) -> [PublicKeyPin] {
        let setting = ConfigurationError.Setting.pins.placeholder
        let example = "give sha256//BASE64 (the SHA-256 of the key's SubjectPublicKeyInfo, in base64), several separated by commas"
        let items = raw.split(separator: ",", omittingEmptySubsequences: false)
            .flatMap { $0.split(separator: ";", omittingEmptySubsequences: false) }
            .map { String($0).trimmingWhitespace }
        guard !items.isEmpty, !items.contains(where: \.isEmpty) else {
            throw ConfigurationError("\(setting) has an empty entry: \(example)")
        }
        var pins: [PublicKeyPin] = []
        for item in items {
            let shown = Display.quoted(item)
            guard item.hasPrefix("sha256//") else {
                throw ConfigurationError("\(setting) \(shown) is not a sha256// pin: \(example)")
            }
            guard let digest = Base64.decode(String(item.dropFirst(8)), alphabet: .standard),
                  let pin = PublicKeyPin(sha256: digest) else {
                throw ConfigurationError("\(setting) \(shown) is not 32 bytes in base64 after sha256//: \(example)")
            }
            pins.append(pin)
        }
        return pins
    }
}
