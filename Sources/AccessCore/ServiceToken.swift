/// Access service token credentials (a client ID and secret), sent as `Cf-Access-Client-Id`
/// and `Cf-Access-Client-Secret`.
///
/// `description`, `debugDescription` and reflection (`dump`, `String(reflecting:)`) never
/// show the secret, and show only the start of the client ID.
public struct ServiceToken: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The Client ID (`Cf-Access-Client-Id`), e.g. `1a2b….access`.
    public let clientID: String
    /// The Client Secret (`Cf-Access-Client-Secret`). Never print or log it.
    public let clientSecret: String

    /// Checks and stores a service token.
    ///
    /// Surrounding white space (including a trailing newline from a file or a paste) is
    /// trimmed from both. Each must then be non-empty and free of line breaks and other
    /// control characters. Error messages never show either value.
    public init(clientID: String, clientSecret: String) throws(ConfigurationError) {
        let id = clientID.trimmingWhitespace
        let secret = clientSecret.trimmingWhitespace
        try Self.check(id, setting: .serviceTokenID, what: "Client ID", source: .serviceTokenIDSource)
        try Self.check(secret, setting: .serviceTokenSecret, what: "Client Secret", source: .serviceTokenSecretSource)
        self.clientID = id
        self.clientSecret = secret
    }

    private static func check(_ value: String, setting: ConfigurationError.Setting, what: String,
                              source: ConfigurationError.Setting) throws(ConfigurationError) {
        guard !value.isEmpty else {
            throw ConfigurationError(
                "\(setting.placeholder) is empty: give the service token's \(what)\(source.placeholder)")
        }
        if value.unicodeScalars.contains(where: { $0.isLineBreak || $0.isControl }) {
            throw ConfigurationError(
                "\(setting.placeholder) contains a line break or control character: give the service token's \(what) on one line")
        }
    }

    /// The first characters of the client ID followed by "…": enough to tell tokens apart.
    public var redactedClientID: String {
        let scalars = clientID.scalarArray
        guard scalars.count > 8 else { return "[redacted]" }
        return String(scalars: scalars.prefix(6)) + "…"
    }

    /// `ServiceToken(clientID: 1a2b3c…, clientSecret: [redacted])`.
    public var description: String {
        "ServiceToken(clientID: \(redactedClientID), clientSecret: [redacted])"
    }

    /// Same as `description`.
    public var debugDescription: String { description }

    /// Reflection with both values redacted.
    public var customMirror: Mirror {
        Mirror(self, children: ["clientID": redactedClientID, "clientSecret": "[redacted]"], displayStyle: .struct)
    }
}
