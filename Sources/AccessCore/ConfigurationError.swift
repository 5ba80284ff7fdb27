/// A problem with what the user gave us (flags, environment, headers): one line that says
/// what is wrong and what to do. It never holds a secret: the parsers that throw it name
/// the problem, not the secret value.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The one-line message for people.
    public let message: String

    /// The message.
    public var description: String { message }

    /// Makes an error with `message`, kept on one line (line breaks become spaces).
    public init(_ message: String) {
        self.message = Display.oneLine(message)
    }
}
