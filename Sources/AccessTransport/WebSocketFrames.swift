/// RFC 6455 framing for the data path, done in bulk instead of byte by byte.
///
/// Once the WebSocket is open (`Bridge+Dial.swift`), the bridge reads and writes the TLS stream
/// with these helpers: frame headers are parsed once per frame and payload is handed on as whole
/// slices of the read buffer; client frames are masked eight bytes at a time.
enum WebSocketFrames {
    /// Largest header of a masked client frame: 2 + 8 (64-bit length) + 4 (mask key).
    static let maxClientHeader = 14

    static let opContinuation: UInt8 = 0x0
    static let opText: UInt8 = 0x1
    static let opBinary: UInt8 = 0x2
    static let opClose: UInt8 = 0x8
    static let opPing: UInt8 = 0x9
    static let opPong: UInt8 = 0xA

    /// Writes the header of a final, masked client frame so that it ends at `payload`, masks the
    /// `count` payload bytes in place, and returns where the frame starts. `payload` must have
    /// `maxClientHeader` writable bytes before it.
    static func frameInPlace(opcode: UInt8, payload: UnsafeMutableRawPointer, count: Int,
                             maskKey: UInt32) -> UnsafeMutableRawPointer {
        let lengthBytes = count < 126 ? 0 : (count <= 0xFFFF ? 2 : 8)
        let start = payload - (2 + lengthBytes + 4)
        start.storeBytes(of: 0x80 | opcode, as: UInt8.self)
        switch lengthBytes {
        case 0:
            start.storeBytes(of: 0x80 | UInt8(count), toByteOffset: 1, as: UInt8.self)
        case 2:
            start.storeBytes(of: 0x80 | 126, toByteOffset: 1, as: UInt8.self)
            start.storeBytes(of: UInt16(count).bigEndian, toByteOffset: 2, as: UInt16.self)
        default:
            start.storeBytes(of: 0x80 | 127, toByteOffset: 1, as: UInt8.self)
            start.storeBytes(of: UInt64(count).bigEndian, toByteOffset: 2, as: UInt64.self)
        }
        // The key's bytes in memory order are the mask bytes 0...3.
        start.storeBytes(of: maskKey, toByteOffset: 2 + lengthBytes, as: UInt32.self)
        mask(payload, count: count, key: maskKey)
        return start
    }

