import NIOCore
import NIOWebSocket

/// Reads the frames a WebSocket client sends, as a stream, without the I/O.
///
/// The emulator's own reader, written apart from the client's framing (AccessTransport's
/// `WebSocketFrames.swift`) so that each side checks the other. Data frames (binary and
/// continuation) are not collected: their payload is handed on piece by piece as it arrives,
/// unmasked while it is copied out of the TLS layer's buffer (8 bytes per step), so a large
/// frame costs one pass over its bytes and no frame-sized buffer. Every other frame (text,
/// ping, pong, close, unknown opcodes) is collected whole and handed on once complete.
///
/// The checks are those of NIOWebSocket's `WebSocketFrameDecoder`, which the tunnel used
/// before, and in the same order, as soon as the length is known: a length above
/// `maxFrameSize` (or above `Int.max`) is `invalidFrameLength`; a control frame without FIN
/// is `fragmentedControlFrame`; a control frame over 125 bytes is
/// `multiByteControlFrameLength`. Then, unlike that decoder, a frame without a mask is refused
/// (`unmaskedFrame`): RFC 6455 §5.1 says a server must close the connection on one, and the
/// emulator is there to catch a client that forgets. RSV bits are not checked.
struct ClientFrameReader {
    /// What the reader found.
    enum Event {
        /// Payload of a binary or continuation frame, unmasked, in order. `startsFrame` is
        /// true for the first piece of each frame (a frame without payload gives one empty piece).
        case data(ByteBuffer, startsFrame: Bool)
        /// A complete frame of any other opcode, its payload unmasked.
        case frame(opcode: WebSocketOpcode, payload: ByteBuffer)
        /// A protocol violation; nothing after it is read.
        case violation(NIOWebSocketError)
        /// A client frame without a mask (RFC 6455 §5.1); nothing after it is read.
        case unmaskedFrame
    }

    /// A parsed frame header.
    private struct Header {
        var opcode: UInt8
        var length: Int
        var mask: (UInt8, UInt8, UInt8, UInt8)

        var isData: Bool { opcode == 0x0 || opcode == 0x2 }
    }

    private enum State {
        /// Between frames (header bytes may be waiting in `headerBytes`).
        case header
        /// Inside a data frame: `remaining` payload bytes to go, the next one at `offset`.
        case data(Header, offset: Int, remaining: Int)
        /// Inside any other frame: its payload is collected in `collected`.
        case collecting(Header)
        /// After a violation.
        case failed
    }

    /// Longest header: 2 bytes, 8 bytes of length, 4 bytes of mask.
    private static let maxHeaderLength = 14

    private let maxFrameSize: Int
    private var state = State.header
    /// Header bytes that arrived without the rest of their header.
    private var headerBytes: ByteBuffer
    /// Payload of the frame being collected.
    private var collected: ByteBuffer
    /// Where data payload is unmasked to; reused once the previous payload has been written.
    private var output: ByteBuffer

    init(maxFrameSize: Int, allocator: ByteBufferAllocator) {
        self.maxFrameSize = maxFrameSize
        headerBytes = allocator.buffer(capacity: Self.maxHeaderLength)
        collected = allocator.buffer(capacity: 0)
        output = allocator.buffer(capacity: 0)
    }

