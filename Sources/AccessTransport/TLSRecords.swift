internal import CCFOpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// TLS 1.3's record protection for a bridge once its WebSocket is open (issue 27 point 1;
/// reference/DECISIONS.md, "TLS 1.3 records after the upgrade are ours").
///
/// OpenSSL makes the handshake and reads and writes every record up to the 101. From then on the
/// bridge seals and opens the records itself with BoringSSL's AEAD (`RecordAEAD`), with the traffic secrets
/// OpenSSL reported through the context's key-log callback and the record counts its message
/// callback saw. An edge's record is opened in place in the loop's receive buffer and its payload
/// goes to the local socket from there; a frame from the local side is sealed straight into the
/// loop's send buffer. OpenSSL's record layer copies every byte twice more (into and out of its
/// own buffers).
///
/// What RFC 8446 asks of a record layer after the handshake is here: one nonce per record (the
/// IV xored with the record's number), the record header as associated data, the inner content
/// type and its zero padding, the size limits (`record_overflow`), a KeyUpdate in either
/// direction (`traffic upd`), answered once before the next record of ours when the edge asks for
/// it, alerts (close_notify ends the stream, any other ends it with the alert's name), and
/// NewSessionTicket, which is skipped (the tickets that count came before the 101, where OpenSSL
/// still read them).
final class TLSRecords {
    /// The three TLS 1.3 cipher suites (RFC 8446 §B.4), by their code point.
    enum Suite: UInt16 {
        case aes128GCM = 0x1301
        case aes256GCM = 0x1302
        case chacha20Poly1305 = 0x1303

        /// The suite's AEAD (BoringSSL's, `RecordAEAD`: its AES-GCM uses VAES and AVX2 where the
        /// CPU has them, which OpenSSL 3.0's does not).
        var algorithm: RecordAEAD.Algorithm {
            switch self {
            case .aes128GCM: .aes128GCM
            case .aes256GCM: .aes256GCM
            case .chacha20Poly1305: .chacha20Poly1305
            }
        }

        var keyLength: Int { algorithm.keyLength }

        /// Its name in RFC 8446 (and OpenSSL's).
        var name: String {
            switch self {
            case .aes128GCM: "TLS_AES_128_GCM_SHA256"
            case .aes256GCM: "TLS_AES_256_GCM_SHA384"
            case .chacha20Poly1305: "TLS_CHACHA20_POLY1305_SHA256"
            }
        }

        var digest: OpaquePointer? { self == .aes256GCM ? Fetched.sha384 : Fetched.sha256 }
    }

    /// OpenSSL's algorithms, fetched once and never freed (like the BIO methods); OpenSSL only
    /// reads them, so every thread may use them.
    private enum Fetched {
        nonisolated(unsafe) static let sha256 = EVP_MD_fetch(nil, "SHA256", nil)
        nonisolated(unsafe) static let sha384 = EVP_MD_fetch(nil, "SHA384", nil)
    }

    /// The largest content of a record (RFC 8446 §5.1), and the largest ciphertext (§5.2).
    static let maxContent = 1 << 14
    static let maxCiphertext = (1 << 14) + 256
    static let headerLength = 5
    static let tagLength = 16
    /// The room one sealed record of `count` content bytes takes.
    static func sealedLength(_ count: Int) -> Int { headerLength + count + 1 + tagLength }

    static let typeAlert: UInt8 = 21
    static let typeHandshake: UInt8 = 22
    static let typeApplicationData: UInt8 = 23
    private static let keyUpdate: UInt8 = 24
    private static let newSessionTicket: UInt8 = 4

    /// One direction: its AEAD context, secret, IV and the next record's number.
    private final class Direction {
        private var key: RecordAEAD?
        let suite: Suite
        private var secret: [UInt8]
        private var iv = [UInt8](repeating: 0, count: 12)
        /// The current record's nonce (kept, so no record allocates one).
        private var nonce = [UInt8](repeating: 0, count: 12)
        var sequence: UInt64

        init?(suite: Suite, secret: [UInt8], sequence: UInt64) {
            self.suite = suite
            self.secret = secret
            self.sequence = sequence
            guard rekey() else { return nil }
        }

        deinit {
            secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
            iv.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        }

