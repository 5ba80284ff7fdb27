import FoundationEssentials

/// The content of a `<token path>.lock` file: `{"pid":…,"start_time":…}` (PROTOCOL.md §3).
package struct LoginLockRecord: Sendable, Equatable {
    /// The holder's process id.
    package let pid: Int32
    /// The holder's start time, milliseconds since 1970.
    package let startTimeMilliseconds: Int64

    /// Creates a record.
    package init(pid: Int32, startTimeMilliseconds: Int64) {
        self.pid = pid
        self.startTimeMilliseconds = startTimeMilliseconds
    }

    /// `{"pid":123,"start_time":1700000000000}`.
    package var json: String { "{\"pid\":\(pid),\"start_time\":\(startTimeMilliseconds)}" }

    /// Parses the JSON written by `json` (or cloudflared); nil for anything else.
    package static func parse(_ bytes: [UInt8]) -> LoginLockRecord? {
        guard let object = JSONValue.object(bytes),
              let pid = object["pid"]?.int64Value, let start = object["start_time"]?.int64Value,
              pid > 0, pid <= Int64(Int32.max), start > 0 else { return nil }
        return LoginLockRecord(pid: Int32(pid), startTimeMilliseconds: start)
    }
}

/// Whether an existing lock file still belongs to a live login (PROTOCOL.md §3).
package enum LoginLockRules {
    /// A lock older than this is stale whatever it says.
    package static let maximumAge: TimeInterval = 10 * 60
    /// The holder's start time may differ by this much (clock granularity).
    package static let startTimeToleranceMilliseconds: Int64 = 1000

    /// The verdict on a lock file.
    package enum Verdict: Sendable, Equatable {
        /// A live process holds it: wait.
        case held(pid: Int32)
        /// Remove it and take the lock; the reason is for an info line.
        case stale(String)
    }

    /// - Parameters:
    ///   - content: the file's bytes, or nil if it could not be read.
    ///   - modifiedAt: the file's modification time.
    ///   - now: the current time.
    ///   - startTimeOfProcess: the start time (ms) of a live process, nil if none has that pid.
    /// Stale when unreadable or not a lock record, older than 10 min, its process is gone,
    /// or that pid now belongs to a process started at another time (pid reuse, ±1 s).
    package static func verdict(content: [UInt8]?, modifiedAt: Date, now: Date,
                               startTimeOfProcess: (Int32) -> Int64?) -> Verdict {
        guard let content, let record = LoginLockRecord.parse(content) else {
            return .stale("its content is unreadable")
        }
        if now.timeIntervalSince(modifiedAt) > maximumAge {
            return .stale("it is older than 10 minutes")
        }
        guard let start = startTimeOfProcess(record.pid) else {
            return .stale("process \(record.pid) is gone")
        }
        if abs(start - record.startTimeMilliseconds) > startTimeToleranceMilliseconds {
            return .stale("process \(record.pid) is another process than the one that took it")
        }
        return .held(pid: record.pid)
    }
}
