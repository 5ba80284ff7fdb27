internal import CCFOpenSSL
internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Where OpenSSL reads a bridge's TLS records from once the WebSocket is open (issue 27 point 1):
/// a BIO of our own that takes up to 256 KiB from the socket with one `recv()` and hands OpenSSL
/// the record headers and bodies it asks for from there.
///
/// OpenSSL without read-ahead makes two `read()`s per 16 KiB record (header, body); with its own
/// read-ahead it moves what is left in its buffer to the buffer's start before each record
/// (measured: a `memmove` inside `SSL_read` took 15–18 % of the download CPU with a 256 KiB
/// buffer). Here each byte is copied once, from our buffer into OpenSSL's record buffer.
///
/// The buffer is the loop's (its bridges run one at a time on its thread). Bytes a bridge leaves
/// there when its reading pauses stay until another bridge needs the buffer; they then move to
/// the bridge's own queue (`park`). Either way the bridge reads them when it resumes, since no
/// socket announces them.
final class RecordSource: LoopBufferTenant {
    private let scratch: LoopBuffer
    private var parked = ByteQueue()
    private let fd: Int32
    /// While false, an empty buffer is not refilled from the socket: OpenSSL hears "retry", and
    /// epoll announces the socket's bytes later (the bridge's read budget is spent).
    var mayReceive = true

    init(scratch: LoopBuffer, fd: Int32) {
        self.scratch = scratch
        self.fd = fd
    }

    /// Bytes read from the socket that OpenSSL has not taken yet.
    var hasBytes: Bool { !parked.isEmpty || scratch.count(of: self) > 0 }

    /// Moves this source's bytes out of the shared buffer into its own queue.
    func park() {
        parked.append(scratch.held(by: self))
        scratch.release(from: self)
    }

    /// Drops what is buffered (the edge is torn down).
    func reset() {
        scratch.release(from: self)
        parked.reset()
    }

    /// What one read for OpenSSL gave.
    private enum Read {
        case bytes(Int)
        /// Nothing now: retry when epoll says so.
        case later
        case endOfStream
        /// The socket failed; errno holds why.
        case failed
    }

    private func read(into destination: UnsafeMutableRawPointer, _ length: Int) -> Read {
        if !parked.isEmpty {
            let n = parked.consume(upTo: length) { chunk in
                destination.copyMemory(from: chunk.baseAddress!, byteCount: chunk.count)
                return chunk.count
            }
            return .bytes(n)
        }
        if scratch.count(of: self) == 0 {
            guard mayReceive else { return .later }
            scratch.claim(for: self)
            var n = 0
            repeat {
                n = Glibc.recv(fd, scratch.bytes, scratch.capacity, 0)
            } while n < 0 && errno == EINTR
            if n <= 0 {
                scratch.release(from: self)
                if n == 0 { return .endOfStream }
                return errno == EAGAIN || errno == EWOULDBLOCK ? .later : .failed
            }
            scratch.start = 0
            scratch.end = n
        }
        let n = min(length, scratch.end - scratch.start)
        destination.copyMemory(from: scratch.bytes + scratch.start, byteCount: n)
        scratch.start += n
        if scratch.start == scratch.end { scratch.release(from: self) }
        return .bytes(n)
    }

    /// What the next record of the stream is, for a bridge whose records are ours (`TLSRecords`).
    enum NextRecord {
        /// A whole record (header included) at this place in the loop's buffer, ours to open in
        /// place; `consume` it once what it carried is sent on.
        case record(UnsafeMutableRawPointer, length: Int)
        /// The bytes here end inside a record: receiving comes next.
        case needMore
        /// Nothing now: epoll says when the socket has more (or reading is paused).
        case later
        /// The edge closed the connection; `midRecord`: inside a record.
        case endOfStream(midRecord: Bool)
        /// The socket failed with this errno.
        case failed(Int32)
        /// Bytes that cannot be a TLS 1.3 record's header.
        case malformed(String)
    }

