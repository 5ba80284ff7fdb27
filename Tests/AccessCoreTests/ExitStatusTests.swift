import AccessCore
import Testing

/// The documented exit statuses (README, "Exit status").
@Suite("exit statuses")
struct ExitStatusTests {
    @Test("each failure category has its own status, all distinct and documented")
    func categories() {
        #expect(ExitStatus(failure: .configuration) == .usage)
        #expect(ExitStatus(failure: .authentication) == .accessDenied)
        #expect(ExitStatus(failure: .transport) == .unavailable)
        #expect(ExitStatus(failure: .protocolViolation) == .protocolError)
        #expect(ExitStatus(failure: .internal) == .software)
        #expect(ExitStatus(failure: .invalidState) == .software)
        #expect(ExitStatus(failure: .localResource) == .localIO)
        let fd = TunnelFailure.outOfFileDescriptors(limit: 64, what: "socket(): EMFILE")
        #expect(fd.message.hasPrefix("Too many open files (the limit is 64)"))
        #expect(fd.category == .localResource && fd.isRetryable)
        #expect(TunnelFailure.outOfFileDescriptors(limit: nil, what: "x").message.hasPrefix("Too many open files: "))
        let values = ExitStatus.allCases.map(\.rawValue)
        #expect(Set(values).count == values.count)
        #expect(values == [0, 64, 69, 70, 74, 75, 76, 77, 130, 143])
    }
}
