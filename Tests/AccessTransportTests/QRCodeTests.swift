import AccessTestSupport
import AccessTransport
import Foundation
import Testing

/// The device-mode QR code decodes (with zbarimg, from Debian's zbar-tools) to the exact URL,
/// both from the PBM writer and from the half-block text printed on stderr.
@Suite("QR code")
struct QRCodeTests {
    static let url = "https://ssh.example.com/cdn-cgi/access/cli?aud=4714b2b5b0e5aa1cc6f61f3a5d5b7e1bd0e37a5a0ba5e8e2b4d1c1c8f2f5a9d1"
        + "&edge_token_transfer=true&redirect_url=https%3A%2F%2Fssh.example.com%2F%3Faud%3Dx%26token%3Dabc%253D"
        + "&send_org_token=true&token=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmE%3D"

    static func zbar(_ pbm: String) throws -> String {
        let temp = TemporaryDirectory()
        defer { temp.remove() }
        let path = temp.path + "/code.pbm"
        try pbm.write(toFile: path, atomically: true, encoding: .ascii)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/zbarimg")
        process.arguments = ["--raw", "-q", path]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines)
    }

    @Test func pbmDecodesToTheURL() throws {
        let code = try #require(QRCode(encoding: Self.url))
        #expect(try Self.zbar(code.pbm()) == Self.url)
    }

    /// The half blocks printed on stderr, turned back into an image, decode to the URL.
    @Test func printedHalfBlocksDecodeToTheURL() throws {
        let code = try #require(QRCode(encoding: Self.url))
        let pbm = pbmImage(fromHalfBlocks: code.halfBlockLines(quietZone: 2))
        #expect(try Self.zbar(pbm) == Self.url)
    }
}