    /// The next event from `input` (consuming what it used), or `nil` once `input` is used up
    /// without completing one.
    mutating func next(from input: inout ByteBuffer) -> Event? {
        while true {
            switch state {
            case .failed:
                input.moveReaderIndex(to: input.writerIndex)
                return nil

            case .header:
                switch readHeader(from: &input) {
                case .incomplete:
                    return nil
                case .violation(let error):
                    state = .failed
                    return .violation(error)
                case .unmasked:
                    state = .failed
                    return .unmaskedFrame
                case .complete(let header):
                    if header.isData {
                        state = .data(header, offset: 0, remaining: header.length)
                        if header.length == 0 {
                            state = .header
                            return .data(ByteBuffer(), startsFrame: true)
                        }
                    } else {
                        collected.clear()
                        state = .collecting(header)
                    }
                }

            case .data(let header, let offset, let remaining):
                let count = min(remaining, input.readableBytes)
                guard count > 0 else { return nil }
                let piece = unmaskCopy(from: &input, count: count, mask: header.mask, offset: offset)
                state = remaining == count ? .header : .data(header, offset: offset + count, remaining: remaining - count)
                return .data(piece, startsFrame: offset == 0)

            case .collecting(let header):
                let count = min(header.length - collected.readableBytes, input.readableBytes)
                if count > 0, var slice = input.readSlice(length: count) {
                    collected.writeBuffer(&slice)
                }
                guard collected.readableBytes == header.length else { return nil }
                state = .header
                collected.withUnsafeMutableReadableBytes { bytes in
                    Self.unmask(bytes, mask: header.mask, offset: 0)
                }
                // Four bits always make an opcode.
                return .frame(opcode: WebSocketOpcode(encodedWebSocketOpcode: header.opcode)!, payload: collected)
            }
        }
    }

    // MARK: Header

    private enum HeaderResult {
        case incomplete
        case complete(Header)
        case violation(NIOWebSocketError)
        case unmasked
    }

    /// Parses a header from the stashed bytes followed by `input`; consumes it only when complete.
    private mutating func readHeader(from input: inout ByteBuffer) -> HeaderResult {
        guard headerBytes.readableBytes > 0 else {
            let result = input.withUnsafeReadableBytes { Self.parseHeader($0, maxFrameSize: maxFrameSize) }
            switch result {
            case .incomplete:
                headerBytes.writeBuffer(&input)
                return .incomplete
            case .violation(let error):
                return .violation(error)
            case .unmasked:
                return .unmasked
            case .complete(let header, let length):
                input.moveReaderIndex(forwardBy: length)
                return .complete(header)
            }
        }
        // Part of the header came earlier: top the stash up and parse it there.
        let stashed = headerBytes.readableBytes
        let take = min(Self.maxHeaderLength - stashed, input.readableBytes)
        headerBytes.writeImmutableBuffer(input.getSlice(at: input.readerIndex, length: take)!)
        let result = headerBytes.withUnsafeReadableBytes { Self.parseHeader($0, maxFrameSize: maxFrameSize) }
        switch result {
        case .incomplete:
            input.moveReaderIndex(forwardBy: take)
            return .incomplete
        case .violation(let error):
            return .violation(error)
        case .unmasked:
            return .unmasked
        case .complete(let header, let length):
            input.moveReaderIndex(forwardBy: length - stashed)
            headerBytes.clear()
            return .complete(header)
        }
    }

    private enum ParsedHeader {
        case incomplete
        case complete(Header, length: Int)
        case violation(NIOWebSocketError)
        /// A header without a mask (RFC 6455 §5.1: a client must mask every frame).
        case unmasked
    }

    /// Parses one header at the start of `bytes`. Checks the frame as soon as its length is known.
    private static func parseHeader(_ bytes: UnsafeRawBufferPointer, maxFrameSize: Int) -> ParsedHeader {
        guard bytes.count >= 2 else { return .incomplete }
        let first = bytes[0]
        let second = bytes[1]
        let masked = second & 0x80 != 0
        var position = 2
        var length: Int
        switch second & 0x7F {
        case 126:
            guard bytes.count >= 4 else { return .incomplete }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            position = 4
        case 127:
            guard bytes.count >= 10 else { return .incomplete }
            var wide: UInt64 = 0
            for index in 2..<10 {
                wide = wide << 8 | UInt64(bytes[index])
            }
            guard wide <= UInt64(Int.max) else { return .violation(.invalidFrameLength) }
            length = Int(wide)
            position = 10
        case let short:
            length = Int(short)
        }
        let isControl = first & 0x08 != 0
        if length > maxFrameSize {
            return .violation(.invalidFrameLength)
        }
        if isControl && first & 0x80 == 0 {
            return .violation(.fragmentedControlFrame)
        }
        if isControl && length > 125 {
            return .violation(.multiByteControlFrameLength)
        }
        guard masked else { return .unmasked }
        guard bytes.count >= position + 4 else { return .incomplete }
        let mask = (bytes[position], bytes[position + 1], bytes[position + 2], bytes[position + 3])
        position += 4
        return .complete(Header(opcode: first & 0x0F, length: length, mask: mask), length: position)
    }

