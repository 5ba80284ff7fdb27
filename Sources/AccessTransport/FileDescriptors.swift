import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// Running out of file descriptors, told plainly (issue 12.6) instead of as a bug.
package enum FileDescriptors {
    /// The soft limit on open files, if known.
    package static var limit: Int? {
        var value = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &value) == 0, value.rlim_cur != rlim_t.max, value.rlim_cur <= rlim_t(Int.max) else { return nil }
        return Int(value.rlim_cur)
    }

    /// The failure to report if no socket can be made now for lack of descriptors, else nil.
    package static func exhausted() -> TunnelFailure? {
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if probe >= 0 {
            Glibc.close(probe)
            return nil
        }
        let error = SystemError.current("socket()")
        guard error.isOutOfDescriptors else { return nil }
        return error.tunnelFailure
    }

    /// A connected pair of local stream sockets (close-on-exec): one end for the carrier, one
    /// for the caller of `openStream`.
    package static func socketPair() throws(TunnelFailure) -> (carrier: Int32, caller: Int32) {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw SystemError.current("socketpair()").tunnelFailure
        }
        return (pair[0], pair[1])
    }

    /// Makes the coming `close` of the socket `fd` abortive: its TCP peer gets a reset (RST) and
    /// sees ECONNRESET after the bytes already delivered, not an EOF (`SO_LINGER` with a time of 0).
    /// Changes nothing on a Unix socket.
    package static func resetOnClose(_ fd: Int32) {
        var abortive = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &abortive, socklen_t(MemoryLayout<linger>.size))
    }

    /// Closes a local connection its tunnel never served (the edge refused or could not be
    /// dialled, retries spent, a limit, the listener stopping): with a reset, so its client reads
    /// ECONNRESET instead of an end that looks clean, which would pass for an empty answer.
    package static func closeUnserved(_ fd: Int32) {
        resetOnClose(fd)
        Glibc.close(fd)
    }

    /// The bytes of the file at `path`, read to its end with read(2); nil (errno set) if it
    /// cannot be opened or read, or holds more than `limit` bytes (errno EFBIG). A character
    /// device reads as what it gives: `/dev/null` as an empty file (FileManager's
    /// `contents(atPath:)` fails on it).
    package static func readSmallFile(_ path: String, limit: Int = 16 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                bytes += chunk[0..<n]
                if bytes.count > limit {
                    errno = EFBIG
                    return nil
                }
            } else if n == 0 {
                return bytes
            } else if errno != EINTR {
                return nil
            }
        }
    }

    /// Closes `fd` (a socket handed to us, or one we made).
    package static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    /// Writes all of `text` to `fd` (standard output or error: what FileHandle's `write` did),
    /// again after a short write or EINTR; stops quietly at any other error (a closed pipe),
    /// where FileHandle stopped the process. Returns whether every byte was written.
    @discardableResult
    package static func writeAll(_ fd: Int32, _ text: String) -> Bool {
        writeAll(fd, Array(text.utf8))
    }

    /// Writes all of `bytes` to `fd` (a `socket`: without SIGPIPE), as `writeAll(_:_:)` for text.
    @discardableResult
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], socket: Bool = false) -> Bool {
        bytes.withUnsafeBytes { write(all: $0, to: fd, socket: socket) } == nil
    }

    /// The one way bytes are written out whole: again after a short write or EINTR, waiting
    /// (poll) while a non-blocking descriptor is full. A `socket` is written with `send` and
    /// `MSG_NOSIGNAL`, so a closed peer is an error (EPIPE), never SIGPIPE; other descriptors
    /// with `write`. Returns nil when every byte was written, else the errno of the failure (EIO
    /// for a write that took nothing).
    package static func write(all bytes: UnsafeRawBufferPointer, to fd: Int32, socket: Bool = false) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let start = bytes.baseAddress! + offset, left = bytes.count - offset
            let n = socket ? Glibc.send(fd, start, left, SocketFlags.noSignal) : Glibc.write(fd, start, left)
            if n > 0 {
                offset += n
                continue
            }
            if n < 0 {
                switch errno {
                case EINTR:
                    continue
                case EAGAIN, EWOULDBLOCK:
                    var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&entry, 1, 1000)
                    continue
                default:
                    return errno
                }
            }
            return EIO
        }
        return nil
    }
}
