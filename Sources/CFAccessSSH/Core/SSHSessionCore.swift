import AccessCore
import AccessTransport
import CFAccessTCP
import FoundationEssentials
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// What ``SSHSession`` asks of its core, whichever library runs it.
protocol SessionCalls: AnyObject, Sendable {
    var hostKey: SSHHostKey? { get }
    var isAuthenticated: Bool { get async }
    func handshake() async throws(SSHFailure) -> SSHHostKey
    func authenticationMethods(user: String) async throws(SSHFailure) -> SSHAuthenticationMethods
    func authenticate(user: String, delegate: any SSHUserAuthenticationDelegate) async throws(SSHFailure) -> SSHAuthenticationOffer?
    func authenticate(user: String, offer: SSHAuthenticationOffer,
                      answering: (@Sendable (SSHKeyboardPrompt) async -> [String]?)?) async throws(SSHFailure)
    func exec(_ command: String, input: Data, environment: [String: String]) async throws(SSHFailure) -> SSHExecResult
    func run(_ request: ChannelRequest, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
             standardError: FileDescriptor, environment: [String: String]) async throws(SSHFailure) -> SSHChannelEnd
    func openShell(terminal: SSHTerminal, command: String?, environment: [String: String]) async throws(SSHFailure)
        -> any InteractiveChannelCalls
    func openDirect(host: String, port: Int) async throws(SSHFailure) -> any InteractiveChannelCalls
    func disconnect(description: String) async
    func startForwarding(_ listener: SSHForwardListener) async throws(SSHFailure)
    func startRemoteForwarding(_ forward: SSHRemoteForward, onEvent: (@Sendable (SSHForwardEvent) -> Void)?) async throws(SSHFailure) -> Int
    func runForwards() async -> SSHChannelEnd
}

/// The session, written once over an ``SSHEngine``: the library runs non-blocking on one
/// thread of the session's own; every method hops to it, so calls run one after another in
/// order. A call that must wait for the server waits in `poll(2)` on the socket, bounded by the
/// configuration's timeout while connecting and authenticating. The library reads no
/// configuration file and no known_hosts file of its own.
final class SSHSessionCore<Engine: SSHEngine>: SessionCalls, @unchecked Sendable {
    let engine: Engine
    private let thread: SessionThread
    private let stream: TunnelStream?
    private var freed = false
    private var handshakeDone = false
    private var authenticated = false
    private let validatedKey = LockedBox<SSHHostKey?>(nil)

    var configuration: SSHSession.Configuration { engine.state.configuration }
    var hostKey: SSHHostKey? { validatedKey.withLock { $0 } }

    /// A core over `engine`, which runs on the socket `stream` (owned: closed in `disconnect`)
    /// or a descriptor the caller keeps owning (nil).
    init(engine: Engine, owning stream: TunnelStream?) {
        self.engine = engine
        self.stream = stream
        self.thread = SessionThread(name: "ssh session \(engine.state.fd)")
    }

    deinit {
        if !freed {
            let engine = UncheckedBox(engine)
            let stream = self.stream
            // Free on the session's thread, after anything still queued there.
            if !thread.submit({
                engine.value.free()
                stream?.close()
            }) {
                engine.value.free()
                stream?.close()
            }
        }
        thread.stop()
    }

    /// Runs `body` on the session's thread and returns its result.
    func onThread<T: Sendable>(_ body: @escaping @Sendable (SSHSessionCore) throws(SSHFailure) -> T) async throws(SSHFailure) -> T {
        try await thread.run { [self] () throws(SSHFailure) -> T in try body(self) }
    }

    // MARK: Handshake

