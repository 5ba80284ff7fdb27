// The two policies swift-nio-ssh asks its user for: which host keys to trust, and how to log in.
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOSSH

/// Trusts only the keys a known_hosts file lists for one host (OpenSSH's format: `host key-type
/// base64`, or `[host]:22`; hashed `|1|` names and `@` markers are not read by this example).
/// A key not in the file fails the handshake before any password is sent.
final class KnownHostKeys: NIOSSHClientServerAuthenticationDelegate, Sendable {
    private let keys: [NIOSSHPublicKey]
    private let refused = NIOLockedValueBox<String?>(nil)

    /// Reads the keys of `host` from `file`; throws if it has none (never trust on first use here).
    init(file: String, host: String) throws {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw ExampleError("cannot read the known_hosts file \(file): \(error.localizedDescription)")
        }
        var keys: [NIOSSHPublicKey] = []
        for line in text.split(whereSeparator: \.isNewline) {
            let fields = line.split(whereSeparator: \.isWhitespace)
            guard fields.count >= 3, !fields[0].hasPrefix("#"), !fields[0].hasPrefix("@") else { continue }
            let names = fields[0].split(separator: ",")
            guard names.contains(Substring(host)) || names.contains(Substring("[\(host)]:22")) else { continue }
            if let key = try? NIOSSHPublicKey(openSSHPublicKey: "\(fields[1]) \(fields[2])") {
                keys.append(key)
            }
        }
        guard !keys.isEmpty else {
            throw ExampleError("no host key for \(host) in \(file): add the server's key to it first")
        }
        self.keys = keys
    }

    /// The key the server offered, if it was refused (for the error message).
    var refusedKey: String? { refused.withLockedValue { $0 } }

    func validateHostKey(hostKey: NIOSSHPublicKey, validationCompletePromise: EventLoopPromise<Void>) {
        if keys.contains(hostKey) {
            validationCompletePromise.succeed(())
        } else {
            refused.withLockedValue { $0 = String(openSSHPublicKey: hostKey) }
            validationCompletePromise.fail(ExampleError("host key not trusted"))
        }
    }
}

/// Offers one password, once. A refusal ends the attempt: failing the promise (not answering
/// nil) is what makes swift-nio-ssh give up the connection.
final class PasswordAuthentication: NIOSSHClientUserAuthenticationDelegate, Sendable {
    private let user: String
    private let password: String
    private let state = NIOLockedValueBox<(offered: Bool, refusal: String?)>((false, nil))

    init(user: String, password: String) {
        self.user = user
        self.password = password
    }

    /// Why authentication failed, once it has.
    var refusal: String? { state.withLockedValue { $0.refusal } }

    func nextAuthenticationType(availableMethods: NIOSSHAvailableUserAuthenticationMethods,
                                nextChallengePromise: EventLoopPromise<NIOSSHUserAuthenticationOffer?>) {
        let refusal: String? = state.withLockedValue { state in
            if state.offered {
                state.refusal = "the server refused the password for \(user)"
            } else if !availableMethods.contains(.password) {
                state.refusal = "the server does not take a password for \(user)"
            }
            state.offered = true
            return state.refusal
        }
        if let refusal {
            nextChallengePromise.fail(ExampleError(refusal))
        } else {
            nextChallengePromise.succeed(NIOSSHUserAuthenticationOffer(
                username: user, serviceName: "", offer: .password(.init(password: password))))
        }
    }
}

/// Closes the connection on the first error in its pipeline (a refused host key, no more
/// authentication methods, …), so that whatever waits on it fails at once rather than when the
/// server gives up.
final class CloseOnError: ChannelInboundHandler, Sendable {
    typealias InboundIn = Any

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

/// A failure of this example, with the line it prints.
struct ExampleError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
