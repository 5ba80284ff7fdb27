import AccessCore
import FoundationEssentials
import Glibc

/// Process start times from `/proc`, for the login lock's pid-reuse check.
package enum ProcessStartTime {
    /// The start time of process `pid` in milliseconds since 1970, or nil when no such
    /// process runs (a zombie counts as gone). Linux: `/proc/<pid>/stat` field 22 (clock
    /// ticks since boot) plus `btime` of `/proc/stat`.
    package static func milliseconds(pid: Int32) -> Int64? {
        guard pid > 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after "comm)" start with field 3 (state).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, fields[0] != "Z", fields[0] != "X", let ticks = Int64(fields[19]) else { return nil }
        guard let boot = bootTimeSeconds else { return nil }
        let hertz = Int64(sysconf(Int32(_SC_CLK_TCK)))
        guard hertz > 0 else { return nil }
        return boot * 1000 + ticks * 1000 / hertz
    }

    /// This process's start time in milliseconds since 1970.
    package static var current: Int64 {
        milliseconds(pid: getpid()) ?? Int64(Date().timeIntervalSince1970 * 1000)
    }

    private static let bootTimeSeconds: Int64? = {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Int64(line.dropFirst(6).trimmingHorizontalWhitespace)
        }
        return nil
    }()
}