    func handshake() async throws(SSHFailure) -> SSHHostKey {
        var preferred = await configuration.hostKeyDelegate.preferredHostKeyAlgorithms()
        // Host certificates asked for: read on a connection of their own (HostCertificateProbe),
        // and the certified key's type asked for first, so the server presents that key.
        var certificate: (blob: [UInt8], key: [UInt8])?
        if let open = configuration.hostCertificateConnection,
           preferred?.contains(where: { $0.hasSuffix(HostKeyAlgorithms.certificateSuffix) }) == true {
            certificate = await readCertificate(open)
            if let certificate {
                let type = SSHPublicKeyBlob.algorithm(certificate.key)
                preferred = HostKeyAlgorithms.preferred(forKnownTypes: [type]) + (preferred ?? [])
            }
        }
        let plain = try await onThread { [preferred] core throws(SSHFailure) in try core.handshakeOnThread(preferring: preferred) }
        // The certificate stands for the key only when it certifies the key this exchange proved.
        var key = plain
        if let certificate, certificate.key == plain.blob {
            key = SSHHostKey(blob: certificate.blob, sha256: Digest.sha256(certificate.blob))
        }
        try await configuration.hostKeyDelegate.validateHostKey(key)
        validatedKey.withLock { $0 = key }
        return key
    }

    /// The server's host certificate and the key it certifies, read on a second connection;
    /// nil when there is none (never fatal: the plain key is judged then).
    private func readCertificate(_ open: @Sendable () async -> SSHCertificateConnection?) async -> (blob: [UInt8], key: [UInt8])? {
        guard let connection = await open() else { return nil }
        let fd = connection.fileDescriptor.rawValue
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let deadline = Date(timeIntervalSinceNow: configuration.timeout.seconds)
        let read = await withCheckedContinuation { (done: CheckedContinuation<Result<[UInt8], SSHFailure>, Never>) in
            let started = PThread.start(name: "ssh cert probe") { done.resume(returning: HostCertificateProbe.run(fd: fd, until: deadline)) }
            if !started { done.resume(returning: .failure(SSHFailure(.localIO, "no thread for the certificate probe"))) }
        }
        await connection.close()
        guard case .success(let blob) = read, let parsed = try? OpenSSHCertificate.parse(blob: blob) else { return nil }
        return (blob, parsed.publicKey.blob)
    }

    private func handshakeOnThread(preferring preferred: [String]?) throws(SSHFailure) -> SSHHostKey {
        let offered = engine.prepareHandshake(preferredHostKeys: preferred)
        let deadline = engine.deadline()
        // What comes before the server's identification is read (and dropped) here, as OpenSSH
        // bounds it; the library then finds the identification first on the socket.
        try engine.skipPreIdentification(until: deadline)
        if let failure = try engine.handshake(offering: offered, until: deadline) { throw failure }
        handshakeDone = true
        return try engine.serverHostKey()
    }

    /// Throws unless ``handshake()`` ran and its delegate accepted the key.
    private func requireAcceptedHostKey() throws(SSHFailure) {
        guard hostKey != nil else {
            throw SSHFailure(.configuration, "the SSH handshake has not run (or its host key was refused): call handshake() first")
        }
    }

    // MARK: Authentication

    func authenticationMethods(user: String) async throws(SSHFailure) -> SSHAuthenticationMethods {
        try requireAcceptedHostKey()
        return try await onThread { core throws(SSHFailure) in
            if core.authenticated { return [] }
            guard let methods = try core.engine.noneMethod(user: user) else {
                core.authenticated = true
                return []
            }
            return methods
        }
    }

    var isAuthenticated: Bool {
        get async { (try? await onThread { core in core.authenticated }) ?? false }
    }

    func authenticate(user: String, delegate: any SSHUserAuthenticationDelegate) async throws(SSHFailure) -> SSHAuthenticationOffer? {
        do {
            let methods = try await authenticationMethods(user: user)
            if let banner = (try? await onThread({ core in core.engine.issueBanner() })) ?? nil {
                await delegate.showBanner(banner)
            }
            if methods.isEmpty, await isAuthenticated { return nil }
            return try await AuthenticationLoop.run(availableMethods: methods, delegate: delegate) { offer throws(SSHFailure) in
                try await authenticate(user: user, offer: offer, answering: { round in await delegate.respond(to: round) })
            }
        } catch {
            if error.kind == .connectionLost, let reason = try? await onThread({ core in core.engine.serverDisconnect }) {
                throw SSHFailure(.authenticationFailed, "Authentication failed: the SSH server disconnected: \(reason)")
            }
            throw error
        }
    }

