internal import CCFQREncode

/// A QR code of a URL, encoded by libqrencode, for device mode: printed on stderr with
/// Unicode half blocks so a phone can finish the login.
package struct QRCode: Sendable, Equatable {
    /// Modules per side (without the quiet zone).
    package let size: Int
    /// Row-major, true = dark module.
    private let modules: [Bool]

    /// Encodes `text` (byte mode, error correction level L, smallest version that fits);
    /// nil if libqrencode refuses it (e.g. too long).
    package init?(encoding text: String) {
        guard let code = QRcode_encodeString(text, 0, QR_ECLEVEL_L, QR_MODE_8, 1) else { return nil }
        defer { QRcode_free(code) }
        let width = Int(code.pointee.width)
        guard width > 0, let data = code.pointee.data else { return nil }
        size = width
        modules = (0..<(width * width)).map { data[$0] & 1 == 1 }
    }

    /// Whether the module at column `x`, row `y` is dark; outside the symbol is light.
    package func isDark(x: Int, y: Int) -> Bool {
        guard (0..<size).contains(x), (0..<size).contains(y) else { return false }
        return modules[y * size + x]
    }

    /// Lines of text, two module rows per line, with `quietZone` light modules around.
    ///
    /// Light modules are drawn (`█`, `▀` upper light, `▄` lower light), dark ones are
    /// spaces: on the usual dark terminal the code shows dark on light, as scanners expect.
    package func halfBlockLines(quietZone: Int = 2) -> [String] {
        let range = -quietZone..<(size + quietZone)
        var lines: [String] = []
        var y = -quietZone
        while y < size + quietZone {
            var line = ""
            for x in range {
                let top = !isDark(x: x, y: y)
                // Below the last row the terminal background (dark) shows.
                let bottom = y + 1 < size + quietZone ? !isDark(x: x, y: y + 1) : false
                switch (top, bottom) {
                case (true, true): line += "█"
                case (true, false): line += "▀"
                case (false, true): line += "▄"
                case (false, false): line += " "
                }
            }
            lines.append(line)
            y += 2
        }
        return lines
    }

    /// A plain PBM (P1) image, `scale` pixels per module, 1 = dark, with `quietZone`
    /// light modules around: for tests that decode it with `zbarimg`.
    package func pbm(quietZone: Int = 4, scale: Int = 4) -> String {
        let side = (size + 2 * quietZone) * scale
        var out = "P1\n\(side) \(side)\n"
        for row in 0..<side {
            let y = row / scale - quietZone
            var line: [String] = []
            line.reserveCapacity(side)
            for column in 0..<side {
                line.append(isDark(x: column / scale - quietZone, y: y) ? "1" : "0")
            }
            out += line.joined(separator: " ") + "\n"
        }
        return out
    }
}
