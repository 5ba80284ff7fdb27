import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Joins stdin/stdout to a tunnel's socket (ssh ProxyCommand mode): two threads copy with
/// blocking I/O. Nothing else ever writes to stdout.
public enum StdioBridge {
    /// Copies stdin → `socket` and `socket` → stdout on two threads until each direction ends.
    /// `onOutputFinished` runs once the socket → stdout direction has ended (the tunnel closed
    /// and every byte was written). On stdin's end the socket's write side is shut down, which
    /// ends the tunnel (a WebSocket has no half-close).
    public static func pump(socket: Int32, input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO,
                            onOutputFinished: @escaping @Sendable () -> Void) {
        let inbound = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if !writeAll(socket, buffer, count: n) { break }
            }
            _ = shutdown(socket, Int32(SHUT_WR))
        }
        inbound.name = "cf-access-tcp stdin"
        let outbound = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if !writeAll(output, buffer, count: n) { break }
            }
            onOutputFinished()
        }
        outbound.name = "cf-access-tcp stdout"
        inbound.start()
        outbound.start()
    }

    private static func writeAll(_ fd: Int32, _ buffer: [UInt8], count: Int) -> Bool {
        var offset = 0
        while offset < count {
            let w = buffer.withUnsafeBytes { write(fd, $0.baseAddress! + offset, count - offset) }
            if w < 0 && errno == EINTR { continue }
            if w <= 0 { return false }
            offset += w
        }
        return true
    }
}
