/// A problem with a value given to the library (a hostname, an address, a header): one line
/// that says what is wrong and what to do. It never holds a secret: the parsers that throw it
/// name the problem, not the secret value.
///
/// The message names the setting at fault in words ("the hostname is empty: …"); a command
/// line names it by its own flag instead with ``message(naming:)`` and ``Setting``.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A setting a message names: in words by the library, by a flag or field name by whoever
    /// shows the message (``ConfigurationError/message(naming:)``).
    public struct Setting: Sendable, Hashable, CustomStringConvertible {
        /// A stable name (`"hostname"`, `"listen-address"`, …), fit for a lookup table.
        public let name: String
        /// The setting in words, as the library's messages say it ("the hostname").
        public let words: String

        init(_ name: String, _ words: String) {
            self.name = name
            self.words = words
        }

        /// The words.
        public var description: String { words }

        /// The Access application's hostname (``OriginURL``).
        public static let hostname = Setting("hostname", "the hostname")
        /// The local address to listen on (``ListenAddress``).
        public static let listenAddress = Setting("listen-address", "the listen address")
        /// The way to allow a listen address that is not loopback (an instruction).
        public static let allowNonLoopback = Setting("allow-non-loopback", "allow a non-loopback address explicitly")
        /// Another address to dial (``ConnectTarget``).
        public static let connectTarget = Setting("connect-target", "the connect-to address")
        /// A `HOST:PORT:ADDRESS` override (``ResolveOverride``).
        public static let resolveOverride = Setting("resolve-override", "the resolve override")
        /// An extra request header (``HeaderField``).
        public static let header = Setting("header", "the header")
        /// The service token's client ID (``ServiceToken``).
        public static let serviceTokenID = Setting("service-token-id", "the service token's client ID")
        /// The service token's client secret (``ServiceToken``).
        public static let serviceTokenSecret = Setting("service-token-secret", "the service token's client secret")
        /// Where else the client ID may come from (nothing in words; a command line may name an
        /// environment variable).
        public static let serviceTokenIDSource = Setting("service-token-id-source", "")
        /// Where else the client secret may come from (as ``serviceTokenIDSource``).
        public static let serviceTokenSecretSource = Setting("service-token-secret-source", "")
        /// The `Cf-Access-Jump-Destination` host:port.
        public static let destination = Setting("destination", "the destination")
        /// The pinned public keys of the edge (``PublicKeyPin``).
        public static let pins = Setting("pins", "the pinned keys")

        static let all: [Setting] = [
            .hostname, .listenAddress, .allowNonLoopback, .connectTarget, .resolveOverride, .header,
            .serviceTokenID, .serviceTokenSecret, .serviceTokenIDSource, .serviceTokenSecretSource, .destination, .pins,
        ]

        /// What a message template holds where this setting is named.
        package var placeholder: String { "\u{E000}\(name)\u{E001}" }
    }

    /// The one-line message for people, the settings in words.
    public let message: String
    /// The settings the message names, in order.
    public let settings: [Setting]
    /// The message with placeholders where settings are named.
    private let template: String

    /// The message.
    public var description: String { message }

    /// Makes an error with `message`, kept on one line (line breaks become spaces). A setting's
    /// ``Setting/placeholder`` in it is said in words.
    public init(_ message: String) {
        let template = Display.oneLine(message)
        self.template = template
        settings = Setting.all
            .compactMap { setting in template.firstRange(of: setting.placeholder).map { (setting, $0.lowerBound) } }
            .sorted { $0.1 < $1.1 }
            .map(\.0)
        self.message = Self.render(template) { $0.words }
    }

    /// The message with each setting named by `name` — a command line's flag, for instance.
    public func message(naming name: (Setting) -> String) -> String {
        Self.render(template, name)
    }

    private static func render(_ template: String, _ name: (Setting) -> String) -> String {
        var text = template
        for setting in Setting.all where text.contains(setting.placeholder) {
            text = text.replacing(setting.placeholder, with: name(setting))
        }
        // A setting said in no words leaves no double space.
        return Display.oneLine(text)
    }

    /// Two errors are equal when their messages are.
    public static func == (lhs: ConfigurationError, rhs: ConfigurationError) -> Bool {
        lhs.message == rhs.message
    }
}
