/// The exit statuses README's "Exit status" table documents, restated by the tests on their own:
/// the tool decides them in one place (`Sources/CFAccessTCPTool/ExitStatus.swift`), and these
/// tests run the binary to check that place against the table.
enum ExitStatus: Int32, CaseIterable {
    case success = 0
    case usage = 64
    case unavailable = 69
    case software = 70
    case localIO = 74
    case connectionLost = 75
    case protocolError = 76
    case accessDenied = 77
    case interrupted = 130
    case terminated = 143
}
