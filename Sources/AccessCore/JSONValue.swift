import FoundationEssentials

/// A parsed JSON document: what the package reads from the JSON it is sent (JWT payloads, key
/// sets, opened transfers, lock files, the signing service's answers).
///
/// Parsed by FoundationEssentials' `JSONDecoder`, which accepts standard JSON (RFC 8259) only, as
/// `JSONSerialization` did before (issue 18.3: the shipped modules import FoundationEssentials,
/// not Foundation, whose internationalisation data made the tool four times bigger).
/// The accessors mirror what casting `JSONSerialization`'s result did (`as? String`, `as? [Any]`,
/// `as? NSNumber`): a number is a number whatever its spelling, a boolean is not a number.
package enum JSONValue: Sendable, Equatable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number that is a whole number within `Int64` (`12`, `1700000000000`, `1e3`).
    case integer(Int64)
    /// Any other number (`1.5`, `1e300`).
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object; with a repeated key, the decoder's choice of value.
    case object([String: JSONValue])

    /// The document in `bytes` (UTF-8 JSON), nil when it is not JSON.
    package static func parse(_ bytes: [UInt8]) -> JSONValue? {
        try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
    }

    /// The object in `bytes`, nil when they are not a JSON object.
    package static func object(_ bytes: [UInt8]) -> [String: JSONValue]? {
        parse(bytes)?.objectValue
    }

    /// The string, if this is one.
    package var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The elements, if this is an array.
    package var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members, if this is an object.
    package var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The number as a `Double`, if this is a number (not a boolean).
    package var doubleValue: Double? {
        switch self {
        case .integer(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    /// The number as a whole `Int64`, if this is a number (not a boolean); a fraction is
    /// dropped (NSNumber's `int64Value`), a number out of `Int64`'s range is nil.
    package var int64Value: Int64? {
        switch self {
        case .integer(let value): return value
        case .double(let value): return Int64(exactly: value.rounded(.towardZero))
        default: return nil
        }
    }

    /// The number as an `Int`, if it is exactly one (`as? Int` of an NSNumber): `2.5` is nil.
    package var exactInt: Int? {
        switch self {
        case .integer(let value): return Int(exactly: value)
        case .double(let value): return Int(exactly: value)
        default: return nil
        }
    }
}

extension JSONValue: Decodable {
    /// Decodes any JSON value: the decoder's own type checks tell the kinds apart.
    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }
}