    // MARK: Unmasking

    /// Copies `count` bytes out of `input` into `output`, unmasking them on the way; `offset`
    /// is the position of the first of them in the frame's payload.
    private mutating func unmaskCopy(from input: inout ByteBuffer, count: Int,
                                     mask: (UInt8, UInt8, UInt8, UInt8), offset: Int) -> ByteBuffer {
        // `clear()` gets fresh storage if the previous piece is still queued for the target.
        output.clear()
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { target in
            input.withUnsafeReadableBytes { source in
                let from = UnsafeRawBufferPointer(rebasing: source.prefix(count))
                Self.unmask(from: from, to: target.baseAddress!, mask: mask, offset: offset)
            }
            return count
        }
        input.moveReaderIndex(forwardBy: count)
        return output
    }

    /// The mask as 8 bytes in memory order, starting at payload position `offset`.
    private static func maskWord(_ mask: (UInt8, UInt8, UInt8, UInt8), offset: Int) -> UInt64 {
        var word: UInt64 = 0
        withUnsafeBytes(of: mask) { key in
            withUnsafeMutableBytes(of: &word) { bytes in
                for index in 0..<8 {
                    bytes[index] = key[(offset + index) & 3]
                }
            }
        }
        return word
    }

    /// `to[i] = from[i] ^ mask[(offset + i) % 4]` for every byte of `from`; 32 bytes per
    /// step, then 8, then single bytes. `to` may be `from`.
    private static func unmask(from: UnsafeRawBufferPointer, to: UnsafeMutableRawPointer,
                               mask: (UInt8, UInt8, UInt8, UInt8), offset: Int) {
        let count = from.count
        guard count > 0, let source = from.baseAddress else { return }
        let word = maskWord(mask, offset: offset)
        var index = 0
        while index + 32 <= count {
            let a = source.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            let b = source.loadUnaligned(fromByteOffset: index + 8, as: UInt64.self)
            let c = source.loadUnaligned(fromByteOffset: index + 16, as: UInt64.self)
            let d = source.loadUnaligned(fromByteOffset: index + 24, as: UInt64.self)
            to.storeBytes(of: a ^ word, toByteOffset: index, as: UInt64.self)
            to.storeBytes(of: b ^ word, toByteOffset: index + 8, as: UInt64.self)
            to.storeBytes(of: c ^ word, toByteOffset: index + 16, as: UInt64.self)
            to.storeBytes(of: d ^ word, toByteOffset: index + 24, as: UInt64.self)
            index += 32
        }
        while index + 8 <= count {
            let a = source.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            to.storeBytes(of: a ^ word, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        // Every step so far was a multiple of 4 bytes, so the key is still in phase.
        withUnsafeBytes(of: word) { key in
            while index < count {
                let byte = source.load(fromByteOffset: index, as: UInt8.self) ^ key[index & 3]
                to.storeBytes(of: byte, toByteOffset: index, as: UInt8.self)
                index += 1
            }
        }
    }

    /// Unmasks `bytes` in place.
    private static func unmask(_ bytes: UnsafeMutableRawBufferPointer, mask: (UInt8, UInt8, UInt8, UInt8),
                               offset: Int) {
        guard let base = bytes.baseAddress else { return }
        unmask(from: UnsafeRawBufferPointer(bytes), to: base, mask: mask, offset: offset)
    }
}