    /// The next whole record; with `receive`, one `recv()` first when none is here. Receiving
    /// moves the start of an unfinished record to the buffer's start, so it must wait until
    /// nothing points into the buffer any more (the bridge has sent what it gathered from it).
    func nextRecord(receive: Bool) -> NextRecord {
        if !parked.isEmpty { unpark() }
        let held = scratch.count(of: self)
        if held >= TLSRecords.headerLength {
            switch TLSRecords.recordLength(header: scratch.bytes + scratch.start) {
            case .failure(let failure):
                return .malformed(failure.detail)
            case .success(let length):
                if held >= TLSRecords.headerLength + length {
                    return .record(scratch.bytes + scratch.start, length: TLSRecords.headerLength + length)
                }
            }
        }
        guard receive else { return .needMore }
        guard mayReceive else { return .later }
        scratch.claim(for: self)
        if held > 0, scratch.start > 0 {
            memmove(scratch.bytes, scratch.bytes + scratch.start, held)
        }
        scratch.start = 0
        scratch.end = held
        var n = 0
        repeat {
            n = Glibc.recv(fd, scratch.bytes + held, scratch.capacity - held, 0)
        } while n < 0 && errno == EINTR
        if n <= 0 {
            let code = errno
            if held == 0 { scratch.release(from: self) }
            if n == 0 { return .endOfStream(midRecord: held > 0) }
            if code == EAGAIN || code == EWOULDBLOCK {
                drained = true
                return .later
            }
            return .failed(code)
        }
        scratch.end = held + n
        received += n
        // Less than there was room for: the socket is empty now, and epoll says when it is not.
        drained = n < scratch.capacity - held
        return nextRecord(receive: false)
    }

    /// The last `recv()` emptied the socket: receiving again before epoll says so would only
    /// fail with EAGAIN (a system call for nothing on every round trip). The bridge clears it
    /// when epoll announces bytes.
    var drained = false

    /// Bytes taken from the socket by `nextRecord` (the bridge's read budget counts them).
    private(set) var received = 0

    /// The record `nextRecord` gave is done with.
    func consume(_ length: Int) {
        scratch.start += length
        if scratch.start >= scratch.end { scratch.release(from: self) }
    }

    /// Parked bytes back into the loop's buffer (they fit: they came from it).
    private func unpark() {
        scratch.claim(for: self)
        let held = scratch.count(of: self)
        if held > 0, scratch.start > 0 { memmove(scratch.bytes, scratch.bytes + scratch.start, held) }
        scratch.start = 0
        scratch.end = held
        while !parked.isEmpty {
            let room = scratch.capacity - scratch.end
            guard room > 0 else { break }
            _ = parked.consume(upTo: room) { chunk in
                (scratch.bytes + scratch.end).copyMemory(from: chunk.baseAddress!, byteCount: chunk.count)
                scratch.end += chunk.count
                return chunk.count
            }
        }
    }

    /// A BIO that reads through this source, to be given to `SSL_set0_rbio`; nil if OpenSSL refused.
    func makeBIO() -> OpaquePointer? { CarrierBIO.make(Self.method, serving: self) }

    /// Our BIO method (made once). Never changed after it is made, and OpenSSL only reads it.
    nonisolated(unsafe) private static let method: OpaquePointer? = CarrierBIO.method(named: "cfat record source") { method in
        _ = BIO_meth_set_read_ex(method, readRecords)
        _ = BIO_meth_set_ctrl(method, control)
    }

    private static let readRecords: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int,
                                                     UnsafeMutablePointer<Int>?) -> Int32 = { bio, data, length, read in
        read?.pointee = 0
        guard let data, let source = CarrierBIO.object(of: bio, as: RecordSource.self) else { return 0 }
        switch source.read(into: UnsafeMutableRawPointer(data), length) {
        case .bytes(let n):
            read?.pointee = n
            return 1
        case .later:
            BIO_set_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY)
            return 0
        case .endOfStream, .failed:
            return 0
        }
    }

    private static let control: @convention(c) (OpaquePointer?, Int32, Int, UnsafeMutableRawPointer?) -> Int = { bio, command, _, _ in
        switch command {
        case BIO_CTRL_PENDING:
            return CarrierBIO.object(of: bio, as: RecordSource.self)?.hasBytes == true ? 1 : 0
        case BIO_CTRL_FLUSH:
            return 1
        default:
            return 0
        }
    }
}
