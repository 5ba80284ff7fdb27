import AccessCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Two descriptors as the local side of one bridge, one read and one written: stdin and stdout
/// in stdio mode (ssh's ProxyCommand). The carrier loop serves them as it serves a local
/// socket, with no socket pair and no copying threads between them and the tunnel.
///
/// The loop works on duplicates (`duplicated()`), one pair per dial, and closes them when the
/// tunnel ends; the caller keeps its own descriptors. So that the far ends see the tunnel's end
/// when the loop closes its duplicates, the caller then points its own at something else
/// (`/dev/null`) or closes them.
package struct LocalPair: Sendable, Equatable {
    /// Read for the edge.
    package var input: Int32
    /// Written with the edge's bytes.
    package var output: Int32
    /// What the two are called in messages ("cannot write to stdout: …").
    package var names: LocalNames
    /// What a pipe on either side is grown to hold, if it holds less (0: left as they are). A
    /// 64 KiB pipe as the output makes the loop wait for its reader every 64 KiB; 256 KiB, the size
    /// of the edge's frames, nearly doubles a fast reader's download (reference/perf.md, session
    /// 18). A 64 KiB pipe as the input gives the loop at most 64 KiB a read, so a quarter of the
    /// largest frame, and four times the frames, reads and sends per byte uploaded (session 20).
    /// The kernel refuses it (EPERM, then the pipe stays as it was) once the user's pipes hold
    /// their soft limit (`/proc/sys/fs/pipe-user-pages-soft`).
    package var pipeBytes: Int32

    package init(input: Int32 = STDIN_FILENO, output: Int32 = STDOUT_FILENO,
                 names: LocalNames = LocalNames(input: "stdin", output: "stdout"), pipeBytes: Int32 = 256 << 10) {
        self.input = input
        self.output = output
        self.names = names
        self.pipeBytes = pipeBytes
    }

    /// Whether the loop can serve these two: each a pipe or a socket. epoll refuses regular
    /// files and `/dev/null`; and a terminal is shared with the shell around us, whose reads
    /// the non-blocking mode the loop sets would break. Anything else goes through
    /// `StdioBridge`'s threads.
    package static func canServe(input: Int32, output: Int32) -> Bool {
        isPipeOrSocket(input) && isPipeOrSocket(output)
    }

    private static func isPipeOrSocket(_ fd: Int32) -> Bool {
        var status = stat()
        guard fstat(fd, &status) == 0 else { return false }
        let kind = status.st_mode & S_IFMT
        return kind == S_IFIFO || kind == S_IFSOCK
    }

    /// Close-on-exec duplicates of both, for one dial (the loop closes them); a pipe on either
    /// side grown to `pipeBytes` first.
    package func duplicated() throws(TunnelFailure) -> LocalPair {
        grow(input)
        grow(output)
        let input = fcntl(self.input, F_DUPFD_CLOEXEC, 3)
        guard input >= 0 else { throw Self.duplicateFailure(names.input) }
        let output = fcntl(self.output, F_DUPFD_CLOEXEC, 3)
        guard output >= 0 else {
            let failure = Self.duplicateFailure(names.output)
            Glibc.close(input)
            throw failure
        }
        return LocalPair(input: input, output: output, names: names, pipeBytes: pipeBytes)
    }

    /// `F_GETPIPE_SZ` and `F_SETPIPE_SZ` (Linux, `F_LINUX_SPECIFIC_BASE` + 8 and + 7), which Glibc's
    /// Swift module leaves out.
    private static let getPipeSize: Int32 = 1032
    private static let setPipeSize: Int32 = 1031

    /// Grows `fd`, when it is a pipe, to `pipeBytes`; never shrinks one, and a socket (which has
    /// no pipe size) is left alone.
    private func grow(_ fd: Int32) {
        guard pipeBytes > 0 else { return }
        let current = fcntl(fd, Self.getPipeSize)
        if current > 0, current < pipeBytes { _ = fcntl(fd, Self.setPipeSize, pipeBytes) }
    }

    private static func duplicateFailure(_ name: String) -> TunnelFailure {
        let error = SystemError.current()
        return TunnelFailure(category: .localResource, isRetryable: false,
                             message: "cannot use \(name) for the tunnel: \(error.text)", detail: "dup(\(name)): \(error)",
                             kind: .localIO)
    }
}

/// What a bridge calls the two directions of its local side in messages.
package struct LocalNames: Sendable, Equatable {
    /// The side read for the edge ("stdin").
    package var input: String
    /// The side written with the edge's bytes ("stdout").
    package var output: String

    package init(input: String, output: String) {
        self.input = input
        self.output = output
    }

    /// A local socket's: both directions are "the local connection".
    package static let socket = LocalNames(input: "the local connection", output: "the local connection")
}
