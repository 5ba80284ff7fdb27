import CFAccessTCP
#if canImport(Glibc)
import Glibc
#endif

/// The socket systemd hands a socket-activated service (`sd_listen_fds(3)`: `LISTEN_PID` names
/// this process, `LISTEN_FDS` counts the descriptors, the first is 3).
enum SocketActivation {
    /// The first socket handed to this process, or nil when none was (or the variables are for
    /// another process, as after a fork).
    static func socket(environment: [String: String], allowNonLoopback: Bool) -> ListeningSocket? {
        guard let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
              let count = environment["LISTEN_FDS"].flatMap({ Int($0) }), count >= 1 else { return nil }
        return ListeningSocket(descriptor: 3, allowsNonLoopback: allowNonLoopback)
    }

    /// Takes the variables out of this process's environment, as `sd_listen_fds(1)` does, so that
    /// no child (a browser, curl) takes them for its own.
    static func forgetVariables() {
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
    }
}

/// What a `Type=notify` service tells systemd (`sd_notify(3)`): one datagram to `NOTIFY_SOCKET`
/// (a path, or an abstract name after `@`). Nothing happens when the variable is not set.
enum ServiceNotification {
    /// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=…`, lines separated by `\n`).
    static func send(_ state: String, environment: [String: String]) {
        guard let target = environment["NOTIFY_SOCKET"], !target.isEmpty else { return }
        var path = Array(target.utf8)
        if path.first == UInt8(ascii: "@") { path[0] = 0 }   // the abstract namespace
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let room = MemoryLayout.size(ofValue: address.sun_path)
        guard path.count < room else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count)
        let bytes = Array(state.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), socketAddress, length) }
            }
        }
    }
}