        /// Key and IV from the current secret (RFC 8446 §7.3); the next record is number 0
        /// after a KeyUpdate, or `sequence` as given at the start.
        private func rekey() -> Bool {
            guard var key = TLSRecords.expandLabel(secret, "key", length: suite.keyLength, suite: suite),
                  let newIV = TLSRecords.expandLabel(secret, "iv", length: 12, suite: suite) else { return false }
            defer { key.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) } }
            iv = newIV
            self.key = key.withUnsafeBytes { RecordAEAD(suite.algorithm, key: $0) }
            return self.key != nil
        }

        /// The next secret (RFC 8446 §7.2), its key and IV, and record number 0.
        func update() -> Bool {
            guard let next = TLSRecords.expandLabel(secret, "traffic upd", length: secret.count, suite: suite) else { return false }
            secret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
            secret = next
            sequence = 0
            return rekey()
        }

        /// The next record's nonce: the IV xored with its number.
        private func nextNonce() -> Bool {
            guard sequence < UInt64.max else { return false }
            for i in 0..<12 { nonce[i] = iv[i] }
            for i in 0..<8 { nonce[11 - i] ^= UInt8(truncatingIfNeeded: sequence >> (8 * UInt64(i))) }
            return true
        }

        /// Seals the record whose header is at `header`: `count` bytes from `input` to `output`
        /// (the same place is allowed), then the inner content type and the tag after them.
        func seal(header: UnsafeRawPointer, _ output: UnsafeMutableRawPointer, _ input: UnsafeRawPointer, _ count: Int,
                  type: UInt8) -> Bool {
            guard let key, nextNonce() else { return false }
            guard key.seal(nonce: nonce, input: input, count: count, extra: type, ad: header,
                           adLength: TLSRecords.headerLength, output: output) else { return false }
            sequence += 1
            return true
        }

        /// Opens in place the record whose header is at `header` and whose `count` sealed bytes
        /// and tag follow at `body`: true when the tag proves it came whole from the edge.
        func open(header: UnsafeRawPointer, body: UnsafeMutableRawPointer, sealedCount count: Int) -> Bool {
            guard let key, nextNonce() else { return false }
            guard key.open(nonce: nonce, bytes: body, count: count + TLSRecords.tagLength, ad: header,
                           adLength: TLSRecords.headerLength) else { return false }
            sequence += 1
            return true
        }
    }

    private let reading: Direction
    private let writing: Direction
    let suite: Suite
    /// The edge asked for a KeyUpdate of ours: it goes before our next record.
    private(set) var keyUpdateOwed = false
    /// Handshake bytes of a message not complete yet (a message may span records).
    private var handshakeBytes: [UInt8] = []

    /// The record layer for a connection whose handshake used `suite`, with the client's and the
    /// server's application traffic secrets, and the number of records each side already sent
    /// with them. Nil if a key could not be derived or the AEAD refused it.
    init?(suite: Suite, clientSecret: [UInt8], serverSecret: [UInt8], recordsWritten: UInt64, recordsRead: UInt64) {
        guard let writing = Direction(suite: suite, secret: clientSecret, sequence: recordsWritten),
              let reading = Direction(suite: suite, secret: serverSecret, sequence: recordsRead) else { return nil }
        self.suite = suite
        self.writing = writing
        self.reading = reading
    }

    // MARK: Sealing

    /// What sealing did.
    enum Sealed: Equatable {
        /// This many of the bytes offered are sealed into the sink (0: it has no room now).
        case bytes(Int)
        case failed(String)
    }

    /// Seals up to `count` bytes at `plaintext` of `type` as records into `sink`, as far as its
    /// buffer has room; the KeyUpdate owed goes first.
    func seal(_ plaintext: UnsafeRawPointer, _ count: Int, type: UInt8 = typeApplicationData, into sink: CipherSink) -> Sealed {
        if keyUpdateOwed {
            switch sendKeyUpdate(into: sink) {
            case .bytes(0): return .bytes(0)
            case .failed(let why): return .failed(why)
            case .bytes: break
            }
        }
        var done = 0
        while done < count {
            let chunk = min(Self.maxContent, count - done)
            let room = Self.sealedLength(chunk)
            guard let out = sink.reserve(room) else { break }
            guard sealRecord(plaintext + done, chunk, type: type, at: out) else {
                return .failed("TLS error: a record could not be sealed")
            }
            sink.commit(room)
            done += chunk
        }
        return .bytes(done)
    }

    /// Seals the KeyUpdate the edge asked for (update_not_requested), then moves our direction to
    /// its next secret; `.bytes(0)` while the sink cannot take it.
    func sendKeyUpdate(into sink: CipherSink) -> Sealed {
        switch sealControl([Self.keyUpdate, 0, 0, 1, 0], type: Self.typeHandshake, into: sink) {
        case .bytes(0): return .bytes(0)
        case .failed(let why): return .failed(why)
        case .bytes(let n):
            keyUpdateOwed = false
            guard writing.update() else { return .failed("TLS error: the next traffic key could not be derived") }
            return .bytes(n)
        }
    }

    /// A close_notify alert into `sink`, behind every record already there; false when it cannot
    /// take it now or sealing failed.
    func sealCloseNotify(into sink: CipherSink) -> Bool {
        sealControl([1, 0], type: Self.typeAlert, into: sink) == .bytes(2)
    }

    /// One record of a few bytes, sealed apart and queued behind the sink's records.
    private func sealControl(_ content: [UInt8], type: UInt8, into sink: CipherSink) -> Sealed {
        let room = Self.sealedLength(content.count)
        guard sink.canAppend(room) else { return .bytes(0) }
        var record = [UInt8](repeating: 0, count: room)
        let sealed = record.withUnsafeMutableBytes { out in
            content.withUnsafeBytes { sealRecord($0.baseAddress!, content.count, type: type, at: out.baseAddress!) }
        }
        guard sealed else { return .failed("TLS error: a record could not be sealed") }
        guard record.withUnsafeBytes({ sink.append($0) }) else { return .failed("TLS error: a record was lost") }
        return .bytes(content.count)
    }

    private func sealRecord(_ plaintext: UnsafeRawPointer, _ count: Int, type: UInt8, at out: UnsafeMutableRawPointer) -> Bool {
        let length = count + 1 + Self.tagLength
        out.storeBytes(of: Self.typeApplicationData, toByteOffset: 0, as: UInt8.self)
        out.storeBytes(of: 3, toByteOffset: 1, as: UInt8.self)
        out.storeBytes(of: 3, toByteOffset: 2, as: UInt8.self)
        out.storeBytes(of: UInt8(length >> 8), toByteOffset: 3, as: UInt8.self)
        out.storeBytes(of: UInt8(length & 0xff), toByteOffset: 4, as: UInt8.self)
        return writing.seal(header: out, out + Self.headerLength, plaintext, count, type: type)
    }

    // MARK: Opening

    /// What one record of the edge's was.
    enum Opened: Equatable {
        /// Application data: `count` bytes at the record's start plus `offset`, in place.
        case data(offset: Int, count: Int)
        /// Nothing for the local side (a KeyUpdate, a session ticket, an empty record, a warning).
        case nothing
        /// close_notify: the edge's TLS stream ended cleanly.
        case closed
        /// The stream is broken: why, in words.
        case failed(String)
    }

    /// The length the header at `header` announces (what follows the 5 bytes), or a failure
    /// when it cannot be a TLS 1.3 record's.
    static func recordLength(header: UnsafeRawPointer) -> Result<Int, RecordFailure> {
        let type = header.load(as: UInt8.self)
        guard type == typeApplicationData else {
            return .failure(RecordFailure(type == typeAlert || type == typeHandshake || type == 20
                ? "a TLS record sent without protection after the handshake (type \(type))"
                : "not a TLS record (type \(type))"))
        }
        let length = Int(header.load(fromByteOffset: 3, as: UInt8.self)) << 8 | Int(header.load(fromByteOffset: 4, as: UInt8.self))
        guard length <= maxCiphertext else { return .failure(RecordFailure("record overflow (\(length) bytes)")) }
        guard length >= 1 + tagLength else { return .failure(RecordFailure("a record too short to be protected (\(length) bytes)")) }
        return .success(length)
    }

    struct RecordFailure: Error {
        let detail: String
        init(_ detail: String) { self.detail = detail }
    }

    /// Opens, in place, the whole record at `record` (header included; `length` bytes in all,
    /// as `recordLength` announced) and handles what it carries.
    func open(_ record: UnsafeMutableRawPointer, length: Int) -> Opened {
        let body = record + Self.headerLength
        let sealedCount = length - Self.headerLength - Self.tagLength
        guard reading.open(header: record, body: body, sealedCount: sealedCount) else {
            return .failed("TLS error: decryption failed or bad record mac")
        }
        // The content type is the last byte that is not zero padding (RFC 8446 §5.4).
        var end = sealedCount
        while end > 0, body.load(fromByteOffset: end - 1, as: UInt8.self) == 0 { end -= 1 }
        // Content, type and padding at most 2^14 + 1 bytes (RFC 8446 §5.4).
        guard sealedCount <= Self.maxContent + 1 else { return .failed("TLS error: record overflow") }
        guard end > 0 else { return .failed("TLS error: a record with no content type") }
        let type = body.load(fromByteOffset: end - 1, as: UInt8.self)
        let count = end - 1
        switch type {
        case Self.typeApplicationData:
            guard handshakeBytes.isEmpty else { return .failed("TLS error: data inside a handshake message") }
            return count == 0 ? .nothing : .data(offset: Self.headerLength, count: count)
        case Self.typeHandshake:
            guard count > 0 else { return .failed("TLS error: an empty handshake record") }
            return handshake(UnsafeRawBufferPointer(start: body, count: count))
        case Self.typeAlert:
            guard count == 2, handshakeBytes.isEmpty else { return .failed("TLS error: a malformed alert") }
            return alert(level: body.load(as: UInt8.self), description: body.load(fromByteOffset: 1, as: UInt8.self))
        default:
            return .failed("TLS error: unexpected message (a record of content type \(type))")
        }
    }

    private func alert(level: UInt8, description: UInt8) -> Opened {
        if description == 0 { return .closed }
        // user_canceled comes before a close_notify (RFC 8446 §6.1): nothing to do yet.
        if description == 90 { return .nothing }
        // OpenSSL's own words for a received alert: its reason code is 1000 + the alert's.
        let code = UInt(20) << 23 | UInt(1000 + Int(description))
        if let text = ERR_reason_error_string(code) { return .failed("TLS error: \(String(cString: text))") }
        return .failed("TLS error: the edge sent alert \(description)")
    }

    /// Handshake messages after the handshake: KeyUpdate and NewSessionTicket (RFC 8446 §4.6).
    private func handshake(_ bytes: UnsafeRawBufferPointer) -> Opened {
        handshakeBytes.append(contentsOf: bytes)
        while handshakeBytes.count >= 4 {
            let type = handshakeBytes[0]
            let length = Int(handshakeBytes[1]) << 16 | Int(handshakeBytes[2]) << 8 | Int(handshakeBytes[3])
            guard length <= 1 << 16 else { return .failed("TLS error: a handshake message of \(length) bytes") }
            guard handshakeBytes.count >= 4 + length else { break }
            switch type {
            case Self.newSessionTicket:
                break
            case Self.keyUpdate:
                guard length == 1, handshakeBytes[4] <= 1 else { return .failed("TLS error: a malformed KeyUpdate") }
                // A KeyUpdate must end its record (messages do not span a key change).
                guard handshakeBytes.count == 5 else { return .failed("TLS error: unexpected message after a KeyUpdate") }
                guard reading.update() else { return .failed("TLS error: the next traffic key could not be derived") }
                if handshakeBytes[4] == 1 { keyUpdateOwed = true }
            default:
                return .failed("TLS error: unexpected message (handshake message \(type) after the handshake)")
            }
            handshakeBytes.removeFirst(4 + length)
        }
        if handshakeBytes.isEmpty { handshakeBytes = [] }
        return .nothing
    }

    // MARK: Keys

    /// HKDF-Expand-Label(secret, label, "", length) of RFC 8446 §7.1, for a length no longer
    /// than the hash (one HMAC block, as every use here is): HMAC(secret, HkdfLabel ‖ 0x01).
    static func expandLabel(_ secret: [UInt8], _ label: String, length: Int, suite: Suite) -> [UInt8]? {
        let full = Array("tls13 \(label)".utf8)
        let info: [UInt8] = [UInt8(length >> 8), UInt8(length & 0xff), UInt8(full.count)] + full + [0, 1]
        guard let digest = suite.digest, let mac = hmac(digest, key: secret, info), length <= mac.count else { return nil }
        return Array(mac[0..<length])
    }

    /// HMAC (RFC 2104) with a fetched digest: H((K ⊕ opad) ‖ H((K ⊕ ipad) ‖ message)), for a key
    /// no longer than the digest's block (a traffic secret is the digest's size).
    static func hmac(_ digest: OpaquePointer, key: [UInt8], _ message: [UInt8]) -> [UInt8]? {
        let block = Int(EVP_MD_get_block_size(digest))
        let size = Int(EVP_MD_get_size(digest))
        guard key.count <= block, size > 0 else { return nil }
        var inner = [UInt8](repeating: 0x36, count: block)
        var outer = [UInt8](repeating: 0x5c, count: block)
        for (i, byte) in key.enumerated() {
            inner[i] ^= byte
            outer[i] ^= byte
        }
        inner += message
        var innerHash = [UInt8](repeating: 0, count: size)
        var result = [UInt8](repeating: 0, count: size)
        var written: UInt32 = 0
        guard EVP_Digest(inner, inner.count, &innerHash, &written, digest, nil) == 1, Int(written) == size else { return nil }
        outer += innerHash
        guard EVP_Digest(outer, outer.count, &result, &written, digest, nil) == 1, Int(written) == size else { return nil }
        inner.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        outer.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        innerHash.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        return result
    }
}

