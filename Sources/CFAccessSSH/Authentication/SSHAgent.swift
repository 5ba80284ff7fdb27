import AccessTransport
import Dispatch
import FoundationEssentials

/// A key an ssh-agent holds: its public half and comment.
public struct SSHAgentIdentity: Sendable, Equatable {
    /// The public key blob (SSH wire format), as an ``SSHAuthenticationOffer/agentKey(socketPath:publicKey:)``
    /// names it.
    public let publicKey: [UInt8]
    /// The agent's comment for the key (often the file it came from), visible-safe.
    public let comment: String

    /// An identity.
    public init(publicKey: [UInt8], comment: String) {
        self.publicKey = publicKey
        self.comment = comment
    }

    /// The key type (`ssh-ed25519`, `ssh-rsa`, …).
    public var algorithm: String { SSHPublicKeyBlob.algorithm(publicKey) }

    /// `SHA256:…`, as `ssh-add -l` prints it.
    public var fingerprint: String { SSHPublicKeyBlob.fingerprint(publicKey) }

    private static let queue = DispatchQueue(label: "cf-access-ssh.agent")

    /// The identities of the ssh-agent at `socketPath` (nil: `SSH_AUTH_SOCK`), in the agent's
    /// order. Throws when the agent cannot be reached, or does not answer within `timeout`.
    public static func list(socketPath: String?, timeout: Duration = .seconds(5)) async throws(SSHFailure) -> [SSHAgentIdentity] {
        let result = await bounded(on: queue, timeout: timeout) { () -> Result<[SSHAgentIdentity], SSHFailure> in
            do throws(SSHFailure) { return .success(try listBlocking(socketPath: socketPath)) } catch { return .failure(error) }
        }
        guard let result else {
            throw SSHFailure(.localIO, "the ssh-agent at \(socketPath ?? "SSH_AUTH_SOCK") did not answer within \(Int(timeout.seconds.rounded(.up))) s")
        }
        return try result.get()
    }

    private static func listBlocking(socketPath: String?) throws(SSHFailure) -> [SSHAgentIdentity] {
        try AgentWire.listIdentities(socketPath: socketPath)
    }
}
