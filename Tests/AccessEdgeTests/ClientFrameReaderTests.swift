@testable import AccessEdge
@testable import AccessTransport
import NIOCore
import NIOWebSocket
import Testing

/// The emulator's frame reader against frames made by the client's own framing
/// (AccessTransport's `WebSocketFrames`): two independent implementations checking each other.
@Suite("emulator frame reader")
struct ClientFrameReaderTests {
    /// Everything the reader produced from a byte stream.
    struct Outcome {
        var data: [UInt8] = []
        var dataFrames = 0
        var frames: [(WebSocketOpcode, [UInt8])] = []
        var violation: NIOWebSocketError?
        var unmasked = false
    }

    /// Feeds `stream` in pieces of 1...`maxPiece` bytes (sizes from a fixed seed).
    static func read(_ stream: [UInt8], maxPiece: Int, maxFrameSize: Int = 1 << 24, seed: UInt64 = 1) -> Outcome {
        var reader = ClientFrameReader(maxFrameSize: maxFrameSize, allocator: ByteBufferAllocator())
        var random = SplitMix(state: seed)
        var outcome = Outcome()
        var position = 0
        while position < stream.count {
            let size = min(stream.count - position, 1 + Int(random.next() % UInt64(maxPiece)))
            var piece = ByteBuffer(bytes: stream[position..<position + size])
            position += size
            while let event = reader.next(from: &piece) {
                switch event {
                case .data(let payload, let startsFrame):
                    outcome.data += payload.readableBytesView
                    if startsFrame { outcome.dataFrames += 1 }
                case .frame(let opcode, let payload):
                    outcome.frames.append((opcode, Array(payload.readableBytesView)))
                case .violation(let error):
                    outcome.violation = error
                case .unmaskedFrame:
                    outcome.unmasked = true
                }
            }
            #expect(piece.readableBytes == 0, "the reader keeps what it cannot use yet")
        }
        return outcome
    }

    /// A masked client frame made by the client's framing code.
    static func clientFrame(opcode: UInt8, payload: [UInt8], key: UInt32) -> [UInt8] {
        let room = WebSocketFrames.maxClientHeader
        var storage = [UInt8](repeating: 0, count: room + payload.count)
        storage.replaceSubrange(room..., with: payload)
        return storage.withUnsafeMutableBytes { raw in
            let start = WebSocketFrames.frameInPlace(opcode: opcode, payload: raw.baseAddress! + room,
                                                     count: payload.count, maskKey: key)
            return Array(UnsafeRawBufferPointer(start: start, count: raw.baseAddress! + raw.count - start))
        }
    }

    /// Where two byte arrays first differ (`nil`: equal). Cheap to report, unlike a diff of
    /// megabyte arrays.
    static func firstDifference(_ got: [UInt8], _ expected: [UInt8]) -> Int? {
        if let index = (0..<min(got.count, expected.count)).first(where: { got[$0] != expected[$0] }) {
            return index
        }
        return got.count == expected.count ? nil : min(got.count, expected.count)
    }

