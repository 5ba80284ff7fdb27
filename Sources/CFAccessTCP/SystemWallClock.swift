import AccessCore
import FoundationEssentials

/// The real clock: `Date()` and `Task.sleep`.
public struct SystemWallClock: WallClock {
    /// Creates the clock.
    public init() {}
    /// `Date()`.
    public func now() -> Date { Date() }
    /// `Task.sleep(for:)` on the continuous clock; false (at once) when the task is cancelled.
    public func sleep(for duration: Duration) async -> Bool {
        do {
            try await Task.sleep(for: duration)
            return true
        } catch {
            return false
        }
    }
}
