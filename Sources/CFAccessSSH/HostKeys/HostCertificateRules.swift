import AccessCore
import FoundationEssentials

/// OpenSSH's rules for a host certificate whose CA known_hosts trusts for the host (sshconnect.c's
/// `check_host_cert`), as a pure decision: the certificate must be a host certificate, within its
/// validity, name the host among its principals (each may hold `*` and `?`; none at all means any
/// host, as in OpenSSH), and carry no critical option (none is defined for hosts). The CA's
/// signature is checked apart (``KnownHostsVerifier``).
package enum HostCertificateRules {
    /// Nil when `certificate` holds for `host` at `now`; else the reason, in OpenSSH's words.
    package static func problem(_ certificate: OpenSSHCertificate, host: String, now: Date) -> String? {
        guard certificate.certificateType == OpenSSHCertificate.hostCertificate else {
            return "Certificate invalid: not a host certificate"
        }
        let seconds = now.timeIntervalSince1970 < 0 ? 0 : UInt64(now.timeIntervalSince1970)
        if seconds < certificate.validAfter { return "Certificate invalid: not yet valid" }
        if seconds >= certificate.validBefore { return "Certificate invalid: expired" }
        if !certificate.principals.isEmpty,
           !certificate.principals.contains(where: { KnownHosts.wildcard(Substring($0), matches: host) }) {
            return "Certificate invalid: name is not a listed principal"
        }
        if !certificate.criticalOptions.isEmpty {
            return "Certificate for \(host) contains unsupported critical options(s)"
        }
        return nil
    }
}
