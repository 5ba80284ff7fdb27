internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Byte ranges gathered for one `sendmsg()` (issue 27 point 1): the payloads of the edge's frames
/// that one pass over the decrypted bytes found, so a pass that finds many frames reaches the
/// local socket with one system call instead of one per frame.
///
/// One per loop (its bridges run one at a time on its thread); the ranges point into the loop's
/// receive buffer, so a bridge sends or queues them before its pass over that buffer returns.
final class SendBatch {
    /// Ranges one batch holds at most; a full batch is sent before more are added.
    static let capacity = 64

    private let vectors: UnsafeMutablePointer<iovec>
    /// The first range not yet sent (the ranges before it went out).
    private var first = 0
    private(set) var count = 0

    init() {
        vectors = .allocate(capacity: Self.capacity)
    }

    deinit { vectors.deallocate() }

    var isEmpty: Bool { first == count }
    var isFull: Bool { count == Self.capacity }

    /// Adds a range; it must stay valid until the batch is sent or drained.
    func append(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return }
        precondition(!isFull, "a full SendBatch must be sent before more is added")
        vectors[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: base), iov_len: bytes.count)
        count += 1
    }

    /// What sending did.
    enum Sent {
        /// Everything went out.
        case all
        /// The socket takes no more now; the rest is still in the batch.
        case full
        /// The socket failed with this error; the rest is still in the batch.
        case failed(SystemError)
    }

    /// Sends the ranges left to the non-blocking `fd`, as far as it takes them: a socket with
    /// `sendmsg()` (no SIGPIPE), anything else (a pipe) with `writev()`, on a thread that blocks
    /// SIGPIPE (the carrier's).
    func send(to fd: Int32, socket: Bool = true) -> Sent {
        while !isEmpty {
            let n: Int
            if socket {
                var message = msghdr()
                message.msg_iov = vectors + first
                message.msg_iovlen = count - first
                n = sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
            } else {
                n = writev(fd, vectors + first, Int32(count - first))
            }
            if n > 0 {
                consume(n)
                continue
            }
            let error = n < 0 ? SystemError.current() : SystemError(EPIPE)
            if error.code == EINTR { continue }
            if error.wouldBlock { return .full }
            return .failed(error)
        }
        return .all
    }

    /// Hands each range left to `body`, in order, and empties the batch.
    func drain(_ body: (UnsafeRawBufferPointer) -> Void) {
        for index in first..<count {
            body(UnsafeRawBufferPointer(start: vectors[index].iov_base, count: vectors[index].iov_len))
        }
        reset()
    }

    func reset() {
        first = 0
        count = 0
    }

    /// Drops the first `sent` bytes: whole ranges, then the front of a partly sent one.
    private func consume(_ sent: Int) {
        var left = sent
        while left > 0, first < count {
            let length = vectors[first].iov_len
            if left >= length {
                left -= length
                first += 1
            } else {
                vectors[first].iov_base += left
                vectors[first].iov_len = length - left
                left = 0
            }
        }
        if first == count { reset() }
    }
}
