internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Keeps secrets held in memory (service-token secrets, tokens, passwords) out of core dumps
/// and out of reach of other processes of the same user (issue 12.10). A change of the whole
/// process, so it lives in the executable: the libraries never make it.
enum SecretMemory {
    /// Marks the process not dumpable (no core file; /proc/PID/mem and ptrace closed to
    /// processes without CAP_SYS_PTRACE) and sets the core size limit to 0. Returns false if the
    /// kernel refused either.
    @discardableResult
    static func protect() -> Bool {
        var limit = rlimit(rlim_cur: 0, rlim_max: 0)
        let limited = setrlimit(Int32(RLIMIT_CORE.rawValue), &limit) == 0
        return CCFShim_set_dumpable(0) == 0 && limited
    }
}
