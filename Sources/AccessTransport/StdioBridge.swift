import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Joins stdin/stdout to a tunnel's socket (ssh ProxyCommand mode): two threads copy with
/// blocking I/O. Nothing else ever writes to stdout.
package enum StdioBridge {
    /// How the socket → stdout direction ended.
    package enum Outcome: Sendable, Equatable {
        /// The tunnel closed its side of the socket and every byte reached stdout.
        case ended
        /// Writing to stdout failed with this errno (e.g. ENOSPC for `>/dev/full`, EPIPE); the
        /// socket was shut down both ways, which closes the tunnel.
        case outputFailed(Int32)
    }

    /// Copies stdin → `socket` and `socket` → stdout on two threads until each direction ends.
    /// `onOutputFinished` runs once the socket → stdout direction has ended (the tunnel closed
    /// and every byte was written, or stdout failed). On stdin's end the socket's write side is
    /// shut down: the tunnel then closes once the edge has answered (or its linger passed).
    package static func pump(socket: Int32, input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO,
                            onOutputFinished: @escaping @Sendable (Outcome) -> Void) {
        let inbound: @Sendable () -> Void = {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if buffer.withUnsafeBytes({ FileDescriptors.write(all: UnsafeRawBufferPointer(rebasing: $0[..<n]), to: socket, socket: true) }) != nil { break }
            }
            _ = shutdown(socket, SocketFlags.shutWrite)
        }
        let outbound: @Sendable () -> Void = {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            var outcome = Outcome.ended
            while true {
                let n = buffer.withUnsafeMutableBytes { read(socket, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                if let failure = buffer.withUnsafeBytes({ FileDescriptors.write(all: UnsafeRawBufferPointer(rebasing: $0[..<n]), to: output) }) {
                    outcome = .outputFailed(failure)
                    _ = shutdown(socket, SocketFlags.shutBoth)
                    break
                }
            }
            onOutputFinished(outcome)
        }
        PThread.start(name: "cfat stdin", inbound)
        PThread.start(name: "cfat stdout", outbound)
    }
}
