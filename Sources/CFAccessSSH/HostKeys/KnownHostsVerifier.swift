import AccessCore
import AccessTransport
import FoundationEssentials

/// The ready ``SSHHostKeyDelegate``: OpenSSH's rules against its known_hosts files. A known key
/// passes; a changed key is refused with OpenSSH's warning whatever the mode; an unknown key is
/// refused, added, or asked about, by ``SSHHostKeyChecking``.
///
/// As in OpenSSH, every file counts (the user's, then the system's `/etc/ssh/ssh_known_hosts`,
/// by default): a key pinned for the host in any of them makes another key a changed key, which
/// `acceptNew` does not get past, and an `@revoked` line in any of them refuses the key. A new
/// key is written to the first file only.
///
/// ```swift
/// let verifier = KnownHostsVerifier(
///     configuration: .init(knownHosts: KnownHosts(path: KnownHosts.defaultPath(environment: env)),
///                          host: "ssh.example.com", checking: .ask),
///     prompt: myPrompt)                      // asks "Are you sure…?" and shows the notices
/// ```
///
/// In the embedded mode the host is the Access hostname: the SSH server's own address is never
/// seen.
public struct KnownHostsVerifier: SSHHostKeyDelegate {
    /// Which file, which host, which mode.
    public struct Configuration: Sendable {
        /// The known_hosts file to check and append to (OpenSSH's first `UserKnownHostsFile`).
        public var knownHosts: KnownHosts
        /// The other files read, never written: further user files, then the system's
        /// (`GlobalKnownHostsFile`; ``KnownHosts/systemPaths`` by default).
        public var otherKnownHosts: [KnownHosts]
        /// The host the key must belong to (lower-cased when named in the file).
        public var host: String
        /// The port the entry is keyed to (`[host]:port` when not 22).
        public var port: Int
        /// What to do with a key the file does not name.
        public var checking: SSHHostKeyChecking
        /// Whether a key added is written with a hashed name (OpenSSH's `HashKnownHosts`).
        public var hashesNewEntries = false

        /// Checks against `knownHosts` and `otherKnownHosts` (default: the system's files) for
        /// `host`:`port` (default 22), asking about unknown keys by default.
        public init(knownHosts: KnownHosts, otherKnownHosts: [KnownHosts] = KnownHosts.systemPaths.map(KnownHosts.init(path:)),
                    host: String, port: Int = 22, checking: SSHHostKeyChecking = .ask) {
            self.knownHosts = knownHosts
            self.otherKnownHosts = otherKnownHosts
            self.host = host
            self.port = port
            self.checking = checking
        }
    }

    /// The file, host and mode.
    public let configuration: Configuration
    private let prompt: (any SSHHostKeyPrompt)?

    /// A verifier; `prompt` asks about unknown keys and shows the notices (nil: no one is asked,
    /// nothing is shown, so `.ask` refuses an unknown key).
    public init(configuration: Configuration, prompt: (any SSHHostKeyPrompt)? = nil) {
        self.configuration = configuration
        self.prompt = prompt
    }

    /// The algorithms of the keys known_hosts names for the host (plain lines, not revoked), in
    /// OpenSSH's order, so the key exchange asks for a known key first; every host-certificate
    /// algorithm before them when a `@cert-authority` line names the host;
    /// nil when the host is not known (or the file cannot be read).
    public func preferredHostKeyAlgorithms() async -> [String]? {
        guard let known = try? entries() else { return nil }
        let revoked = Set(known.filter { $0.marker == .revoked }.map(\.key.blob))
        let types = Set(known.filter { $0.marker == nil && !revoked.contains($0.key.blob) }.map(\.key.algorithm))
        // A revoked CA still asks for certificates, as in OpenSSH: the one presented is then refused.
        let authority = known.contains { $0.marker == .certificateAuthority }
        let algorithms = HostKeyAlgorithms.preferred(forKnownTypes: types, certificateAuthority: authority)
        return algorithms.isEmpty ? nil : algorithms
    }

    /// The lines of every file that name the host, the first file's first.
    private func entries() throws(SSHFailure) -> [KnownHosts.Entry] {
        var all = try configuration.knownHosts.entries(host: configuration.host, port: configuration.port)
        for file in configuration.otherKnownHosts {
            // As ssh: a further file that cannot be read is passed over.
            all += (try? file.entries(host: configuration.host, port: configuration.port)) ?? []
        }
        return all
    }

