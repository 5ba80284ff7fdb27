/// Punycode (RFC 3492): the Bootstring encoding that IDNA uses to carry a Unicode host-name
/// label in ASCII (the part after `xn--`).
///
/// This is the bare algorithm on one label. It neither lower-cases nor adds the `xn--`
/// prefix; `OriginURL.parse` does the IDNA steps around it. Basic (ASCII) code points are
/// copied unchanged, so the case of ASCII letters is kept, as RFC 3492 §7.1 shows.
package enum Punycode {
    // RFC 3492 §5, parameter values for Punycode.
    private static let base = 36
    private static let tMin = 1
    private static let tMax = 26
    private static let skew = 38
    private static let damp = 700
    private static let initialBias = 72
    private static let initialN = 128
    private static let delimiter: Unicode.Scalar = "-"
    /// Arithmetic above this is an overflow (RFC 3492 §6.4 assumes at least 26-bit integers;
    /// we allow what a signed 32-bit integer holds, like the reference implementation).
    private static let maxValue = Int(Int32.max)

    /// Encodes `input` (one label, any case) to Punycode.
    ///
    /// - Returns: the encoded ASCII text, or `nil` if the input is too long to encode
    ///   (integer overflow, RFC 3492 §6.4).
    package static func encode(_ input: String) -> String? {
        encode(scalars: input.scalarArray)
    }

    /// Encodes a sequence of Unicode scalars to Punycode; `nil` on overflow.
    package static func encode(scalars input: [Unicode.Scalar]) -> String? {
        let codePoints = input.map { Int($0.value) }
        var output = String.UnicodeScalarView()
        for scalar in input where scalar.isASCII {
            output.append(scalar)
        }
        let basicCount = output.count
        var handled = basicCount
        if basicCount > 0 {
            output.append(delimiter)
        }

        var n = initialN
        var delta = 0
        var bias = initialBias
        while handled < codePoints.count {
            // The smallest code point not yet handled.
            var next = Int.max
            for code in codePoints where code >= n && code < next {
                next = code
            }
            let step = next - n
            guard step <= (maxValue - delta) / (handled + 1) else { return nil }
            delta += step * (handled + 1)
            n = next
            for code in codePoints {
                if code < n {
                    delta += 1
                    guard delta <= maxValue else { return nil }
                }
                guard code == n else { continue }
                // Emit delta as a generalized variable-length integer.
                var q = delta
                var k = base
                while true {
                    let t = threshold(k: k, bias: bias)
                    if q < t { break }
                    output.append(digit(t + (q - t) % (base - t)))
                    q = (q - t) / (base - t)
                    k += base
                }
                output.append(digit(q))
                bias = adapt(delta: delta, pointCount: handled + 1, isFirst: handled == basicCount)
                delta = 0
                handled += 1
            }
            delta += 1
            n += 1
        }
        return String(output)
    }

    /// Decodes Punycode text (without the `xn--` prefix) back to Unicode.
    ///
    /// - Returns: the decoded text, or `nil` if `input` is not valid Punycode (a non-ASCII
    ///   basic part, a bad digit, a truncated number, overflow, or a code point that is not
    ///   a Unicode scalar).
    package static func decode(_ input: String) -> String? {
        let scalars = input.scalarArray
        var output: [Unicode.Scalar] = []
        var position = 0
        if let last = scalars.lastIndex(of: delimiter) {
            for scalar in scalars[..<last] {
                guard scalar.isASCII else { return nil }
                output.append(scalar)
            }
            position = last + 1
        }

        var n = initialN
        var i = 0
        var bias = initialBias
        while position < scalars.count {
            let oldI = i
            var weight = 1
            var k = base
            while true {
                guard position < scalars.count, let d = digitValue(scalars[position]) else { return nil }
                position += 1
                guard d <= (maxValue - i) / weight else { return nil }
                i += d * weight
                let t = threshold(k: k, bias: bias)
                if d < t { break }
                guard weight <= maxValue / (base - t) else { return nil }
                weight *= base - t
                k += base
            }
            let length = output.count + 1
            bias = adapt(delta: i - oldI, pointCount: length, isFirst: oldI == 0)
            guard i / length <= maxValue - n else { return nil }
            n += i / length
            i %= length
            guard n >= initialN, let scalar = Unicode.Scalar(UInt32(n)) else { return nil }
            output.insert(scalar, at: i)
            i += 1
        }
        return String(scalars: output)
    }

    /// RFC 3492 §6.1: the bias adaptation function.
    private static func adapt(delta: Int, pointCount: Int, isFirst: Bool) -> Int {
        var delta = isFirst ? delta / damp : delta / 2
        delta += delta / pointCount
        var k = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + ((base - tMin + 1) * delta) / (delta + skew)
    }

    /// The threshold t for the digit at position k, clamped to tmin...tmax.
    private static func threshold(k: Int, bias: Int) -> Int {
        if k <= bias { return tMin }
        if k >= bias + tMax { return tMax }
        return k - bias
    }

    /// 0...25 → "a"..."z", 26...35 → "0"..."9".
    private static func digit(_ value: Int) -> Unicode.Scalar {
        let code = value < 26 ? 0x61 + value : 0x30 + value - 26
        return Unicode.Scalar(UInt8(code))
    }

    /// The inverse of `digit`, accepting either letter case.
    private static func digitValue(_ scalar: Unicode.Scalar) -> Int? {
        switch scalar.value {
        case 0x30...0x39: return Int(scalar.value) - 0x30 + 26
        case 0x41...0x5A: return Int(scalar.value) - 0x41
        case 0x61...0x7A: return Int(scalar.value) - 0x61
        default: return nil
        }
    }
}
