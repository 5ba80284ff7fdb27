import AccessTransport
import Dispatch
import FoundationEssentials
internal import CCFSSH2

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
        // libssh2's agent client needs a session only for memory and errors: no connection.
        guard let session = CCFSSH2_session_init() else {
            throw SSHFailure(.localIO, "libssh2 could not create a session (out of memory)")
        }
        defer { _ = libssh2_session_free(session) }
        guard let agent = libssh2_agent_init(session) else { throw SSHFailure(.localIO, "cannot use the ssh-agent") }
        defer { libssh2_agent_free(agent) }
        if let socketPath { libssh2_agent_set_identity_path(agent, socketPath) }
        guard libssh2_agent_connect(agent) == 0 else {
            throw SSHFailure(.configuration, "cannot reach the ssh-agent at \(socketPath ?? "SSH_AUTH_SOCK")")
        }
        defer { _ = libssh2_agent_disconnect(agent) }
        guard libssh2_agent_list_identities(agent) == 0 else {
            throw SSHFailure(.localIO, "the ssh-agent did not list its keys")
        }
        var identities: [SSHAgentIdentity] = []
        var previous: UnsafeMutablePointer<libssh2_agent_publickey>?
        while true {
            var identity: UnsafeMutablePointer<libssh2_agent_publickey>?
            let rc = libssh2_agent_get_identity(agent, &identity, previous)
            if rc == 1 { break }
            guard rc == 0, let identity else { throw SSHFailure(.localIO, "the ssh-agent failed to list its keys") }
            let blob = [UInt8](UnsafeBufferPointer(start: identity.pointee.blob, count: Int(identity.pointee.blob_len)))
            let comment = identity.pointee.comment.map { ServerText.visible(String(cString: $0)) } ?? ""
            identities.append(SSHAgentIdentity(publicKey: blob, comment: comment))
            previous = identity
        }
        return identities
    }
}
