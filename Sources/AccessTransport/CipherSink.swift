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
final class CipherSink {
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
        if let other = scratch.owner as? CipherSink, other !== self { other.park() }
        if scratch.owner !== self { scratch.release(from: scratch.owner ?? self) }
        guard scratch.end + length <= scratch.capacity else {
            // Only reached with records of ours in the buffer (a record is at most ~16 KiB):
            // the caller sends them and OpenSSL retries.
            return false
        }
        (scratch.bytes + scratch.end).copyMemory(from: bytes, byteCount: length)
        scratch.end += length
        scratch.owner = self
        return true
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
                let n = Glibc.send(fd, chunk.baseAddress!, chunk.count, Int32(MSG_NOSIGNAL))
                if n < 0, errno != EAGAIN, errno != EWOULDBLOCK, errno != EINTR { failure = errno }
                return max(0, n)
            }
            if taken == 0 { break }
        }
        if let failure { return .failed(failure) }
        guard scratch.owner === self else { return .progress }
        if !queue.isEmpty {
            park()
            return .progress
        }
        while scratch.start < scratch.end {
            let n = Glibc.send(fd, scratch.bytes + scratch.start, scratch.end - scratch.start, Int32(MSG_NOSIGNAL))
            if n > 0 {
                scratch.start += n
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno != EAGAIN, errno != EWOULDBLOCK { failure = errno }
            break
        }
        park()
        if let failure { return .failed(failure) }
        return .progress
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