    func authenticate(user: String, offer: SSHAuthenticationOffer,
                      answering: (@Sendable (SSHKeyboardPrompt) async -> [String]?)?) async throws(SSHFailure) {
        try requireAcceptedHostKey()
        var respond: (@Sendable (SSHKeyboardPrompt) -> [String])?
        if case .keyboardInteractive = offer {
            let state = engine.state
            respond = { round in
                guard let answering else { return [] }
                // The person's time does not count against the request's timeout.
                let asked = Date()
                defer { state.promptPause += Date().timeIntervalSince(asked) }
                return waitOffPool { await answering(round) } ?? []
            }
        }
        try await onThread { [respond] core throws(SSHFailure) in
            do throws(SSHFailure) {
                try core.offerOnThread(offer, user: user, respond: respond)
            } catch {
                throw core.underLimitation(error, offer: offer)
            }
            core.authenticated = true
        }
    }

    /// A refused RSA key, on a library that signs RSA only with SHA-1 (which OpenSSH 8.8 and
    /// later refuse): the failure carries the limitation, since another engine may get in.
    private func underLimitation(_ failure: SSHFailure, offer: SSHAuthenticationOffer) -> SSHFailure {
        guard failure.kind == .authenticationFailed, let limitation = Engine.features.rsaLimitation else { return failure }
        let blob: [UInt8]?
        switch offer {
        case .privateKey(let path, _): blob = PrivateKeyFile.publicKey(path: path)
        case .agentKey(_, let publicKey): blob = publicKey
        default: blob = nil
        }
        guard let blob, SSHPublicKeyBlob.algorithm(blob) == "ssh-rsa" else { return failure }
        var limited = failure
        limited.engineLimitation = limitation
        return limited
    }

    private func offerOnThread(_ offer: SSHAuthenticationOffer, user: String,
                               respond: (@Sendable (SSHKeyboardPrompt) -> [String])?) throws(SSHFailure) {
        switch offer {
        case .password(let password):
            try engine.offerPassword(user: user, password: password)
        case .privateKey(let path, nil) where PrivateKeyFile.isEncrypted(path: path):
            // An encrypted key without its passphrase: as OpenSSH does, the public half is
            // offered first; only a key the server accepts is worth a passphrase.
            guard let blob = PrivateKeyFile.publicKey(path: path) else {
                throw SSHFailure(.localIO, "using the key \(path): it is encrypted: its passphrase is needed")
            }
            guard try engine.probeKey(user: user, publicKey: blob) else { throw SSHFailure(.authenticationFailed, "Authentication failed") }
            var failure = SSHFailure(.localIO, "using the key \(path): the server accepts it; its passphrase is needed")
            failure.needsPassphrase = true
            throw failure
        case .privateKey(let path, let passphrase):
            // As OpenSSH does, a certificate beside the key (`key-cert.pub`) is offered first,
            // then the bare key.
            let certificate = path + "-cert.pub"
            if FileManager.default.isReadableFile(atPath: certificate) {
                do {
                    return try engine.offerKey(user: user, path: path, certificate: certificate, passphrase: passphrase)
                } catch {
                    if error.kind == .connectionLost || error.kind == .timedOut { throw error }
                }
            }
            try engine.offerKey(user: user, path: path, certificate: nil, passphrase: passphrase)
        case .agent(let socketPath):
            try engine.offerAgent(user: user, socketPath: socketPath, only: nil)
        case .agentKey(let socketPath, let publicKey):
            try engine.offerAgent(user: user, socketPath: socketPath, only: publicKey)
        case .keyboardInteractive:
            try engine.offerKeyboardInteractive(user: user, respond: respond ?? { _ in [] })
        }
    }

    // MARK: Channels

