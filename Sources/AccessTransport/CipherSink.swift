internal import CCFOpenSSL
internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Where OpenSSL writes a bridge's TLS records once the WebSocket is open (issue 27 point 1): a
/// BIO of our own instead of the socket, so the 16 records of a 256 KiB frame leave in one
/// `send()` instead of sixteen `write()`s (fewer system calls, and the kernel builds large
/// segments instead of one per record).
///
/// Records first go to the loop's scratch buffer (one per loop: the loop's bridges run one at a
/// time on its thread), and the bridge sends them right after the OpenSSL call that made them.
/// What the socket does not take then moves to the bridge's own queue, which is sent when epoll
/// says the socket takes more. Records written while the queue holds bytes join the queue, so the
/// order never changes. The queue is bounded: beyond `queueLimit` the BIO asks OpenSSL to retry,
/// `SSL_write` says WANT_WRITE, and the bridge keeps the plaintext in `toOrigin` as with a full
/// socket.
final class CipherSink: LoopBufferTenant {
    /// Bytes the queue may hold before OpenSSL is asked to retry.
    static let queueLimit = 256 << 10

    private let scratch: LoopBuffer
    private var queue = ByteQueue()

    init(scratch: LoopBuffer) {
        self.scratch = scratch
    }

    /// Ciphertext made and not yet sent.
    var count: Int { queue.count + scratch.count(of: self) }

    var isEmpty: Bool { count == 0 }

    /// Takes one write of OpenSSL's (a record or part of one); false asks it to retry later.
    fileprivate func take(_ bytes: UnsafeRawPointer, _ length: Int) -> Bool {
        if !queue.isEmpty {
            guard queue.count < Self.queueLimit else { return false }
            queue.append(UnsafeRawBufferPointer(start: bytes, count: length))
            return true
        }
        scratch.claim(for: self)
        guard scratch.end + length <= scratch.capacity else {
            // Only reached with records of ours in the buffer (a record is at most ~16 KiB):
            // the caller sends them and OpenSSL retries.
            return false
        }
        (scratch.bytes + scratch.end).copyMemory(from: bytes, byteCount: length)
        scratch.end += length
        return true
    }

    /// Room for `length` bytes of records at the end of the loop's buffer, sealed there by
    /// `TLSRecords` and then `commit`ted; nil while records wait in the queue (they go first) or
    /// the buffer has no such room.
    func reserve(_ length: Int) -> UnsafeMutableRawPointer? {
        guard queue.isEmpty else { return nil }
        scratch.claim(for: self)
        guard scratch.end + length <= scratch.capacity else { return nil }
        return scratch.bytes + scratch.end
    }

    /// `length` bytes sealed into the room `reserve` gave are records to send.
    func commit(_ length: Int) {
        scratch.end += length
    }

    /// Whether `append` takes `length` bytes now.
    func canAppend(_ length: Int) -> Bool {
        if !queue.isEmpty { return queue.count < Self.queueLimit }
        return scratch.owner === self ? scratch.end + length <= scratch.capacity : length <= scratch.capacity
    }

    /// Takes a small record made elsewhere (a KeyUpdate's answer, a close_notify) after every
    /// record before it; false when it cannot now (`canAppend`).
    func append(_ record: UnsafeRawBufferPointer) -> Bool {
        take(record.baseAddress!, record.count)
    }

    /// Moves this sink's records out of the scratch buffer into its own queue.
    func park() {
        queue.append(scratch.held(by: self))
        scratch.release(from: self)
    }

    /// What sending did.
    enum Sent {
        /// Everything went out, or the rest waits for the socket.
        case progress
        /// The socket failed with this errno.
        case failed(Int32)
    }

    /// Sends what waits, as far as the socket `fd` takes it; the rest stays queued.
    func send(to fd: Int32) -> Sent {
        var failure: Int32?
        while !queue.isEmpty, failure == nil {
            let taken = queue.consume(upTo: 1 << 20) { chunk in
                let (sent, failed) = Self.sendAvailable(chunk, to: fd)
                failure = failed
                return sent
            }
            if taken == 0 { break }
        }
        if let failure { return .failed(failure) }
        guard scratch.owner === self else { return .progress }
        if queue.isEmpty {
            let (sent, failed) = Self.sendAvailable(scratch.held(by: self), to: fd)
            scratch.start += sent
            failure = failed
        }
        park()
        if let failure { return .failed(failure) }
        return .progress
    }

    /// Sends as much of `bytes` as the non-blocking socket `fd` takes now (again after EINTR):
    /// how many it took, and the errno that stopped it unless that was "full" (EAGAIN).
    private static func sendAvailable(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> (sent: Int, failure: Int32?) {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc.send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if n > 0 {
                offset += n
                continue
            }
            if n == 0 { break }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { break }
            return (offset, errno)
        }
        return (offset, nil)
    }

    /// Drops everything (the edge is torn down).
    func reset() {
        scratch.release(from: self)
        queue.reset()
    }

    /// A BIO that writes into this sink, to be given to `SSL_set0_wbio`; nil if OpenSSL refused.
    func makeBIO() -> OpaquePointer? { CarrierBIO.make(Self.method, serving: self) }

    /// Our BIO method (made once). Never changed after it is made, and OpenSSL only reads it, so
    /// every thread may use it.
    nonisolated(unsafe) private static let method: OpaquePointer? = CarrierBIO.method(named: "cfat records") { method in
        _ = BIO_meth_set_write_ex(method, writeRecords)
        _ = BIO_meth_set_ctrl(method, control)
    }

    private static let writeRecords: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int,
                                                      UnsafeMutablePointer<Int>?) -> Int32 = { bio, data, length, written in
        written?.pointee = 0
        guard let data, let sink = CarrierBIO.object(of: bio, as: CipherSink.self) else { return 0 }
        guard sink.take(UnsafeRawPointer(data), length) else {
            BIO_set_flags(bio, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY)
            return 0
        }
        written?.pointee = length
        return 1
    }

    private static let control: @convention(c) (OpaquePointer?, Int32, Int, UnsafeMutableRawPointer?) -> Int = { bio, command, _, _ in
        switch command {
        case BIO_CTRL_FLUSH:
            return 1
        case BIO_CTRL_WPENDING:
            return CarrierBIO.object(of: bio, as: CipherSink.self)?.count ?? 0
        default:
            return 0
        }
    }
}
