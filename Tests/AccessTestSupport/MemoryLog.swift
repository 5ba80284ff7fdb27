import Foundation
import Logging

/// Log records kept in memory — the test double of swift-log — to check what was said, and
/// that no secret ever was.
public final class MemoryLog: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [String] = []

    /// An empty log.
    public init() {}

    /// Every record so far: level, message and metadata (`key=value`, sorted) on one line.
    public var lines: [String] {
        lock.lock()
        defer { lock.unlock() }
        return records
    }

    /// Adds one record.
    public func append(_ line: String) {
        lock.lock()
        records.append(line)
        lock.unlock()
    }

    /// A logger at trace level writing here.
    public var logger: Logger {
        Logger(label: "test") { _ in MemoryLogHandler(log: self) }
    }
}

/// The handler behind ``MemoryLog/logger``.
public struct MemoryLogHandler: LogHandler {
    /// Where records go.
    public let log: MemoryLog
    /// Trace by default: tests look at every level.
    public var logLevel: Logger.Level = .trace
    /// Handler metadata.
    public var metadata: Logger.Metadata = [:]

    /// A handler writing to `log`.
    public init(log: MemoryLog) { self.log = log }

    /// Handler metadata by key.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Records one line.
    public func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        log.append("\(event.level) \(event.message) \(fields)")
    }
}
