/// Turns a QR code printed in half blocks back into a PBM image that `zbarimg` can read: `█`
/// light over light, `▀` light over dark, `▄` dark over light, a space dark over dark (the light
/// modules are drawn). The code is framed in a wide light border and scaled ×4, as a
/// screenshot would be.
public func pbmImage(fromHalfBlocks lines: [String]) -> String {
    var rows: [[Bool]] = []   // true = dark
    for line in lines {
        var top: [Bool] = []
        var bottom: [Bool] = []
        for character in line {
            switch character {
            case "█": top.append(false); bottom.append(false)
            case "▀": top.append(false); bottom.append(true)
            case "▄": top.append(true); bottom.append(false)
            default: top.append(true); bottom.append(true)
            }
        }
        rows.append(top)
        rows.append(bottom)
    }
    let border = 4, scale = 4
    let columns = rows.map(\.count).max() ?? 0
    let width = (columns + 2 * border) * scale
    let height = (rows.count + 2 * border) * scale
    var pbm = "P1\n\(width) \(height)\n"
    for y in 0..<height {
        let row = y / scale - border
        var line: [String] = []
        for x in 0..<width {
            let column = x / scale - border
            let dark = rows.indices.contains(row) && rows[row].indices.contains(column) ? rows[row][column] : false
            line.append(dark ? "1" : "0")
        }
        pbm += line.joined(separator: " ") + "\n"
    }
    return pbm
}