    /// Opens a session channel and starts `command` (exec) or a shell, with a PTY if `terminal`,
    /// after asking for `environment` (a variable the server refuses is skipped, as ssh skips it).
    private func openChannel(_ request: ChannelRequest, terminal: SSHTerminal?, environment: [String: String]) throws(SSHFailure)
        -> UncheckedBox<Engine.Channel> {
        let deadline = engine.deadline()
        let channel = try engine.openSession(until: deadline)
        do throws(SSHFailure) {
            for (name, value) in environment.sorted(by: { $0.key < $1.key }) {
                do {
                    _ = try engine.requestEnvironment(channel, name: name, value: value, until: deadline)
                } catch {
                    if error.kind == .connectionLost || error.kind == .timedOut { throw error }
                }
            }
            if configuration.agentForwarding != nil { try engine.requestAgentForwarding(channel, until: deadline) }
            if let terminal { try engine.requestTerminal(channel, terminal, until: deadline) }
            try engine.start(channel, request, until: deadline)
        } catch {
            engine.free(channel)
            throw error
        }
        return UncheckedBox(channel)
    }

    /// Runs `channel` (nil: only the forwards) until it ends; frees it. On the session's thread.
    private func pump(_ channel: UncheckedBox<Engine.Channel>?, isDirect: Bool = false, input: Int32?, sink: @escaping OutputSink,
                      control: ChannelControl, escapes: SSHEscapes?) -> SSHChannelEnd {
        let pump = ChannelPump(engine: engine, control: control)
        if let channel {
            pump.main = SessionChannel(raw: channel.value, isDirect: isDirect, input: input, sink: sink, escapes: escapes)
        }
        return pump.run()
    }

    func exec(_ command: String, input: Data, environment: [String: String]) async throws(SSHFailure) -> SSHExecResult {
        let collector = OutputCollector()
        let end = try await onThread { core throws(SSHFailure) -> SSHChannelEnd in
            let channel = try core.openChannel(.exec(command), terminal: nil, environment: environment)
            let control = try ChannelControl()
            if !input.isEmpty { control.post(.write(input)) }
            control.post(.endOfInput)
            return core.pump(channel, input: nil, sink: collector.sink, control: control, escapes: nil)
        }
        if case .lost(let failure) = end { throw failure }
        return collector.result(end: end)
    }

    func run(_ request: ChannelRequest, standardInput: FileDescriptor?, standardOutput: FileDescriptor,
             standardError: FileDescriptor, environment: [String: String]) async throws(SSHFailure) -> SSHChannelEnd {
        let input = standardInput?.rawValue
        let (output, error) = (standardOutput.rawValue, standardError.rawValue)
        return try await onThread { core throws(SSHFailure) -> SSHChannelEnd in
            let channel = try core.openChannel(request, terminal: nil, environment: environment)
            let control = try ChannelControl()
            if input == nil { control.post(.endOfInput) }
            return core.pump(channel, input: input, sink: descriptorSink(output: output, error: error), control: control, escapes: nil)
        }
    }

    func openDirect(host: String, port: Int) async throws(SSHFailure) -> any InteractiveChannelCalls {
        let control = try ChannelControl()
        let channel = try await onThread { core throws(SSHFailure) -> UncheckedBox<Engine.Channel> in
            let engine = core.engine
            let opened = try engine.retry("opening a channel to \(host):\(port)", until: engine.deadline()) { () -> DirectOpen<Engine.Channel>? in
                let step = engine.openDirect(host: host, port: port, originHost: "127.0.0.1", originPort: 0)
                if case .again = step { return nil }
                return step
            }
            switch opened {
            case .opened(let channel): return UncheckedBox(channel)
            case .refused(let reason): throw SSHFailure(.protocolError, "The SSH server refused the channel to \(host):\(port): \(reason)")
            case .lost(let failure): throw failure
            case .again: throw SSHFailure(.protocolError, "the channel to \(host):\(port) did not open")
            }
        }
        return PumpedChannel(core: self, channel: channel, control: control, isDirect: true)
    }

    func openShell(terminal: SSHTerminal, command: String?, environment: [String: String]) async throws(SSHFailure)
        -> any InteractiveChannelCalls {
        let control = try ChannelControl()
        let channel = try await onThread { core throws(SSHFailure) in
            try core.openChannel(ChannelRequest(command: command), terminal: terminal, environment: environment)
        }
        return PumpedChannel(core: self, channel: channel, control: control)
    }

    func startForwarding(_ listener: SSHForwardListener) async throws(SSHFailure) {
        try await onThread { core in core.engine.state.forwards.append(listener) }
    }

