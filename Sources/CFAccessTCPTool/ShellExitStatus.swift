import AccessCore
import CFAccessSSH

/// The shell mode's statuses of its own: a closed output and a remote command killed by a signal.
/// Every failure's status is in ExitStatus.swift.
extension ExitStatus {
    /// The status when the reader of the output went away (`shell … | head -1`): 255, what
    /// OpenSSH's ssh exits with then (checked with ssh 9.2: `ssh host yes | head -1` gives 255
    /// and no message). The run ends without a line, since nothing went wrong for the reader.
    static let outputClosedStatus: Int32 = 255
    /// A terminal session ended by `~.`: ssh's 255.
    static let escapeDisconnectStatus: Int32 = 255

    /// The status for a remote command killed by the signal `name` (`TERM`): 128 + its number,
    /// as shells report it (255 for a name we do not know).
    static func remoteSignal(_ name: String) -> Int32 {
        128 + (signalNumbers[name] ?? 127)
    }

    private static let signalNumbers: [String: Int32] = [
        "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9, "SEGV": 11, "PIPE": 13,
        "ALRM": 14, "TERM": 15, "USR1": 10, "USR2": 12,
    ]
}