/// What a connection's `TLSRecords` start from, gathered while OpenSSL still reads and writes
/// its records: the application traffic secrets (from the context's key-log callback), how many
/// records each side sent with them (from the connection's message callback), and whether a
/// KeyUpdate already moved a side past them, in which case OpenSSL keeps the records.
final class TLSHandover {
    private(set) var clientSecret: [UInt8] = []
    private(set) var serverSecret: [UInt8] = []
    /// Records read and written since the handshake finished.
    var recordsRead: UInt64 = 0
    var recordsWritten: UInt64 = 0
    /// Counting has started (the handshake finished).
    var counting = false
    var keyUpdateSeen = false

    deinit { forget() }

    /// The secrets are cleared.
    func forget() {
        clientSecret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        serverSecret.withUnsafeMutableBytes { OPENSSL_cleanse($0.baseAddress, $0.count) }
        clientSecret = []
        serverSecret = []
    }

    /// Counting starts: every record from now on uses the application traffic secrets.
    func handshakeFinished() {
        recordsRead = 0
        recordsWritten = 0
        counting = true
    }

    /// One line of OpenSSL's key log (NSS's format: `LABEL client_random secret`, in hex), read
    /// byte by byte: it comes on every handshake.
    func take(line: UnsafePointer<CChar>) {
        let length = strlen(line)
        let bytes = UnsafeRawBufferPointer(start: line, count: length)
        guard let firstSpace = bytes.firstIndex(of: 0x20) else { return }
        let label = bytes[..<firstSpace]
        let isClient = label.elementsEqual("CLIENT_TRAFFIC_SECRET_0".utf8)
        guard isClient || label.elementsEqual("SERVER_TRAFFIC_SECRET_0".utf8),
              let lastSpace = bytes.lastIndex(of: 0x20), lastSpace > firstSpace,
              let secret = Self.bytes(hex: bytes[(lastSpace + 1)...]) else { return }
        if isClient { clientSecret = secret } else { serverSecret = secret }
    }

    private static func bytes(hex digits: Slice<UnsafeRawBufferPointer>) -> [UInt8]? {
        guard digits.count % 2 == 0, digits.count <= 2 * Int(EVP_MAX_MD_SIZE) else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var index = digits.startIndex
        while index < digits.endIndex {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        return out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The record layer that takes over from OpenSSL on `ssl` once its WebSocket is open; nil
    /// when OpenSSL keeps it: not TLS 1.3, a suite we do not know, a secret missing, a KeyUpdate
    /// already seen, or bytes OpenSSL still holds.
    func records(for ssl: OpaquePointer) -> TLSRecords? {
        guard counting, !keyUpdateSeen, SSL_version(ssl) == TLS1_3_VERSION, SSL_has_pending(ssl) != 1,
              let cipher = SSL_get_current_cipher(ssl),
              let suite = TLSRecords.Suite(rawValue: SSL_CIPHER_get_protocol_id(cipher)),
              !clientSecret.isEmpty, clientSecret.count == serverSecret.count else { return nil }
        return TLSRecords(suite: suite, clientSecret: clientSecret, serverSecret: serverSecret,
                          recordsWritten: recordsWritten, recordsRead: recordsRead)
    }
}