    func startRemoteForwarding(_ forward: SSHRemoteForward, onEvent: (@Sendable (SSHForwardEvent) -> Void)?) async throws(SSHFailure) -> Int {
        try requireAcceptedHostKey()
        return try await onThread { core throws(SSHFailure) -> Int in
            let engine = core.engine
            guard let port = try engine.listenRemote(address: forward.requestedAddress, port: forward.port, until: engine.deadline()) else {
                throw SSHFailure(.protocolError, "remote port forwarding failed for listen port \(forward.port): the SSH server refused it")
            }
            engine.state.remoteForwards.append(RemoteForwardBinding(forward: forward, boundPort: port, onEvent: onEvent))
            return port
        }
    }

    func runForwards() async -> SSHChannelEnd {
        let control: ChannelControl
        do {
            control = try ChannelControl()
        } catch {
            return .lost(error)
        }
        return await withTaskCancellationHandler {
            await runPump(nil, input: nil, sink: { _, _ in true }, control: control, escapes: nil)
        } onCancel: {
            control.post(.close)
        }
    }

    /// Runs the pump on the session's thread; a closed session is a lost connection.
    fileprivate func runPump(_ channel: UncheckedBox<Engine.Channel>?, isDirect: Bool = false, input: Int32?, sink: @escaping OutputSink,
                             control: ChannelControl, escapes: SSHEscapes?) async -> SSHChannelEnd {
        do {
            return try await onThread { core in
                core.pump(channel, isDirect: isDirect, input: input, sink: sink, control: control, escapes: escapes)
            }
        } catch {
            return .lost(error)
        }
    }

    // MARK: Ending

    func disconnect(description: String) async {
        _ = try? await onThread { core in
            guard !core.freed else { return }
            core.freed = true
            core.engine.disconnect(description: description, handshakeDone: core.handshakeDone)
            if let stream = core.stream {
                // Let the tunnel take the last bytes (the disconnect message) before closing:
                // end our writing, then wait (bounded) until the other end closes too.
                core.engine.drainAfterShutdown(until: Date(timeIntervalSinceNow: 2))
                stream.close()
            }
        }
        thread.stop()
    }
}

/// A value that crosses to the session's thread and back (a channel pointer, an engine), used
/// on that thread only.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// What ``SSHInteractiveChannel`` asks of an opened channel.
protocol InteractiveChannelCalls: Sendable {
    func resize(columns: Int, rows: Int)
    func write(_ data: Data)
    func endInput()
    func close()
    func run(input: FileDescriptor?, output: FileDescriptor, escapes: SSHEscapes?) async -> SSHChannelEnd
    func run(onOutput: @escaping @Sendable (Data) -> Void) async -> SSHChannelEnd
}

/// An opened interactive channel: posts go to its control pipe, `run` pumps it on the
/// session's thread.
final class PumpedChannel<Engine: SSHEngine>: InteractiveChannelCalls {
    private let core: SSHSessionCore<Engine>
    private let channel: UncheckedBox<Engine.Channel>
    private let control: ChannelControl
    private let isDirect: Bool

    init(core: SSHSessionCore<Engine>, channel: UncheckedBox<Engine.Channel>, control: ChannelControl, isDirect: Bool = false) {
        self.core = core
        self.channel = channel
        self.control = control
        self.isDirect = isDirect
    }

    func resize(columns: Int, rows: Int) { control.post(.resize(columns: columns, rows: rows)) }
    func write(_ data: Data) { control.post(.write(data)) }
    func endInput() { control.post(.endOfInput) }
    func close() { control.post(.close) }

    func run(input: FileDescriptor?, output: FileDescriptor, escapes: SSHEscapes?) async -> SSHChannelEnd {
        let output = output.rawValue
        return await core.runPump(channel, isDirect: isDirect, input: input?.rawValue, sink: descriptorSink(output: output, error: output),
                                  control: control, escapes: escapes)
    }

    func run(onOutput: @escaping @Sendable (Data) -> Void) async -> SSHChannelEnd {
        await core.runPump(channel, isDirect: isDirect, input: nil, sink: { _, bytes in onOutput(Data(bytes)); return true },
                           control: control, escapes: nil)
    }
}
