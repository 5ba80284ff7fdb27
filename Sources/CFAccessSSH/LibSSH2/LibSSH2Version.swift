internal import CCFSSH2

/// The version of the libssh2 this process runs with (`cf-access-tcp --version`).
package enum LibSSH2Version {
    /// libssh2's own version text, e.g. "1.10.0".
    package static var text: String {
        libssh2_version(0).map { String(cString: $0) } ?? "unknown"
    }
}
