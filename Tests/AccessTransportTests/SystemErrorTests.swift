@testable import AccessTransport
import AccessCore
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// One type puts errno into words (issue 19.6).
@Suite("SystemError")
struct SystemErrorTests {
    @Test("the system's words, with the failed call when named")
    func words() {
        #expect(SystemError(ECONNREFUSED).description == "Connection refused")
        #expect(SystemError(ENOENT, operation: "open(x)").description == "open(x): No such file or directory")
        #expect(SystemError(EAGAIN).wouldBlock && SystemError(EWOULDBLOCK).wouldBlock && !SystemError(EINTR).wouldBlock)
    }

    @Test("errno as left by the failed call")
    func current() {
        #expect(close(-1) == -1)
        #expect(SystemError.current("close(-1)") == SystemError(EBADF, operation: "close(-1)"))
    }

    @Test("as a tunnel failure: out of descriptors said with the limit, anything else as our bug")
    func tunnelFailure() {
        let exhausted = SystemError(EMFILE, operation: "socket()").tunnelFailure
        #expect(exhausted.kind == .outOfFileDescriptors)
        #expect(exhausted.detail == "socket(): Too many open files")
        #expect(SystemError(ENFILE).isOutOfDescriptors)
        #expect(SystemError(EINVAL, operation: "epoll_create1()").tunnelFailure.kind == .internal)
    }
}
