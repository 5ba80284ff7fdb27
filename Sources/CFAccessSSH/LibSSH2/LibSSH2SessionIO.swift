import AccessTransport
import FoundationEssentials
internal import CCFSSH2
// The socket constants (SHUT_WR, MSG_NOSIGNAL, IPPROTO_TCP) come with the first C module that
// includes their headers, here libssh's.
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// libssh2's socket I/O for one session, through our own send and recv callbacks (used on the
/// session's thread only).
///
/// - **Sends never block and never come back short.** What the socket does not take at once is
///   queued here and flushed when the socket is writable. libssh2 therefore never holds a
///   half-sent packet, which in 1.10 makes any *other* send (a window adjust inside a read, a
///   keepalive, another channel's data) fail with `LIBSSH2_ERROR_BAD_USE` until the same call is
///   repeated; and no call blocks on the way out. The pump stops feeding channel data while the
///   queue is above ``SocketIO/highWater``.
/// - **Each recv that found the socket empty is remembered** until the next `poll`: later reads
///   in the same round get EAGAIN without a syscall, so bytes that arrive meanwhile stay in the
///   kernel, where the next `poll` sees them, instead of being pulled into libssh2's packet
///   queue behind the pump's back (issue 16 point 6: see `pump`).
/// - When the socket is readable but no channel can take what arrives (every forwarded
///   connection waits on its local side, or none is open), the pump moves the bytes into a
///   buffer here (``SocketIO/fill()``), which libssh2's next read gets first: `poll` does not
///   spin on a readable socket and silence is never mistaken for a dead connection.
/// - Every byte that arrives moves ``SocketIO/mark`` on (the keepalive loss rule, and the
///   pump's stall rule).
final class SocketIO: @unchecked Sendable {
    let fd: Int32
    /// Grows with every byte read from the socket and every byte handed to libssh2 (the pump's
    /// sign that something arrived).
    var mark: UInt64 = 0
    /// The socket was found empty (EAGAIN) since the last `poll`.
    var drained = false
    /// The first send error (an errno), after which every send fails.
    private(set) var sendError: Int32?
    private var outbound: [UInt8] = []
    private var outboundStart = 0
    private var inbound: [UInt8] = []
    private var inboundStart = 0

    /// At most this many bytes wait in the inbound buffer; beyond it the socket is not read.
    static let inboundLimit = 1 << 20

    /// Above this many queued bytes the pump writes no more channel data until the socket
    /// took some.
    static let highWater = 512 * 1024

    init(fd: Int32) {
        self.fd = fd
    }

    /// Bytes queued for the socket.
    var pendingOutbound: Int { outbound.count - outboundStart }

    /// libssh2 sends `length` bytes: straight to the socket when nothing waits, the rest queued.
    func send(_ buffer: UnsafeRawPointer, _ length: Int, flags: Int32) -> Int {
        if let sendError { return -Int(sendError) }
        let offset = pendingOutbound == 0 ? sendNow(buffer, length, flags: flags) : 0
        if let sendError { return -Int(sendError) }
        if offset < length {
            if outboundStart > 0 && outboundStart == outbound.count {
                outbound.removeAll(keepingCapacity: true)
                outboundStart = 0
            }
            outbound.append(contentsOf: UnsafeRawBufferPointer(start: buffer + offset, count: length - offset))
        }
        return length
    }

    /// Sends as much of `length` bytes as the socket takes now (until EAGAIN); how many it took.
    /// A failure is kept in `sendError` (what was taken before it still counts).
    private func sendNow(_ buffer: UnsafeRawPointer, _ length: Int, flags: Int32) -> Int {
        var offset = 0
        while offset < length {
            let n = Glibc.send(fd, buffer + offset, length - offset, flags | Int32(MSG_NOSIGNAL))
            if n > 0 {
                offset += n
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                break
            } else {
                sendError = n < 0 ? errno : EPIPE
                break
            }
        }
        return offset
    }

    /// Sends what is queued, as far as the socket takes it. False once sending failed.
    @discardableResult
    func flush() -> Bool {
        if pendingOutbound > 0 && sendError == nil {
            let start = outboundStart, count = pendingOutbound
            let sent = outbound.withUnsafeBytes { bytes in sendNow(bytes.baseAddress! + start, count, flags: 0) }
            outboundStart += sent
        }
        if pendingOutbound == 0 {
            outbound.removeAll(keepingCapacity: outbound.count <= 4 * SocketIO.highWater)
            outboundStart = 0
        } else if outboundStart > SocketIO.highWater {
            outbound.removeFirst(outboundStart)
            outboundStart = 0
        }
        return sendError == nil
    }

    /// Flushes the queue, waiting (poll) while the socket is full, until it is empty or
    /// `deadline` passed. False if it could not all be sent.
    func flushAll(until deadline: Date) -> Bool {
        while flush() && pendingOutbound > 0 {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return false }
            var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&entry, 1, Int32(min(left, 60) * 1000) + 1)
        }
        return sendError == nil
    }

    /// Bytes read from the socket that libssh2 has not taken yet.
    var bufferedInbound: Int { inbound.count - inboundStart }

    /// Reads what the socket has into the inbound buffer (up to ``inboundLimit``). Fails when
    /// the socket ended or broke.
    func fill() -> SSHFailure? {
        let room = min(256 * 1024, SocketIO.inboundLimit - bufferedInbound)
        guard room > 0, !drained else { return nil }
        if inboundStart > 0 {
            inbound.removeFirst(inboundStart)
            inboundStart = 0
        }
        let old = inbound.count
        inbound.append(contentsOf: repeatElement(0, count: room))
        let n = inbound.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + old, room, 0) }
        let failure = errno
        inbound.removeLast(room - max(0, n))
        if n > 0 {
            mark &+= UInt64(n)
            return nil
        }
        if n < 0 && (failure == EAGAIN || failure == EWOULDBLOCK || failure == EINTR) {
            drained = failure != EINTR
            return nil
        }
        return SSHFailure(.connectionLost, n == 0 ? "Connection lost: the tunnel closed"
                                                  : "Connection lost: \(SystemError(failure).text)")
    }

    /// libssh2 reads up to `length` bytes: from the inbound buffer first, then the socket.
    func receive(_ buffer: UnsafeMutableRawPointer?, _ length: Int, flags: Int32) -> Int {
        if bufferedInbound > 0, let buffer {
            let n = min(length, bufferedInbound)
            inbound.withUnsafeBytes { buffer.copyMemory(from: $0.baseAddress! + inboundStart, byteCount: n) }
            inboundStart += n
            if inboundStart == inbound.count {
                inbound.removeAll(keepingCapacity: false)
                inboundStart = 0
            }
            mark &+= UInt64(n)
            return n
        }
        if drained { return -Int(EAGAIN) }
        while true {
            let n = recv(fd, buffer, length, flags)
            if n > 0 {
                mark &+= UInt64(n)
                return n
            }
            if n == 0 { return 0 }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { drained = true }
            return -Int(errno)
        }
    }

    /// After a `poll`: the socket may have data again.
    func polled() {
        drained = false
    }

    /// The error text of a failed send, for the failure line.
    var sendErrorText: String? {
        sendError.map { SystemError($0).text }
    }
}