    /// XORs `count` bytes with the repeating 4-byte key (key bytes in memory order), 16 at a time
    /// (one SSE2 register on x86-64, one NEON register on arm64), then 8, then one by one.
    static func mask(_ bytes: UnsafeMutableRawPointer, count: Int, key: UInt32) {
        let wide = UInt64(key) | (UInt64(key) << 32)
        let lanes = SIMD2<UInt64>(repeating: wide)
        var i = 0
        while i + 64 <= count {
            let a = bytes.loadUnaligned(fromByteOffset: i, as: SIMD2<UInt64>.self)
            let b = bytes.loadUnaligned(fromByteOffset: i + 16, as: SIMD2<UInt64>.self)
            let c = bytes.loadUnaligned(fromByteOffset: i + 32, as: SIMD2<UInt64>.self)
            let d = bytes.loadUnaligned(fromByteOffset: i + 48, as: SIMD2<UInt64>.self)
            bytes.storeBytes(of: a ^ lanes, toByteOffset: i, as: SIMD2<UInt64>.self)
            bytes.storeBytes(of: b ^ lanes, toByteOffset: i + 16, as: SIMD2<UInt64>.self)
            bytes.storeBytes(of: c ^ lanes, toByteOffset: i + 32, as: SIMD2<UInt64>.self)
            bytes.storeBytes(of: d ^ lanes, toByteOffset: i + 48, as: SIMD2<UInt64>.self)
            i += 64
        }
        while i + 8 <= count {
            let a = bytes.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            bytes.storeBytes(of: a ^ wide, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        // i is a multiple of 8 here, so the tail starts at key byte 0.
        var k = key
        withUnsafeBytes(of: &k) { keyBytes in
            while i < count {
                let v = bytes.load(fromByteOffset: i, as: UInt8.self) ^ keyBytes[i & 3]
                bytes.storeBytes(of: v, toByteOffset: i, as: UInt8.self)
                i += 1
            }
        }
    }
}

/// What the frame reader found in the bytes from the edge.
enum FrameEvent {
    /// Payload of a binary message (a slice of the input; valid during the call only).
    case data(UnsafeRawBufferPointer)
    /// A text message starts: not allowed on the carrier (its payload is skipped).
    case text
    case ping([UInt8])
    case pong
    /// A Close frame with its payload (status code and reason, possibly empty).
    case close([UInt8])
    /// The bytes break RFC 6455 (what, for the log).
    case violation(String)
}

/// Incremental parser of server-to-client frames. Headers may be split across reads (kept in a
/// small buffer); payload is never copied except for control frames (≤ 125 bytes).
struct FrameReader {
    private var header: [UInt8] = []
    private var remaining: UInt64 = 0
    private var opcode: UInt8 = 0
    private var inFrame = false
    /// A fragmented binary message is in progress (continuation frames may follow).
    private var inMessage = false
    /// The message in progress is text: its payload is skipped.
    private var messageIsText = false
    private var control: [UInt8] = []

    /// Feeds bytes; `emit` returns false to stop (the reader must not be fed again after it
    /// stopped at a `.close` or `.violation`). The payload of text messages is skipped.
    mutating func feed(_ input: UnsafeRawBufferPointer, _ emit: (FrameEvent) -> Bool) {
        let n = input.count
        var p = 0
        while p < n || (inFrame && remaining == 0) {
            if inFrame {
                let take = Int(min(UInt64(n - p), remaining))
                if take > 0 {
                    let slice = UnsafeRawBufferPointer(rebasing: input[p..<(p + take)])
                    p += take
                    remaining -= UInt64(take)
                    if opcode >= 0x8 {
                        control.append(contentsOf: slice)
                    } else if opcode == WebSocketFrames.opText {
                        // skipped: the owner has been told with `.text`
                    } else if !emit(.data(slice)) {
                        return
                    }
                }
                if remaining == 0 {
                    inFrame = false
                    if opcode >= 0x8 {
                        let payload = control
                        control = []
                        let event: FrameEvent
                        switch opcode {
                        case WebSocketFrames.opPing: event = .ping(payload)
                        case WebSocketFrames.opPong: event = .pong
                        default: event = .close(payload)
                        }
                        if !emit(event) { return }
                    }
                }
                continue
            }
            // A header: parse it in place when it is whole, else gather it.
            let parsed: Int
            if header.isEmpty, n - p >= 2, let size = Self.headerSize(input[p], input[p + 1]), n - p >= size {
                guard start(UnsafeRawBufferPointer(rebasing: input[p..<(p + size)]), emit) else { return }
                parsed = size
            } else {
                header.append(input[p])
                parsed = 1
                if header.count >= 2, let size = Self.headerSize(header[0], header[1]), header.count == size {
                    let whole = header
                    header.removeAll(keepingCapacity: false)
                    let ok = whole.withUnsafeBytes { start($0, emit) }
                    if !ok { p += parsed; return }
                }
            }
            p += parsed
        }
    }

    private static func headerSize(_ b0: UInt8, _ b1: UInt8) -> Int? {
        let len7 = b1 & 0x7F
        return 2 + (len7 == 126 ? 2 : (len7 == 127 ? 8 : 0)) + (b1 & 0x80 != 0 ? 4 : 0)
    }

    /// Checks a whole header and enters its payload. Returns false when parsing must stop.
    private mutating func start(_ h: UnsafeRawBufferPointer, _ emit: (FrameEvent) -> Bool) -> Bool {
        let b0 = h[0], b1 = h[1]
        let fin = b0 & 0x80 != 0
        let op = b0 & 0x0F
        if b0 & 0x70 != 0 { return emit(.violation("a frame with reserved bits set")) && false }
        if b1 & 0x80 != 0 { return emit(.violation("a masked frame from the server")) && false }
        var length = UInt64(b1 & 0x7F)
        if length == 126 {
            length = UInt64(h[2]) << 8 | UInt64(h[3])
        } else if length == 127 {
            length = 0
            for i in 2..<10 { length = length << 8 | UInt64(h[i]) }
            if length >> 63 != 0 { return emit(.violation("a frame length above 2^63")) && false }
        }
        switch op {
        case WebSocketFrames.opText, WebSocketFrames.opBinary:
            if inMessage { return emit(.violation("a new message inside a fragmented one")) && false }
            inMessage = !fin
            messageIsText = op == WebSocketFrames.opText
            if messageIsText, !emit(.text) { return false }
        case WebSocketFrames.opContinuation:
            if !inMessage { return emit(.violation("a continuation frame outside a message")) && false }
            inMessage = !fin
        case WebSocketFrames.opClose, WebSocketFrames.opPing, WebSocketFrames.opPong:
            if !fin || length > 125 { return emit(.violation("a fragmented or oversized control frame")) && false }
        default:
            return emit(.violation("a frame with unknown opcode \(op)")) && false
        }
        opcode = op == WebSocketFrames.opContinuation && messageIsText ? WebSocketFrames.opText : op
        remaining = length
        inFrame = true
        return true
    }
}
