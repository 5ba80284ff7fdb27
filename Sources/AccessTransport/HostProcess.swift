internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// What the carrier does about process-wide state: as little as possible, and nothing a host
/// that configured it would see (reference/DECISIONS.md, "The library leaves the host process
/// alone").
enum HostProcess {
    /// Blocks SIGPIPE in the calling thread only (the carrier's own thread): a write to a socket
    /// whose peer is gone then fails with EPIPE instead of raising the signal, whatever the
    /// process's disposition. OpenSSL writes without `MSG_NOSIGNAL`, so this is what keeps a reset
    /// edge from killing a host that did not ignore SIGPIPE.
    static func blockSIGPIPEInThisThread() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        _ = pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// The cores this process may run on: its CPU affinity mask (`taskset`, systemd's
    /// `CPUAffinity=`), else the online processors; at least 1.
    static func availableCores() -> Int {
        // Room for 8,192 CPUs; the kernel says how many bytes of it it filled.
        var mask = [UInt8](repeating: 0, count: 1024)
        let filled = mask.withUnsafeMutableBytes { CCFShim_sched_getaffinity($0.baseAddress, $0.count) }
        if filled > 0 {
            let count = mask.prefix(Int(filled)).reduce(0) { $0 + $1.nonzeroBitCount }
            if count > 0 { return count }
        }
        return max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}
