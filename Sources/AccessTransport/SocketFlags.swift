internal import CCFShim
#if canImport(Glibc)
import Glibc
#endif

/// Socket constants that Glibc's Swift module leaves out (`MSG_NOSIGNAL`, `MSG_PEEK`, `SHUT_WR`,
/// `IPPROTO_TCP`, `TCP_NODELAY`: they arrive with the C headers the shim includes), for the
/// modules that import no C module of their own (the SSH core).
package enum SocketFlags {
    /// `MSG_NOSIGNAL`: a send to a closed peer fails with EPIPE instead of raising SIGPIPE.
    package static let noSignal = Int32(MSG_NOSIGNAL)
    /// `MSG_PEEK`: a receive that leaves the bytes in the socket.
    package static let peek = Int32(MSG_PEEK)
    /// `SHUT_WR`: ends the writing side.
    package static let shutWrite = Int32(SHUT_WR)
    /// `SHUT_RDWR`: ends both sides.
    package static let shutBoth = Int32(SHUT_RDWR)
    /// `IPPROTO_TCP`, the level of `TCP_NODELAY`.
    package static let tcpLevel = Int32(IPPROTO_TCP)
    /// `TCP_NODELAY`.
    package static let noDelay = Int32(TCP_NODELAY)
}
