@testable import AccessTransport
import CCFOpenSSL
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Our TLS 1.3 record layer (`TLSRecords`, issue 27 point 1) against OpenSSL's own, a peer we did
/// not write: a TLS 1.3 session made in memory between an OpenSSL client and an OpenSSL server,
/// then the client's side of the records taken over by ours with the secrets OpenSSL logged, as
/// the bridge does after the upgrade. What OpenSSL's server seals we must open (with its padding,
/// its KeyUpdates and its close_notify), and what we seal it must open, for each of the three
/// cipher suites.
@Suite("TLS records against OpenSSL's record layer")
struct TLSRecordsTests {
    /// An in-memory TLS 1.3 client and server; the client's key log goes to `handover`.
    final class Session {
        let handover = TLSHandover()
        let client: OpaquePointer
        let server: OpaquePointer
        private let clientContext: OpaquePointer
        private let serverContext: OpaquePointer

        init(suite: String) throws {
            serverContext = try #require(SSL_CTX_new(TLS_server_method()))
            clientContext = try #require(SSL_CTX_new(TLS_client_method()))
            for context in [serverContext, clientContext] {
                _ = SSL_CTX_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, Int(TLS1_3_VERSION), nil)
                try #require(SSL_CTX_set_ciphersuites(context, suite) == 1)
            }
            try #require(SSL_CTX_set_num_tickets(serverContext, 0) == 1)
            let (certificate, key) = try Self.selfSigned()
            defer { X509_free(certificate); EVP_PKEY_free(key) }
            try #require(SSL_CTX_use_certificate(serverContext, certificate) == 1)
            try #require(SSL_CTX_use_PrivateKey(serverContext, key) == 1)
            SSL_CTX_set_keylog_callback(clientContext) { ssl, line in
                guard let ssl, let line, let raw = SSL_get_ex_data(ssl, 0) else { return }
                Unmanaged<TLSHandover>.fromOpaque(raw).takeUnretainedValue().take(line: line)
            }
            server = try #require(SSL_new(serverContext))
            client = try #require(SSL_new(clientContext))
            _ = SSL_set_ex_data(client, 0, Unmanaged.passUnretained(handover).toOpaque())
            for ssl in [server, client] {
                SSL_set_bio(ssl, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()))
            }
            SSL_set_accept_state(server)
            SSL_set_connect_state(client)
            var done = false
            for _ in 0..<10 where !done {
                let c = SSL_do_handshake(client)
                carry(from: client, to: server)
                let s = SSL_do_handshake(server)
                carry(from: server, to: client)
                done = c == 1 && s == 1
            }
            try #require(done, "the in-memory TLS 1.3 handshake did not finish")
            handover.handshakeFinished()
        }

        deinit {
            SSL_free(client)
            SSL_free(server)
            SSL_CTX_free(clientContext)
            SSL_CTX_free(serverContext)
        }

        /// An Ed25519 key and a self-signed certificate for it.
        private static func selfSigned() throws -> (OpaquePointer, OpaquePointer) {
            let keyContext = try #require(EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil))
            defer { EVP_PKEY_CTX_free(keyContext) }
            var key: OpaquePointer?
            try #require(EVP_PKEY_keygen_init(keyContext) == 1 && EVP_PKEY_keygen(keyContext, &key) == 1)
            let certificate = try #require(X509_new())
            _ = X509_set_version(certificate, 2)
            _ = ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1)
            _ = X509_gmtime_adj(X509_getm_notBefore(certificate), 0)
            _ = X509_gmtime_adj(X509_getm_notAfter(certificate), 3600)
            _ = X509_set_pubkey(certificate, key)
            let name = X509_get_subject_name(certificate)
            _ = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, "records.test", -1, -1, 0)
            _ = X509_set_issuer_name(certificate, name)
            try #require(X509_sign(certificate, key, nil) > 0)
            return (certificate, try #require(key))
        }

        /// Moves what `from` wrote into `to`'s read BIO.
        func carry(from: OpaquePointer, to: OpaquePointer) {
            let bytes = written(by: from)
            if !bytes.isEmpty { feed(bytes, to: to) }
        }

        /// The records `ssl` wrote since this was last asked.
        func written(by ssl: OpaquePointer) -> [UInt8] {
            var out: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = chunk.withUnsafeMutableBytes { BIO_read(SSL_get_wbio(ssl), $0.baseAddress, Int32($0.count)) }
                if n <= 0 { return out }
                out += chunk[..<Int(n)]
            }
        }

        func feed(_ bytes: [UInt8], to ssl: OpaquePointer) {
            _ = bytes.withUnsafeBytes { BIO_write(SSL_get_rbio(ssl), $0.baseAddress, Int32($0.count)) }
        }

        /// What the server reads of `records` (OpenSSL's record layer), and its error at the end.
        func serverReads(_ records: [UInt8]) -> (bytes: [UInt8], error: Int32) {
            feed(records, to: server)
            var out: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = chunk.withUnsafeMutableBytes { SSL_read(server, $0.baseAddress, Int32($0.count)) }
                if n <= 0 { return (out, SSL_get_error(server, n)) }
                out += chunk[..<Int(n)]
            }
        }

        /// The server's `payload`, sealed by OpenSSL.
        func serverSeals(_ payload: [UInt8]) -> [UInt8] {
            _ = payload.withUnsafeBytes { SSL_write(server, $0.baseAddress, Int32($0.count)) }
            return written(by: server)
        }

        /// The client's own records from here on, after one record each way through OpenSSL (so
        /// the record numbers do not start at 0).
        func takeOver() throws -> TLSRecords {
            _ = "before".withCString { SSL_write(client, $0, 6) }
            #expect(serverReads(written(by: client)).bytes == Array("before".utf8))
            _ = "welcome".withCString { SSL_write(server, $0, 7) }
            carry(from: server, to: client)
            var first = [UInt8](repeating: 0, count: 16)
            #expect(first.withUnsafeMutableBytes { SSL_read(client, $0.baseAddress, 16) } == 7)
            handover.recordsRead = 1
            handover.recordsWritten = 1
            return try #require(handover.records(for: client))
        }
    }

    static let suites = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]

    /// `bytes` split into whole records, each opened by `records`: the payload, and what else
    /// the records said.
    private func open(_ bytes: [UInt8], with records: TLSRecords) -> (payload: [UInt8], outcomes: [TLSRecords.Opened]) {
        var input = bytes
        var payload: [UInt8] = []
        var outcomes: [TLSRecords.Opened] = []
        var offset = 0
        input.withUnsafeMutableBytes { raw in
            while offset + TLSRecords.headerLength <= raw.count {
                let record = raw.baseAddress! + offset
                guard case .success(let length) = TLSRecords.recordLength(header: record) else {
                    outcomes.append(.failed("bad header"))
                    return
                }
                let opened = records.open(record, length: TLSRecords.headerLength + length)
                if case .data(let start, let count) = opened {
                    payload += UnsafeRawBufferPointer(start: record + start, count: count)
                } else {
                    outcomes.append(opened)
                }
                offset += TLSRecords.headerLength + length
            }
        }
        return (payload, outcomes)
    }

    /// Seals `payload` with `records` through a sink on a socket pair: the records sent.
    private func seal(_ payload: [UInt8], with records: TLSRecords) throws -> [UInt8] {
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let sink = CipherSink(scratch: LoopBuffer(capacity: 256 << 10))
        var out: [UInt8] = []
        var done = 0
        var chunk = [UInt8](repeating: 0, count: 65536)
        while done < payload.count || !sink.isEmpty || records.keyUpdateOwed {
            let sealed = payload.withUnsafeBytes { records.seal($0.baseAddress! + done, payload.count - done, into: sink) }
            guard case .bytes(let n) = sealed else {
                Issue.record("sealing failed: \(sealed)")
                return out
            }
            done += n
            _ = sink.send(to: fds[0])
            while true {
                let got = chunk.withUnsafeMutableBytes { recv(fds[1], $0.baseAddress, $0.count, 0) }
                if got <= 0 { break }
                out += chunk[..<got]
            }
        }
        return out
    }

    private static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 % 251) } }

    /// Expects `got` to be `want`, saying only the counts and the first difference when not.
    private func expectSame(_ got: [UInt8], _ want: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        let first = zip(got, want).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(got.count, want.count)
        #expect(got == want, "\(got.count) of \(want.count) bytes, first difference at \(first)", sourceLocation: sourceLocation)
    }

    @Test("OpenSSL's records open, ours open in OpenSSL, both ways and in order", arguments: suites)
    func bothWays(suite: String) throws {
        let session = try Session(suite: suite)
        let records = try session.takeOver()
        #expect(records.suite.rawValue == SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(session.client)))
        let down = Self.pattern(100_000)
        let opened = open(session.serverSeals(down), with: records)
        expectSame(opened.payload, down)
        #expect(opened.outcomes.isEmpty)
        let up = Self.pattern(300_001)
        let read = session.serverReads(try seal(up, with: records))
        expectSame(read.bytes, up)
        #expect(read.error == SSL_ERROR_WANT_READ)
    }

    @Test("the edge's padded records: the content type is found under OpenSSL's block padding")
    func padding() throws {
        let session = try Session(suite: Self.suites[0])
        let records = try session.takeOver()
        #expect(SSL_set_block_padding(session.server, 512) == 1)
        let down = Self.pattern(3000)
        let sealed = session.serverSeals(down) + session.serverSeals([7])
        let opened = open(sealed, with: records)
        expectSame(opened.payload, down + [7])
        #expect(opened.outcomes.isEmpty)
    }

    @Test("a KeyUpdate of the edge's, asked to be answered: ours goes first, then both sides use the next keys",
          arguments: suites)
    func keyUpdate(suite: String) throws {
        let session = try Session(suite: suite)
        let records = try session.takeOver()
        #expect(SSL_key_update(session.server, SSL_KEY_UPDATE_REQUESTED) == 1)
        let after = Self.pattern(40_000)
        let opened = open(session.serverSeals(after), with: records)
        expectSame(opened.payload, after)
        #expect(opened.outcomes == [.nothing])
        #expect(records.keyUpdateOwed)
        let up = Self.pattern(20_000)
        let read = session.serverReads(try seal(up, with: records))
        #expect(!records.keyUpdateOwed)
        expectSame(read.bytes, up)
        #expect(read.error == SSL_ERROR_WANT_READ)
        // Twice more, not asked the second time: still in step.
        #expect(SSL_key_update(session.server, SSL_KEY_UPDATE_NOT_REQUESTED) == 1)
        let again = open(session.serverSeals([1, 2, 3]), with: records)
        #expect(again.payload == [1, 2, 3])
        #expect(!records.keyUpdateOwed)
        #expect(session.serverReads(try seal([4, 5], with: records)).bytes == [4, 5])
    }

    @Test("the edge's close_notify ends the stream cleanly; ours ends OpenSSL's (SSL_ERROR_ZERO_RETURN)")
    func closeNotify() throws {
        let session = try Session(suite: Self.suites[0])
        let records = try session.takeOver()
        _ = SSL_shutdown(session.server)
        #expect(open(session.written(by: session.server), with: records).outcomes == [.closed])
        let sink = CipherSink(scratch: LoopBuffer(capacity: 64 << 10))
        #expect(records.sealCloseNotify(into: sink))
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        _ = sink.send(to: fds[0])
        var bytes = [UInt8](repeating: 0, count: 256)
        let n = bytes.withUnsafeMutableBytes { recv(fds[1], $0.baseAddress, $0.count, 0) }
        #expect(n == TLSRecords.sealedLength(2))
        #expect(session.serverReads(Array(bytes[..<max(0, n)])).error == SSL_ERROR_ZERO_RETURN)
    }

    @Test("a record changed on the way, or one replayed, fails in OpenSSL's words")
    func tampered() throws {
        let session = try Session(suite: Self.suites[0])
        let records = try session.takeOver()
        var sealed = session.serverSeals(Self.pattern(1000))
        let good = sealed
        sealed[100] ^= 1
        #expect(open(sealed, with: records).outcomes == [.failed("TLS error: decryption failed or bad record mac")])
        let other = try Session(suite: Self.suites[0])
        let fresh = try other.takeOver()
        let once = open(other.serverSeals([9]), with: fresh)
        #expect(once.payload == [9])
        #expect(open(good, with: fresh).outcomes == [.failed("TLS error: decryption failed or bad record mac")])
    }

    @Test("HMAC over a fetched digest: RFC 4231's test case 2 for SHA-256 and SHA-384")
    func hmacVectors() throws {
        func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        let key = Array("Jefe".utf8)
        let message = Array("what do ya want for nothing?".utf8)
        let sha256 = try #require(TLSRecords.Suite.aes128GCM.digest)
        let sha384 = try #require(TLSRecords.Suite.aes256GCM.digest)
        #expect(try hex(#require(TLSRecords.hmac(sha256, key: key, message)))
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(try hex(#require(TLSRecords.hmac(sha384, key: key, message)))
                == "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649")
    }

    @Test("headers that cannot be a TLS 1.3 record's are refused before any decryption")
    func headers() {
        func check(_ header: [UInt8]) -> String? {
            header.withUnsafeBytes {
                if case .failure(let failure) = TLSRecords.recordLength(header: $0.baseAddress!) { return failure.detail }
                return nil
            }
        }
        #expect(check([23, 3, 3, 0, 17]) == nil)
        #expect(check([23, 3, 3, 0x41, 0x00]) == nil)
        #expect(check([23, 3, 3, 0x41, 0x01])?.hasPrefix("record overflow") == true)
        #expect(check([23, 3, 3, 0, 16])?.hasPrefix("a record too short") == true)
        #expect(check([21, 3, 3, 0, 2])?.hasPrefix("a TLS record sent without protection") == true)
        #expect(check([72, 84, 84, 80, 47])?.hasPrefix("not a TLS record") == true)
    }

    @Test("an alert from the edge ends the stream with OpenSSL's name for it; user_canceled alone does not")
    func alerts() throws {
        let session = try Session(suite: Self.suites[0])
        let records = try session.takeOver()
        // The server's side of the same session, sealed by a record layer of ours (OpenSSL has no
        // call that sends an arbitrary alert).
        let peer = try #require(TLSRecords(suite: records.suite, clientSecret: session.handover.serverSecret,
                                           serverSecret: session.handover.clientSecret, recordsWritten: 1, recordsRead: 1))
        let sink = CipherSink(scratch: LoopBuffer(capacity: 64 << 10))
        var fds: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        for alert in [[1, 90], [2, 40]] as [[UInt8]] {
            _ = alert.withUnsafeBytes { peer.seal($0.baseAddress!, 2, type: TLSRecords.typeAlert, into: sink) }
        }
        _ = sink.send(to: fds[0])
        var bytes = [UInt8](repeating: 0, count: 256)
        let n = bytes.withUnsafeMutableBytes { recv(fds[1], $0.baseAddress, $0.count, 0) }
        #expect(open(Array(bytes[..<max(0, n)]), with: records).outcomes
                == [.nothing, .failed("TLS error: sslv3 alert handshake failure")])
    }
}
