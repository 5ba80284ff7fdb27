/// TCP port parsing shared by the parsers.
enum Port {
    /// Parses decimal digits only (no sign, no spaces) into `range`.
    /// `flag` and `shown` (the quoted input) name the option in messages.
    static func parse(_ scalars: [Unicode.Scalar], range: ClosedRange<Int>, flag: String, shown: String) throws(ConfigurationError) -> Int {
        guard !scalars.isEmpty else {
            throw ConfigurationError("\(flag) \(shown) has an empty port after \":\": give a port number \(range.lowerBound)-\(range.upperBound) or leave out the \":\"")
        }
        let text = Display.quoted(String(scalars: scalars), limit: 20)
        guard scalars.allSatisfy(\.isASCIIDigit) else {
            throw ConfigurationError("\(flag) \(shown) has port \(text), which is not a number: give a port \(range.lowerBound)-\(range.upperBound)")
        }
        let digits = scalars.drop { $0 == "0" }
        guard digits.count <= 5 else {
            throw ConfigurationError("\(flag) \(shown) has port \(text), which is out of range: give a port \(range.lowerBound)-\(range.upperBound)")
        }
        let value = digits.reduce(0) { $0 * 10 + Int($1.value - 0x30) }
        guard range.contains(value) else {
            throw ConfigurationError("\(flag) \(shown) has port \(value), which is out of range: give a port \(range.lowerBound)-\(range.upperBound)")
        }
        return value
    }
}
