// Strict textual IP address parsing and formatting, without the C library.

/// An IPv4 address in dotted-quad form.
struct IPv4Address: Equatable {
    /// The four octets, most significant first.
    let octets: [UInt8]

    /// Parses exactly four decimal parts, each 0...255, without leading zeros (so "010"
    /// can never be mistaken for octal) and without signs or spaces.
    init?(_ text: String) {
        self.init(scalars: text.scalarArray)
    }

    /// Same as `init?(_:)` on scalars.
    init?(scalars: [Unicode.Scalar]) {
        let parts = scalars.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var octets: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(\.isASCIIDigit) else { return nil }
            if part.count > 1 && part.first == "0" { return nil }
            let value = part.reduce(0) { $0 * 10 + Int($1.value - 0x30) }
            guard value <= 255 else { return nil }
            octets.append(UInt8(value))
        }
        self.octets = octets
    }

    /// Dotted-quad text.
    var text: String { octets.map { String($0) }.joined(separator: ".") }

    /// 127.0.0.0/8.
    var isLoopback: Bool { octets[0] == 127 }
}

/// An IPv6 address.
struct IPv6Address: Equatable {
    /// The eight 16-bit groups, most significant first.
    let groups: [UInt16]


    /// Same as `init?(_:)` on scalars.
    init?(scalars: [Unicode.Scalar]) {
        guard scalars.count >= 2, scalars.count <= 45 else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var sawDoubleColon = false

        if let gap = scalars.firstIndex(ofSequence: "::") {
            sawDoubleColon = true
            let before = Array(scalars[..<gap])
            let after = Array(scalars[(gap + 2)...])
            guard after.firstIndex(ofSequence: "::") == nil else { return nil }
            if !before.isEmpty {
                guard let groups = Self.groups(before, allowIPv4Tail: false) else { return nil }
                head = groups
            }
            if !after.isEmpty {
                guard let groups = Self.groups(after, allowIPv4Tail: true) else { return nil }
                tail = groups
            }
            // "::" stands for at least one zero group.
            guard head.count + tail.count <= 7 else { return nil }
        } else {
            guard let groups = Self.groups(scalars, allowIPv4Tail: true), groups.count == 8 else { return nil }
            head = groups
        }

        if sawDoubleColon {
            let zeros = [UInt16](repeating: 0, count: 8 - head.count - tail.count)
            groups = head + zeros + tail
        } else {
            groups = head
        }
    }

    /// Parses colon-separated groups; the last part may be a dotted quad (two groups).
    private static func groups(_ scalars: [Unicode.Scalar], allowIPv4Tail: Bool) -> [UInt16]? {
        let parts = scalars.split(separator: ":", omittingEmptySubsequences: false)
        var result: [UInt16] = []
        for (index, part) in parts.enumerated() {
            if allowIPv4Tail && index == parts.count - 1 && part.contains(".") {
                guard let v4 = IPv4Address(scalars: Array(part)) else { return nil }
                result.append(UInt16(v4.octets[0]) << 8 | UInt16(v4.octets[1]))
                result.append(UInt16(v4.octets[2]) << 8 | UInt16(v4.octets[3]))
                continue
            }
            guard (1...4).contains(part.count), part.allSatisfy(\.isASCIIHexDigit) else { return nil }
            let value = part.reduce(0) { $0 * 16 + Int(hexValue($1)) }
            result.append(UInt16(value))
        }
        return result.count <= 8 ? result : nil
    }

    private static func hexValue(_ scalar: Unicode.Scalar) -> UInt32 {
        switch scalar.value {
        case 0x30...0x39: return scalar.value - 0x30
        case 0x41...0x46: return scalar.value - 0x41 + 10
        default: return scalar.value - 0x61 + 10
        }
    }

    /// RFC 5952 canonical text: lower-case hex, no leading zeros, the longest run (two or more)
    /// of zero groups shortened to `::` (the first such run on a tie).
    var text: String {
        var bestStart = -1
        var bestLength = 0
        var index = 0
        while index < 8 {
            if groups[index] == 0 {
                var end = index
                while end < 8 && groups[end] == 0 { end += 1 }
                if end - index > bestLength {
                    bestStart = index
                    bestLength = end - index
                }
                index = end
            } else {
                index += 1
            }
        }
        let hex = { (group: UInt16) in String(group, radix: 16) }
        guard bestLength >= 2 else { return groups.map(hex).joined(separator: ":") }
        let before = groups[..<bestStart].map(hex).joined(separator: ":")
        let after = groups[(bestStart + bestLength)...].map(hex).joined(separator: ":")
        return before + "::" + after
    }

    /// `::1`.
    var isLoopback: Bool { groups == [0, 0, 0, 0, 0, 0, 0, 1] }

    /// `::ffff:a.b.c.d`: the IPv4 address it maps, if it is one.
    var mappedIPv4: IPv4Address? {
        guard groups[0..<5].allSatisfy({ $0 == 0 }), groups[5] == 0xFFFF else { return nil }
        let text = "\(groups[6] >> 8).\(groups[6] & 0xFF).\(groups[7] >> 8).\(groups[7] & 0xFF)"
        return IPv4Address(text)
    }
}
