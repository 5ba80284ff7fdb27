import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// Running out of file descriptors, told plainly (issue 12.6) instead of as a bug.
public enum FileDescriptors {
    /// The soft limit on open files, if known.
    public static var limit: Int? {
        var value = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &value) == 0, value.rlim_cur != rlim_t.max, value.rlim_cur <= rlim_t(Int.max) else { return nil }
        return Int(value.rlim_cur)
    }

    /// The failure to report if no socket can be made now for lack of descriptors, else nil.
    public static func exhausted() -> TunnelFailure? {
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if probe >= 0 {
            close(probe)
            return nil
        }
        let code = errno
        guard code == EMFILE || code == ENFILE else { return nil }
        return .outOfFileDescriptors(limit: limit, what: "socket(): \(String(cString: strerror(code)))")
    }
}
