import AccessCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Opens the login URL with `$BROWSER`, else `xdg-open` (Linux, only when `DISPLAY` or
/// `WAYLAND_DISPLAY` is set) or `open` (macOS). False — "use device mode" — when there is no
/// display, the opener cannot start, or it exits with a failure within 3 s.
///
/// The opener is started with `posix_spawn`, its signal mask and handlers reset (threads of
/// ours block signals, and a child would inherit that), stdin from /dev/null and stdout on
/// stderr: our stdout may be an ssh ProxyCommand pipe.
package struct SystemBrowserOpener: BrowserOpener {
    private let environment: [String: String]

    /// An opener reading `BROWSER`, `DISPLAY`, `WAYLAND_DISPLAY` and `PATH` from `environment`.
    package init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// Starts the browser on `url`; see the type's rules.
    package func open(_ url: String) async -> Bool {
        let arguments: [String]
        if let browser = environment["BROWSER"]?.split(separator: ":").first.map(String.init),
           !browser.trimmingHorizontalWhitespace.isEmpty {
            // The URL travels as "$1", never through the shell's parser.
            arguments = ["/bin/sh", "-c", browser + " \"$1\"", "sh", url]
        } else {
            #if os(macOS)
            arguments = ["/usr/bin/open", url]
            #else
            let display = (environment["DISPLAY"] ?? "") + (environment["WAYLAND_DISPLAY"] ?? "")
            guard !display.isEmpty, let opener = Self.find("xdg-open", path: environment["PATH"]) else { return false }
            arguments = [opener, url]
            #endif
        }
        guard let pid = Self.spawn(arguments) else { return false }
        for _ in 0..<30 {
            var status: Int32 = 0
            let done = waitpid(pid, &status, WNOHANG)
            if done == pid {
                // Exited normally with status 0: WIFEXITED && WEXITSTATUS == 0.
                return status & 0x7F == 0 && (status >> 8) & 0xFF == 0
            }
            if done < 0 { return false }
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
        // Still running (a real browser): reap it later without blocking anyone.
        PThread.start(name: "cfat browser") {
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }
        return true
    }

    /// `posix_spawn` of `arguments` with default signal handling and an empty mask.
    private static func spawn(_ arguments: [String]) -> pid_t? {
        var attributes = posix_spawnattr_t()
        var actions = posix_spawn_file_actions_t()
        guard posix_spawnattr_init(&attributes) == 0 else { return nil }
        defer { posix_spawnattr_destroy(&attributes) }
        guard posix_spawn_file_actions_init(&actions) == 0 else { return nil }
        defer { posix_spawn_file_actions_destroy(&actions) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO)
        var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, &attributes, &cArguments, environ)
        return result == 0 ? pid : nil
    }

    private static func find(_ name: String, path: String?) -> String? {
        let directories = (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":")
        for directory in directories {
            let candidate = String(directory) + "/" + name
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
