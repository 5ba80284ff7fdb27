@testable import AccessTransport
import Testing

@Suite("WebSocket framing of the data path")
struct WebSocketFramesTests {
    /// A server frame (unmasked) as RFC 6455 lays it out.
    private func serverFrame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        var out: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        if payload.count < 126 {
            out.append(UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            out += [126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            out.append(127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((payload.count >> shift) & 0xFF)) }
        }
        return out + payload
    }

    private enum Seen: Equatable { case data([UInt8]), text, ping([UInt8]), pong, close([UInt8]), violation }

    /// Feeds `bytes` in pieces of `step` bytes and collects what the reader reports.
    private func read(_ bytes: [UInt8], step: Int) -> [Seen] {
        var reader = FrameReader()
        var seen: [Seen] = []
        var data: [UInt8] = []
        var stopped = false
        var i = 0
        while i < bytes.count, !stopped {
            let piece = Array(bytes[i..<min(bytes.count, i + step)])
            i += step
            piece.withUnsafeBytes { raw in
                reader.feed(raw) { event in
                    switch event {
                    case .data(let d): data += d; return true
                    default: break
                    }
                    if !data.isEmpty { seen.append(.data(data)); data = [] }
                    switch event {
                    case .data: break
                    case .text: seen.append(.text)
                    case .ping(let p): seen.append(.ping(p))
                    case .pong: seen.append(.pong)
                    case .close(let p): seen.append(.close(p)); stopped = true; return false
                    case .violation: seen.append(.violation); stopped = true; return false
                    }
                    return true
                }
            }
        }
        if !data.isEmpty { seen.append(.data(data)) }
        return seen
    }

    @Test("frames of every length class parse the same whatever the read boundaries")
    func splitReads() {
        let big = (0..<70_000).map { UInt8($0 % 251) }
        let medium = (0..<300).map { UInt8($0 % 7) }
        let stream = serverFrame(0x2, [1, 2, 3]) + serverFrame(0x9, [9]) + serverFrame(0x2, medium, fin: false)
            + serverFrame(0x0, big) + serverFrame(0x2, []) + serverFrame(0xA, []) + serverFrame(0x8, [0x03, 0xE8])
        let expected: [Seen] = [.data([1, 2, 3]), .ping([9]), .data(medium + big), .pong, .close([0x03, 0xE8])]
        for step in [1, 2, 3, 7, 13, 100, 4096, stream.count] {
            #expect(read(stream, step: step) == expected, "step \(step)")
        }
    }

    @Test("text is reported and its payload skipped; masked, reserved-bit and bad continuation frames are violations")
    func refusals() {
        #expect(read(serverFrame(0x1, [65, 66]) + serverFrame(0x2, [7]), step: 1) == [.text, .data([7])])
        #expect(read([0x82, 0x81, 1, 2, 3, 4, 5], step: 100) == [.violation])
        #expect(read([0xC2, 0x00], step: 100) == [.violation])
        #expect(read(serverFrame(0x0, [1]), step: 100) == [.violation])
        #expect(read(serverFrame(0x9, [UInt8](repeating: 0, count: 126)), step: 100) == [.violation])
        #expect(read([0x83, 0x00], step: 100) == [.violation])
    }

    @Test("client frames: header, mask key and masked payload as RFC 6455 says, for every length class")
    func clientFrames() {
        for count in [0, 1, 5, 8, 15, 16, 17, 31, 33, 63, 64, 65, 71, 125, 126, 65_535, 65_536, 200_001] {
            let original = (0..<count).map { UInt8(($0 * 31 + 7) % 256) }
            let room = WebSocketFrames.maxClientHeader
            let buffer = UnsafeMutableRawPointer.allocate(byteCount: room + count, alignment: 1)
            defer { buffer.deallocate() }
            original.withUnsafeBytes { (buffer + room).copyMemory(from: $0.baseAddress!, byteCount: count) }
            let key: UInt32 = 0x1234_5678
            let start = WebSocketFrames.frameInPlace(opcode: 0x2, payload: buffer + room, count: count, maskKey: key)
            let frame = Array(UnsafeRawBufferPointer(start: start, count: buffer + room + count - start))
            #expect(frame[0] == 0x82)
            #expect(frame[1] & 0x80 == 0x80)
            var length = Int(frame[1] & 0x7F)
            var at = 2
            if length == 126 {
                length = Int(frame[2]) << 8 | Int(frame[3]); at = 4
            } else if length == 127 {
                length = 0
                for i in 2..<10 { length = length << 8 | Int(frame[i]) }
                at = 10
            }
            #expect(length == count)
            let maskBytes = Array(frame[at..<(at + 4)])
            var k = key
            #expect(maskBytes == withUnsafeBytes(of: &k) { Array($0) })
            let unmasked = frame[(at + 4)...].enumerated().map { $0.element ^ maskBytes[$0.offset & 3] }
            #expect(unmasked == original, "count \(count)")
        }
    }
}
