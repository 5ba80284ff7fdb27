import AccessCore
import Foundation

/// The real clock: `Date()` and `Task.sleep`.
public struct SystemWallClock: WallClock {
    /// Creates the clock.
    public init() {}
    /// `Date()`.
    public func now() -> Date { Date() }
    /// `Task.sleep`; false when cancelled.
    public func sleep(seconds: Double) async -> Bool {
        do {
            try await Task.sleep(nanoseconds: UInt64(max(0, seconds) * 1_000_000_000))
            return true
        } catch {
            return false
        }
    }
}
