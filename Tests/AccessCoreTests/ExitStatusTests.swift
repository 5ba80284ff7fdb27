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
        let values = ExitStatus.allCases.map(\.rawValue)
        #expect(Set(values).count == values.count)
        #expect(values == [0, 64, 69, 70, 74, 75, 76, 77, 130, 143])
    }
}
