internal import CCFOpenSSL
internal import CCFShim
import AccessTransport
#if canImport(Glibc)
import Glibc
#endif

/// What the executable, and only the executable, changes in its own process for the libraries
/// it links (the libraries themselves leave the host process alone: reference/DECISIONS.md).
enum ToolProcess {
    /// Sets up OpenSSL for this process: call it first thing in every command, before any tunnel
    /// or HTTPS request.
    static func prepare() {
        _ = openSSLWithoutExitCleanup
    }

    /// OpenSSL without its exit-time cleanup (`OPENSSL_INIT_NO_ATEXIT`): the process may exit
    /// while the carrier's thread, libcurl or a finishing thread still uses OpenSSL, and freeing
    /// its global state under them corrupts the heap. The first initialisation decides, so this
    /// runs before any other OpenSSL call of the process.
    private static let openSSLWithoutExitCleanup: Bool = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1

    /// Below this many descriptors the tool does not start: stdin, stdout, stderr and
    /// libdispatch's own (its event loop, its wake-up, the main queue's handle) leave at most one,
    /// and libdispatch aborts (SIGILL) when its thread monitor or the main thread's exit finds no
    /// descriptor free, which under `ulimit -n 6` happened in one start in five.
    static let minimumDescriptors = 8

    /// Ends the process with the usual "Too many open files" line and 74 when the limit is below
    /// ``minimumDescriptors``, before libdispatch needs more of them. Call it first thing.
    /// A standard descriptor (0, 1, 2) the tool was started without is opened on /dev/null, as
    /// ssh's `sanitise_stdfd` does: otherwise the first socket or file the tool opens would take
    /// its number, and a line meant for stderr, or a command's output, would be written into it.
    /// Call it first thing.
    static func sanitiseStandardDescriptors() {
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 && errno == EBADF {
            let null = open("/dev/null", O_RDWR)
            if null >= 0 && null != fd {
                _ = dup2(null, fd)
                close(null)
            }
        }
    }

    /// Points stdin and stdout at /dev/null, once the carrier serves duplicates of them
    /// (stdio mode): the carrier's are then the only descriptors of ssh's pipes in the process,
    /// so ssh reads the end as soon as the tunnel closes them, and nothing else in the process
    /// can ever write into its stream.
    static func detachStandardInputAndOutput() {
        let null = open("/dev/null", O_RDWR | O_CLOEXEC)
        guard null >= 0 else { return }
        _ = dup2(null, STDIN_FILENO)
        _ = dup2(null, STDOUT_FILENO)
        close(null)
    }

    /// The most descriptors a listener asks for: two per connection (the local socket and the
    /// edge's), so about 32,000 connections. Nothing in the carrier needs more, and a process we
    /// start inherits the soft limit (one that closes its descriptors one by one at start, as some
    /// do, pays for a large one).
    static let listenerDescriptorCap = 65_536

    /// Raises the soft limit on open files toward the hard limit, up to ``listenerDescriptorCap``
    /// (a listener only: a shell `ulimit -n` of 1,024 would stop it near 500 connections).
    /// Returns the limits before and after (nil when they cannot be read or changed).
    static func raiseDescriptorLimit() -> (before: Int, after: Int)? {
        var value = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &value) == 0 else { return nil }
        let before = value.rlim_cur
        let wanted = min(value.rlim_max, rlim_t(listenerDescriptorCap))
        guard wanted > before else { return (Int(clamping: before), Int(clamping: before)) }
        value.rlim_cur = wanted
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &value) == 0 else { return nil }
        return (Int(clamping: before), Int(clamping: wanted))
    }

    static func refuseTooFewDescriptors() {
        guard let limit = FileDescriptors.limit, limit < minimumDescriptors else { return }
        writeStderr("cf-access-tcp: Too many open files (the limit is \(limit)): cf-access-tcp needs at least \(minimumDescriptors); raise the limit with `ulimit -n`")
        exit(ExitStatus.localIO.rawValue)
    }

    /// libdispatch's main-queue descriptor, made now rather than when the main thread parks
    /// (CCFShim.h): a second after the start, the main thread's exit makes it, and a tool at its
    /// descriptor limit by then (a slow start under a small `ulimit -n`) died with SIGILL there.
    /// Call it first thing, after ``refuseTooFewDescriptors()``.
    static func reserveMainQueueDescriptor() {
        _ = CCFShim_prepare_main_queue_handle()
    }
}