    /// Checks `hostKey` against the files and acts on the decision of ``SSHHostKeyChecking``'s
    /// rules: returns if trusted (appending the key when it was new and accepted), throws
    /// ``SSHFailure/Kind/hostKeyRejected`` otherwise.
    ///
    /// A host certificate is trusted when a `@cert-authority` line for the host names its CA,
    /// the CA's signature verifies and OpenSSH's rules find nothing wrong (`HostCertificateRules`). As in
    /// OpenSSH, a certificate from a CA known_hosts does not name, or one that does not hold
    /// (said through the prompt), is then judged as the plain key it certifies; a revoked CA or
    /// key, or a signature that does not verify with the CA's key, is refused.
    public func validateHostKey(_ presented: SSHHostKey) async throws(SSHFailure) {
        let knownHosts = configuration.knownHosts
        let entryName = KnownHosts.entryName(host: configuration.host, port: configuration.port)
        let known = try entries()
        var hostKey = presented
        if presented.isCertificate {
            switch certificateDecision(presented, known: known, entryName: entryName) {
            case .trusted:
                return
            case .refused(let notice):
                await prompt?.show(notice)
                throw HostKeyCheck.failed
            case .plainKey(let key, let notice):
                if let notice { await prompt?.show(notice) }
                hostKey = key
            }
        }
        let check = HostKeyCheck(checking: configuration.checking, entryName: entryName, knownHostsPath: knownHosts.path, key: hostKey)
        var action = check.decide(KnownHosts.verdict(for: hostKey, among: known), known: known)
        while true {
            switch action {
            case .trust:
                return
            case .ask(let question):
                guard let prompt else {
                    action = check.answered(nil)
                    continue
                }
                await prompt.show(.unknown(question))
                action = check.answered(await prompt.confirm(question))
            case .record(let notice):
                try knownHosts.add(host: configuration.host, port: configuration.port, key: hostKey,
                                   hashed: configuration.hashesNewEntries)
                await prompt?.show(notice)
                return
            case .refuse(let notices, let failure):
                for notice in notices { await prompt?.show(notice) }
                throw failure
            }
        }
    }

    /// What a host certificate comes to.
    private enum CertificateDecision {
        case trusted
        case refused(SSHHostKeyNotice)
        /// Judge the certified key as a plain key, after showing the notice if any.
        case plainKey(SSHHostKey, SSHHostKeyNotice?)
    }

    private func certificateDecision(_ presented: SSHHostKey, known: [KnownHosts.Entry], entryName: String) -> CertificateDecision {
        guard let certificate = try? OpenSSHCertificate.parse(blob: presented.blob) else {
            return .refused(.certificateRefused(entryName: entryName, key: presented,
                                                reason: "The server's host certificate is malformed."))
        }
        let key = SSHHostKey(blob: certificate.publicKey.blob, sha256: Digest.sha256(certificate.publicKey.blob))
        let revoked = known.filter { $0.marker == .revoked }.map(\.key.blob)
        if revoked.contains(key.blob) || revoked.contains(certificate.signatureKey) {
            return .refused(.revoked(entryName: entryName, key: revoked.contains(key.blob) ? key : presented))
        }
        guard known.contains(where: { $0.marker == .certificateAuthority && $0.key.blob == certificate.signatureKey }) else {
            // "No matching CA found. Retry with plain key" (OpenSSH).
            return .plainKey(key, nil)
        }
        switch SSHSignatureVerifier.check(signature: certificate.signature, data: certificate.signedBytes,
                                          publicKey: certificate.signatureKey) {
        case .invalid:
            return .refused(.certificateRefused(entryName: entryName, key: presented, reason:
                "The host certificate's signature does not verify with the CA key known_hosts names for \(entryName): "
                + "someone could be impersonating the host."))
        case .disallowed(let algorithm):
            let name = ServerText.visible(algorithm, limit: 64)
            return .plainKey(key, .certificateRefused(entryName: entryName, key: presented, reason:
                "\(presented.displayType) certificate signed using disallowed signature algorithm \(name)"))
        case .valid:
            guard let problem = HostCertificateRules.problem(certificate, host: configuration.host, now: Date()) else { return .trusted }
            return .plainKey(key, .certificateRefused(entryName: entryName, key: presented, reason: problem))
        }
    }
}
