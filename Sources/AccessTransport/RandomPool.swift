internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Random bytes for the carrier's thread, drawn from the kernel 4 KiB at a time: a masking key
/// for every frame we send and a `Sec-WebSocket-Key` for every upgrade. RFC 6455 §5.3 asks for
/// unpredictable keys from a strong source; taking them from `getrandom` in bulk gives that
/// without one system call per frame (`SystemRandomNumberGenerator` makes one per value).
struct RandomPool {
    private var words = [UInt32](repeating: 0, count: 1024)
    private var used = 1024

    /// 32 random bits.
    mutating func word() -> UInt32 {
        if used == words.count { refill() }
        defer { used += 1 }
        return words[used]
    }

    /// `count` random bytes.
    mutating func bytes(_ count: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(count + 3)
        while out.count < count {
            withUnsafeBytes(of: word()) { out += $0 }
        }
        return Array(out.prefix(count))
    }

    private mutating func refill() {
        let wanted = words.count * MemoryLayout<UInt32>.size
        let filled = words.withUnsafeMutableBytes { getrandom($0.baseAddress, $0.count, 0) }
        if filled != wanted {
            var generator = SystemRandomNumberGenerator()
            for i in words.indices { words[i] = generator.next() }
        }
        used = 0
    }
}
