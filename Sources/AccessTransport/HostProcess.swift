internal import CCFWebSockets
internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// What the carrier does about process-wide state: as little as possible, and nothing a host
/// that configured it would see (reference/DECISIONS.md, "The library leaves the host process
/// alone").
enum HostProcess {
    /// Runs `body` and puts SIGPIPE's disposition back as it was: libwebsockets 4.1.6 sets it to
    /// `SIG_IGN` each time it creates a context (`lws_plat_context_early_init`), a change of the
    /// host process the library must not make.
    static func keepingSIGPIPE<R>(_ body: () -> R) -> R {
        var old = sigaction()
        let saved = sigaction(SIGPIPE, nil, &old) == 0
        let result = body()
        if saved { _ = sigaction(SIGPIPE, &old, nil) }
        return result
    }

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

    /// libwebsockets' built-in log level (errors, warnings, notices, all on stderr).
    private static let lwsDefaultLevel = Int32(LLL_ERR | LLL_WARN | LLL_NOTICE)

    /// Drops libwebsockets' notices (two lines on stderr for every context it creates) only while
    /// its log level is still its built-in default, i.e. nobody in the process configured it. The
    /// emitter is left alone: a host that routed libwebsockets' log keeps its routing and level.
    static func quietenLibWebSocketsNotices() {
        var visible: Int32 = 0
        for shift in 0..<Int32(LLL_COUNT) where lwsl_visible(1 << shift) != 0 {
            visible |= 1 << shift
        }
        guard visible == lwsDefaultLevel else { return }
        lws_set_log_level(Int32(LLL_ERR | LLL_WARN), nil)
    }
}
