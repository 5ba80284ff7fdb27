import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Makes stdin/stdout look like one connected socket for the carrier (ssh ProxyCommand mode).
///
/// A socketpair's one end goes to the carrier like any accepted connection; two threads copy
/// stdin → socket and socket → stdout with blocking I/O. Nothing else ever writes to stdout.
public enum StdioBridge {
    /// Starts the pumps and returns the carrier's end of the pair. `onOutputFinished` runs once
    /// the socket → stdout direction has ended (the tunnel closed and every byte was written).
    public static func start(input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO,
                             onOutputFinished: @escaping @Sendable () -> Void) throws -> Int32 {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw StdioError(message: "socketpair(): \(String(cString: strerror(errno)))")
        }
        let carrierEnd = pair[0]
        let pumpEnd = pair[1]

        let inbound = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if !writeAll(pumpEnd, buffer, count: n) { break }
            }
            _ = shutdown(pumpEnd, Int32(SHUT_WR))
        }
        inbound.name = "cf-access-tcp stdin"
        let outbound = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(pumpEnd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if !writeAll(output, buffer, count: n) { break }
            }
            onOutputFinished()
        }
        outbound.name = "cf-access-tcp stdout"
        inbound.start()
        outbound.start()
        return carrierEnd
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

/// A failure to set up the stdin/stdout bridge.
public struct StdioError: Error, CustomStringConvertible {
    /// One-line description.
    public let message: String
    /// Same as `message`.
    public var description: String { message }
}