    static func payload(_ count: Int, seed: UInt64) -> [UInt8] {
        var random = SplitMix(state: seed)
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    @Test("binary frames of every header size, masked by the client's code, in pieces of any size",
          arguments: [1, 3, 7, 1000, 70_000, 1 << 20])
    func binaryFramesRoundTrip(maxPiece: Int) {
        let sizes = [0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 125, 126, 127, 65_535, 65_536, 100_003]
        var stream: [UInt8] = []
        var expected: [UInt8] = []
        for (index, size) in sizes.enumerated() {
            let body = Self.payload(size, seed: UInt64(index + 10))
            expected += body
            stream += Self.clientFrame(opcode: WebSocketFrames.opBinary, payload: body,
                                       key: 0x9E37_79B9 &* UInt32(index + 1))
        }
        let outcome = Self.read(stream, maxPiece: maxPiece, seed: UInt64(maxPiece))
        #expect(Self.firstDifference(outcome.data, expected) == nil)
        #expect(outcome.dataFrames == sizes.count)
        #expect(outcome.frames.isEmpty)
        #expect(outcome.violation == nil)
    }

    @Test("ping, pong, text and close come whole and unmasked, between data frames")
    func wholeFrames() {
        var stream = Self.clientFrame(opcode: WebSocketFrames.opBinary, payload: [1, 2, 3], key: 0x0102_0304)
        stream += Self.clientFrame(opcode: WebSocketFrames.opPing, payload: Array("are you there".utf8), key: 0xDEAD_BEEF)
        stream += Self.clientFrame(opcode: WebSocketFrames.opPong, payload: [], key: 7)
        stream += Self.clientFrame(opcode: WebSocketFrames.opText, payload: Array("hello".utf8), key: 0xFFFF_FFFF)
        stream += Self.clientFrame(opcode: WebSocketFrames.opClose, payload: [0x03, 0xE9, 0x62], key: 0x8000_0001)
        for maxPiece in [1, 2, 5, 100] {
            let outcome = Self.read(stream, maxPiece: maxPiece)
            #expect(outcome.data == [1, 2, 3])
            #expect(outcome.frames.map(\.0) == [.ping, .pong, .text, .connectionClose])
            #expect(outcome.frames.map(\.1) == [Array("are you there".utf8), [], Array("hello".utf8), [0x03, 0xE9, 0x62]])
        }
    }

    @Test("RSV bits are accepted; an unmasked frame is refused (RFC 6455 §5.1) and nothing after it comes out")
    func unmaskedAndReserved() {
        let mask: [UInt8] = [0, 0, 0, 0]   // a zero key leaves the payload as it is
        let reserved: [UInt8] = [0xC2, 0x81] + mask + [4]
        var outcome = Self.read([0x82, 0x83] + mask + [7, 8, 9] + reserved, maxPiece: 2)
        #expect(outcome.data == [7, 8, 9, 4] && outcome.dataFrames == 2 && !outcome.unmasked)
        // The same frames with an unmasked one between them: reading stops there.
        outcome = Self.read([0x82, 0x83] + mask + [7, 8, 9] + [0x82, 0x02, 5, 6] + reserved, maxPiece: 3)
        #expect(outcome.unmasked)
        #expect(outcome.data == [7, 8, 9] && outcome.dataFrames == 1)
        // An unmasked control frame too.
        outcome = Self.read([0x89, 0x00], maxPiece: 1)
        #expect(outcome.unmasked && outcome.frames.isEmpty)
    }

    @Test("violations are found as soon as the length is known, and end the reading")
    func violations() {
        let mask: [UInt8] = [1, 2, 3, 4]
        // 1001 bytes announced, limit 1000: no payload or mask needed to refuse it.
        var outcome = Self.read([0x82, 0xFE, 0x03, 0xE9], maxPiece: 1, maxFrameSize: 1000)
        #expect(outcome.violation == .invalidFrameLength)
        outcome = Self.read([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0] + mask, maxPiece: 3)
        #expect(outcome.violation == .invalidFrameLength)
        outcome = Self.read([0x09, 0x81] + mask + [0], maxPiece: 4)
        #expect(outcome.violation == .fragmentedControlFrame)
        outcome = Self.read([0x88, 0xFE, 0x00, 0x7E] + mask, maxPiece: 4)
        #expect(outcome.violation == .multiByteControlFrameLength)
        // Nothing after a violation comes out.
        outcome = Self.read([0x89, 0xFE, 0x00, 0x7E] + mask + [0x82, 0x80] + mask, maxPiece: 100)
        #expect(outcome.violation == .multiByteControlFrameLength)
        #expect(outcome.dataFrames == 0)
        // The limit itself is fine.
        let body = Self.payload(1000, seed: 3)
        outcome = Self.read(Self.clientFrame(opcode: WebSocketFrames.opBinary, payload: body, key: 99),
                            maxPiece: 333, maxFrameSize: 1000)
        #expect(outcome.violation == nil)
        #expect(Self.firstDifference(outcome.data, body) == nil)
    }
}

/// A small fixed-seed generator, so piece sizes and payloads repeat from run to run.
struct SplitMix {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var value = state
        value = (value ^ (value >> 30)) &* 0xBF58_476D_1CE4_E5B9
        value = (value ^ (value >> 27)) &* 0x94D0_49BB_1331_11EB
        return value ^ (value >> 31)
    }
}
