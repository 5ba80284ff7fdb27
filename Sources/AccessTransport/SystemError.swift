import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// An error of the operating system: an `errno` value, put into words in one place.
///
/// Every failed system call of the carrier, the listener and the file helpers is reported
/// through this type, so the wording (`strerror`) and the special cases (out of descriptors)
/// are decided once.
package struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `errno` value.
    package let code: Int32
    /// The call that failed (`"socket()"`), if it is worth naming.
    package let operation: String?

    /// The error `code`, from `operation` if given.
    package init(_ code: Int32, operation: String? = nil) {
        self.code = code
        self.operation = operation
    }

    /// The error in `errno` now, from `operation` if given. Read it right after the failed call.
    package static func current(_ operation: String? = nil) -> SystemError {
        SystemError(errno, operation: operation)
    }

    /// The system's words for the code (`strerror`), e.g. "Connection refused".
    package var text: String { String(cString: strerror(code)) }

    /// `operation: text`, or the text alone.
    package var description: String {
        guard let operation else { return text }
        return operation + ": " + text
    }

    /// The process or the system has no file descriptor left (`EMFILE`, `ENFILE`).
    package var isOutOfDescriptors: Bool { code == EMFILE || code == ENFILE }

    /// A call that would block (`EAGAIN`, `EWOULDBLOCK`).
    package var wouldBlock: Bool { code == EAGAIN || code == EWOULDBLOCK }

    /// This error as a tunnel failure: out of descriptors said with the limit, anything else as
    /// our bug (a call that should not fail).
    package var tunnelFailure: TunnelFailure {
        if isOutOfDescriptors { return .outOfFileDescriptors(limit: FileDescriptors.limit, what: description) }
        return .internalError(description)
    }
}
