import AccessTransport
import FoundationEssentials
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The exec or shell channel a pump runs.
final class SessionChannel<Channel> {
    let raw: Channel
    /// A `direct-tcpip` channel (no command, no exit status): its end after the server's EOF is
    /// a close.
    let isDirect: Bool
    let input: Int32?
    let sink: OutputSink
    var escapes: SSHEscapes?
    var toSend = PumpBuffer()
    var inputEnded = false
    var eofSent = false
    var end: SSHChannelEnd?
    /// The channel ended by itself (the command exited): forwarded connections still open
    /// are carried to their end first, as OpenSSH does. Any other end stops everything.
    var endedByServer = false

    init(raw: Channel, isDirect: Bool = false, input: Int32?, sink: @escaping OutputSink, escapes: SSHEscapes?) {
        self.raw = raw
        self.isDirect = isDirect
        self.input = input
        self.sink = sink
        self.escapes = escapes
    }
}

/// One forwarded connection and its channel: accepted here for a local forward (a
/// `direct-tcpip` channel), or opened by the server for a remote forward or the agent (the
/// socket connects here).
final class ForwardedConnection<Channel> {
    private(set) var socket: Int32
    let origin: (host: String, port: Int)
    /// Who hears of the connection.
    let onEvent: (@Sendable (SSHForwardEvent) -> Void)?
    var channel: Channel?
    /// Read from the local socket, not yet taken by the channel.
    var toChannel = PumpBuffer()
    /// Read from the channel, not yet taken by the local socket.
    var toSocket = PumpBuffer()
    var localEOF = false
    var eofSent = false
    var remoteEOF = false
    var shutDown = false
    var failed = false
    var readable = false
    var writable = false
    /// Where the channel goes: the forward's target, or what a SOCKS client asked for.
    var target: (host: String, port: Int)
    /// A dynamic forward's SOCKS handshake, until the client named its target.
    var socks: SOCKSHandshake?
    /// The socket's connect to `target` is under way (a remote forward's connection), at the
    /// target's address of this index.
    var connecting: Int?
    /// How the origin is shown, when not as `origin`.
    private var shownOrigin: String?

    /// A connection accepted on `listener`.
    init(socket: Int32, origin: (host: String, port: Int), listener: SSHForwardListener) {
        self.socket = socket
        self.origin = origin
        onEvent = listener.onEvent
        target = (listener.forward.host, listener.forward.hostPort)
        if listener.forward.isDynamic { socks = SOCKSHandshake() }
    }

    /// A channel the server opened, carried to `socket` (connected to `target`, or connecting to
    /// its address `connecting`); `origin` as the server gave it.
    init(socket: Int32, channel: Channel, origin: String, target: (host: String, port: Int), connecting: Int?,
         onEvent: (@Sendable (SSHForwardEvent) -> Void)?) {
        self.socket = socket
        self.channel = channel
        self.origin = ("", 0)
        self.target = target
        self.connecting = connecting
        self.onEvent = onEvent
        shownOrigin = origin.isEmpty ? "the server" : origin
    }

    /// The socket, after the last one's connect failed (-1: none left).
    func replaceSocket(_ fd: Int32) { socket = fd }

    var originText: String {
        if let shownOrigin { return shownOrigin }
        return origin.host.contains(":") ? "[\(origin.host)]:\(origin.port)" : "\(origin.host):\(origin.port)"
    }

    /// Both directions ended (or something failed): the channel can be closed.
    var finished: Bool { failed || (shutDown && eofSent) }
}

/// Runs on the session's thread until the channel (if any) ends, carrying its data and that of
/// the session's local forwards in one `poll` loop, whichever library runs the session.
///
/// Issue 16 point 6 (downloads stalling until the next keepalive): both libraries read the
/// socket inside calls that are not reads of that channel (a write, which first takes in window
/// adjusts; another stream's or channel's read; a channel open) and keep what they parsed for
/// the channel it belongs to. Data left there while the socket is empty wakes no `poll`. The
/// rule: the pump sleeps only after a round in which nothing moved, nothing arrived from the
/// server, and no channel can make progress on what the library already holds (buffered data,
/// a window to write into), asked until a pass in which nothing arrived.
final class ChannelPump<Engine: SSHEngine> {
    typealias Channel = Engine.Channel
    let engine: Engine
    let control: ChannelControl
    var main: SessionChannel<Channel>?
    var forwards: [ForwardedConnection<Channel>] = []
    /// Accepted connections whose channel is not open yet; the first one's open is in flight
    /// (one channel is opened at a time).
    var opening: [ForwardedConnection<Channel>] = []
    /// Accepted connections of a dynamic forward whose SOCKS client has not named its target yet.
    var negotiating: [ForwardedConnection<Channel>] = []
    var accepting = true
    private let scratch: UnsafeMutableRawBufferPointer
    /// When the server last sent something, and the engine's mark then.
    private var lastInbound = Date()
    private var markSeen: UInt64 = 0

    static var chunk: Int { 256 * 1024 }

    init(engine: Engine, control: ChannelControl) {
        self.engine = engine
        self.control = control
        scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 16)
    }

    deinit {
        scratch.deallocate()
    }

    private var listeners: [SSHForwardListener] { engine.state.forwards.filter { !$0.isClosed } }

    /// Readiness seen by the last `poll`.
    private struct Readiness {
        var control = true
        var input = false
        var socketReadable = false
        var listeners: Set<Int32> = []
    }

    // MARK: The loop

    func run() -> SSHChannelEnd {
        defer { cleanUp() }
        lastInbound = Date()
        markSeen = engine.inboundMark
        let keepalive = engine.state.configuration.keepalive
        var ready = Readiness()
        while true {
            let markAtStart = engine.inboundMark
            var progress = false
            var readChannels = false

            for command in control.drain(pipeReadable: ready.control) {
                if let end = handle(command) { return end }
            }

            if let main, main.end == nil {
                progress = service(main, inputReadable: ready.input) || progress
                readChannels = true
            }
            if let main, let end = main.end {
                guard main.endedByServer else { return end }
                accepting = false
                if forwards.isEmpty { return end }
            }

            if accepting {
                for listener in listeners {
                    for fd in listener.descriptors where ready.listeners.contains(fd) {
                        progress = accept(on: fd, for: listener) || progress
                    }
                }
            }
            if accepting { progress = acceptInbound() || progress }
            progress = negotiate() || progress
            for forward in forwards {
                let (moved, read) = service(forward)
                progress = progress || moved
                readChannels = readChannels || read
            }
            if let end = closeFinishedForwards() { return end }
            switch openNext() {
            case .lost(let failure): return .lost(failure)
            case .moved(let moved): progress = progress || moved
            }

            // The socket said it had data, but no channel read it (all waiting on their local
            // side, or none open): the engine takes it in, so poll does not spin on it and
            // silence is not mistaken for a dead connection.
            if ready.socketReadable && !readChannels, let failure = engine.takeUnread() {
                return .lost(failure)
            }

            // Keepalives ask for a reply: too long without anything from the server means the
            // connection is dead even if no socket error says so.
            noteInbound()
            var untilKeepalive: TimeInterval?
            if keepalive.isEnabled {
                let (failure, next) = engine.keepalive(every: keepalive.effectiveInterval.seconds)
                if let failure { return .lost(failure) }
                untilKeepalive = next
                let silent = Date().timeIntervalSince(lastInbound)
                if keepalive.isConnectionLost(silence: .milliseconds(Int64(silent * 1000))) {
                    return .lost(SSHFailure(.connectionLost, "Connection lost: no answer to keepalives for \(Int(silent)) s"))
                }
            }
            if let failure = engine.endRound() { return .lost(failure) }
            if engine.isClosed { return .lost(engine.failure(0, "the session ran")) }

            // Sleep only when nothing can move without news from outside.
            var timeout: Int32 = -1
            if progress || engine.inboundMark != markAtStart || canProgressNow() {
                timeout = 0
            } else if let untilKeepalive {
                let silence = Duration.milliseconds(Int64(Date().timeIntervalSince(lastInbound) * 1000))
                let keepaliveMilliseconds = max(0, Int(untilKeepalive * 1000) + 1)
                let untilLoss = keepalive.remainingBeforeLoss(silence: silence).map { Int($0.seconds * 1000) + 10 }
                    ?? keepaliveMilliseconds
                timeout = Int32(clamping: max(0, min(keepaliveMilliseconds, untilLoss)))
            }
            switch wait(timeout: timeout) {
            case .ended(let end): return end
            case .ready(let seen): ready = seen
            }
        }
    }

    /// Moves `lastInbound` on when the engine's mark says something arrived.
    private func noteInbound() {
        let mark = engine.inboundMark
        if mark != markSeen {
            markSeen = mark
            lastInbound = Date()
        }
    }

    /// Whether a channel holds data it could take now, or has a window to write into: then the
    /// pump must not sleep. Asking may make the library read the socket and file what it reads
    /// under any channel, so the question is asked again until a pass in which nothing arrived.
    private func canProgressNow() -> Bool {
        while true {
            let seen = engine.inboundMark
            if anyChannelCanMove() { return true }
            if engine.inboundMark == seen { return false }
        }
    }

    private func anyChannelCanMove() -> Bool {
        let room = engine.acceptsChannelData
        if let main, main.end == nil {
            if engine.hasBufferedData(main.raw) { return true }
            if !main.toSend.isEmpty && room && engine.windowIsOpen(main.raw) { return true }
            if engine.isEOF(main.raw) { return true }
        }
        for forward in forwards {
            guard let channel = forward.channel, !forward.failed, forward.connecting == nil else { continue }
            if forward.toSocket.isEmpty && !forward.remoteEOF && engine.hasBufferedData(channel) { return true }
            if !forward.toChannel.isEmpty && room && engine.windowIsOpen(channel) { return true }
        }
        return false
    }

    private enum Waited {
        case ready(Readiness)
        case ended(SSHChannelEnd)
    }

    private func wait(timeout: Int32) -> Waited {
        var entries: [pollfd] = []
        var events: Int16 = engine.wantsInput ? Int16(POLLIN) : 0
        if engine.hasQueuedOutput { events |= Int16(POLLOUT) }
        entries.append(pollfd(fd: engine.fd, events: events, revents: 0))
        entries.append(pollfd(fd: control.readEnd, events: Int16(POLLIN), revents: 0))
        var inputIndex: Int?
        if let main, main.end == nil, let input = main.input, !main.inputEnded, main.toSend.count < 1 << 20 {
            inputIndex = entries.count
            entries.append(pollfd(fd: input, events: Int16(POLLIN), revents: 0))
        }
        let listenerStart = entries.count
        var listenerFDs: [Int32] = []
        if accepting {
            for listener in listeners {
                for fd in listener.descriptors {
                    listenerFDs.append(fd)
                    entries.append(pollfd(fd: fd, events: Int16(POLLIN), revents: 0))
                }
            }
        }
        let forwardStart = entries.count
        var polledForwards: [ForwardedConnection<Channel>] = []
        for forward in forwards where forward.channel != nil && !forward.failed {
            var wanted: Int16 = 0
            if forward.connecting != nil {
                polledForwards.append(forward)
                entries.append(pollfd(fd: forward.socket, events: Int16(POLLOUT), revents: 0))
                continue
            }
            if !forward.localEOF && forward.toChannel.count < Self.chunk { wanted |= Int16(POLLIN) }
            if !forward.toSocket.isEmpty { wanted |= Int16(POLLOUT) }
            guard wanted != 0 else { continue }
            polledForwards.append(forward)
            entries.append(pollfd(fd: forward.socket, events: wanted, revents: 0))
        }
        let negotiatingStart = entries.count
        for connection in negotiating {
            entries.append(pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0))
        }
        let count = poll(&entries, nfds_t(entries.count), timeout)
        let pollError = errno
        let socket = entries[0].revents
        engine.afterWait(socket, pumping: true)
        if count < 0 && pollError != EINTR {
            return .ended(.localOutputFailed("poll: \(SystemError(pollError).text)"))
        }
        var ready = Readiness()
        ready.socketReadable = socket & Int16(POLLIN) != 0
        if socket & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 && socket & Int16(POLLIN) == 0 {
            return .ended(.lost(SSHFailure(.connectionLost, "Connection lost: the tunnel closed")))
        }
        ready.control = entries[1].revents != 0
        if let inputIndex { ready.input = entries[inputIndex].revents != 0 }
        for (offset, fd) in listenerFDs.enumerated() where entries[listenerStart + offset].revents != 0 {
            ready.listeners.insert(fd)
        }
        for forward in forwards {
            forward.readable = false
            forward.writable = false
        }
        for (offset, connection) in negotiating.enumerated() {
            connection.readable = entries[negotiatingStart + offset].revents != 0
        }
        for (offset, forward) in polledForwards.enumerated() {
            let revents = entries[forwardStart + offset].revents
            forward.readable = revents & Int16(POLLIN | POLLHUP | POLLERR) != 0
            forward.writable = revents & Int16(POLLOUT | POLLHUP | POLLERR) != 0
        }
        return .ready(ready)
    }

    // MARK: The session channel

    private func handle(_ command: ChannelControl.Command) -> SSHChannelEnd? {
        guard let main, main.end == nil else {
            if case .close = command { return .closed }
            return nil
        }
        switch command {
        case .write(let data): main.toSend.append(data)
        case .endOfInput: main.inputEnded = true
        case .resize(let columns, let rows):
            if let failure = engine.resize(main.raw, columns: columns, rows: rows), failure.kind == .connectionLost {
                main.end = .lost(failure)
            }
        case .close:
            engine.closeNow(main.raw)
            main.end = .closed
        }
        return nil
    }

    /// Moves the session channel's data both ways; whether anything moved.
    private func service(_ main: SessionChannel<Channel>, inputReadable: Bool) -> Bool {
        var progress = false
        let fetched = readOutput(main)
        if let end = fetched.end {
            main.end = end
            return true
        }
        progress = progress || fetched.progress

        if inputReadable, let input = main.input, !main.inputEnded {
            let n = read(input, scratch.baseAddress, Self.chunk)
            if n > 0 {
                progress = true
                let bytes = UnsafeRawBufferPointer(rebasing: scratch[0..<n])
                if main.escapes != nil {
                    for action in main.escapes!.scan(bytes) {
                        switch action {
                        case .send(let out): out.withUnsafeBytes { main.toSend.append($0) }
                        case .help:
                            let text = Array(main.escapes!.helpText.utf8)
                            _ = text.withUnsafeBytes { main.sink(0, $0) }
                        case .disconnect:
                            // No wait for the server's close: this is the way out of a hung session.
                            engine.closeNow(main.raw)
                            main.end = .closed
                            return true
                        }
                    }
                } else {
                    main.toSend.append(bytes)
                }
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                main.inputEnded = true
            }
        }

        while !main.toSend.isEmpty && engine.acceptsChannelData {
            var result = ChannelWrite.blocked
            _ = main.toSend.consume { bytes in
                result = engine.write(main.raw, UnsafeRawBufferPointer(rebasing: bytes.prefix(Self.chunk)))
                if case .wrote(let n) = result { return n }
                return 0
            }
            switch result {
            case .wrote: progress = true
            case .blocked: break
            case .failed(let failure):
                main.end = .lost(failure)
                return true
            }
            guard case .wrote = result else { break }
        }
        if main.inputEnded && main.toSend.isEmpty && !main.eofSent && engine.acceptsChannelData {
            do {
                if try engine.sendEOF(main.raw) {
                    main.eofSent = true
                    progress = true
                }
            } catch {
                main.end = .lost(error)
                return true
            }
        }
        if engine.isEOF(main.raw) {
            let last = readOutput(main)
            if let end = last.end {
                main.end = end
            } else if engine.isEOF(main.raw) {
                if main.isDirect {
                    engine.closeNow(main.raw)
                    main.end = .closed
                } else {
                    main.end = engine.finish(main.raw)
                }
                main.endedByServer = true
            }
            return true
        }
        return progress
    }

    /// Reads what the library has for either stream and hands it to the sink. Stops after a
    /// few MiB so the rest of the loop (input, forwards, keepalives) gets its turn.
    private func readOutput(_ main: SessionChannel<Channel>) -> (progress: Bool, end: SSHChannelEnd?) {
        var progress = false
        var total = 0
        var again = true
        while again && total < 8 * Self.chunk {
            again = false
            for stream: Int32 in [0, 1] {
                while total < 8 * Self.chunk {
                    switch engine.read(main.raw, stream: stream, into: scratch) {
                    case .bytes(let n):
                        progress = true
                        again = true
                        total += n
                        if !main.sink(stream, UnsafeRawBufferPointer(rebasing: scratch[0..<n])) {
                            if errno == EPIPE { return (true, .outputClosed) }
                            return (true, .localOutputFailed(SystemError.current().text))
                        }
                        continue
                    case .nothing, .eof:
                        break
                    case .failed(let failure):
                        return (progress, .lost(failure))
                    }
                    break
                }
            }
        }
        return (progress, nil)
    }

    // MARK: Local forwards

    /// Accepts what waits on `fd`; the channels are opened one after another by `openNext`.
    private func accept(on fd: Int32, for listener: SSHForwardListener) -> Bool {
        var accepted = false
        for _ in 0..<64 {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let socket = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.accept(fd, $0, &length) }
            }
            guard socket >= 0 else { break }
            _ = fcntl(socket, F_SETFD, FD_CLOEXEC)
            _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) | O_NONBLOCK)
            var one: Int32 = 1
            _ = setsockopt(socket, SocketFlags.tcpLevel, SocketFlags.noDelay, &one, socklen_t(MemoryLayout<Int32>.size))
            let connection = ForwardedConnection<Channel>(socket: socket, origin: peerAddress(storage), listener: listener)
            if connection.socks != nil { negotiating.append(connection) } else { opening.append(connection) }
            accepted = true
        }
        return accepted
    }

    private enum Opened {
        case moved(Bool)
        case lost(SSHFailure)
    }

    /// Reads what the SOCKS clients of dynamic forwards sent: answers their greeting, queues the
    /// connections that named their target for a channel, closes the ones refused.
    private func negotiate() -> Bool {
        var moved = false
        var kept: [ForwardedConnection<Channel>] = []
        for connection in negotiating {
            guard connection.readable else {
                kept.append(connection)
                continue
            }
            connection.readable = false
            let n = recv(connection.socket, scratch.baseAddress, 4096, 0)
            guard n > 0 else {
                if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    _ = close(connection.socket)
                    moved = true
                } else {
                    kept.append(connection)
                }
                continue
            }
            moved = true
            switch connection.socks!.feed(UnsafeRawBufferPointer(rebasing: scratch[0..<n])) {
            case .needMore(let bytes):
                sendNow(connection.socket, bytes)
                kept.append(connection)
            case .connect(let host, let port):
                connection.target = (host, port)
                connection.socks!.takeRest().withUnsafeBytes { connection.toChannel.append($0) }
                opening.append(connection)
            case .refused(let bytes, let reason):
                sendNow(connection.socket, bytes)
                _ = close(connection.socket)
                connection.onEvent?(.openFailed(origin: connection.originText, reason: reason))
            }
        }
        negotiating = kept
        return moved
    }

    /// A short SOCKS answer, sent at once (a fresh local socket takes a few bytes).
    private func sendNow(_ socket: Int32, _ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, SocketFlags.noSignal) }
    }

    /// Drives the open of the first waiting connection's channel.
    private func openNext() -> Opened {
        guard let next = opening.first else { return .moved(false) }
        switch engine.openDirect(host: next.target.host, port: next.target.port, originHost: next.origin.host,
                                 originPort: next.origin.port) {
        case .again:
            return .moved(false)
        case .opened(let channel):
            opening.removeFirst()
            next.channel = channel
            // A SOCKS client hears of the success before any data.
            // (Nothing was read from the channel yet: the reply is the first thing to send.)
            if let socks = next.socks {
                socks.reply(succeeded: true).withUnsafeBytes { next.toSocket.append($0) }
                next.writable = true
            }
            forwards.append(next)
            next.onEvent?(.opened(origin: next.originText))
            return .moved(true)
        case .refused(let reason):
            opening.removeFirst()
            if let socks = next.socks { sendNow(next.socket, socks.reply(succeeded: false)) }
            _ = close(next.socket)
            next.onEvent?(.openFailed(origin: next.originText, reason: reason))
            return .moved(true)
        case .lost(let failure):
            return .lost(failure)
        }
    }

    /// Takes the channels the server opened (remote forwards' connections, the agent's) and
    /// starts their sockets' connects; a channel with nowhere to go is closed.
    private func acceptInbound() -> Bool {
        var moved = false
        while let inbound = engine.acceptInbound() {
            moved = true
            switch inbound {
            case .agent(let channel):
                guard let path = engine.state.configuration.agentForwarding,
                      let socket = try? AgentWire.connect(socketPath: path) else {
                    engine.release(channel)
                    continue
                }
                _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) | O_NONBLOCK)
                forwards.append(ForwardedConnection(socket: socket, channel: channel, origin: "the agent", target: ("agent", 0),
                                                    connecting: nil, onEvent: nil))
            case .forwarded(let channel, let port, let origin):
                guard let binding = engine.state.remoteForwards.first(where: { $0.boundPort == port }) else {
                    engine.release(channel)
                    continue
                }
                let target = (binding.forward.host, binding.forward.hostPort)
                switch OutboundConnect.start(host: target.0, port: target.1) {
                case .success(let started):
                    forwards.append(ForwardedConnection(socket: started.fd, channel: channel, origin: origin, target: target,
                                                        connecting: started.index, onEvent: binding.onEvent))
                case .failure(let failure):
                    engine.release(channel)
                    binding.onEvent?(.openFailed(origin: origin.isEmpty ? "the server" : origin, reason: failure.message))
                }
            }
        }
        return moved
    }

    /// A remote forward's socket whose connect finished: connected, or on to the target's next
    /// address, or failed (said to the forward's listener).
    private func finishConnect(_ forward: ForwardedConnection<Channel>) {
        guard let index = forward.connecting, forward.writable else { return }
        forward.writable = false
        guard let why = OutboundConnect.outcome(forward.socket) else {
            forward.connecting = nil
            forward.onEvent?(.opened(origin: forward.originText))
            return
        }
        _ = close(forward.socket)
        let reason = "connect to \(forward.target.host) port \(forward.target.port) failed: \(why)"
        if case .success(let next) = OutboundConnect.start(host: forward.target.host, port: forward.target.port, from: index + 1) {
            forward.replaceSocket(next.fd)
            forward.connecting = next.index
            return
        }
        forward.replaceSocket(-1)
        forward.failed = true
        forward.onEvent?(.openFailed(origin: forward.originText, reason: reason))
    }

    /// Moves one forwarded connection's data both ways; (progress, the library was read).
    private func service(_ forward: ForwardedConnection<Channel>) -> (Bool, Bool) {
        if forward.connecting != nil && !forward.failed {
            let before = forward.connecting
            finishConnect(forward)
            if forward.connecting != nil { return (forward.connecting != before, false) }
            if forward.failed { return (true, false) }
        }
        guard let channel = forward.channel, !forward.failed else { return (false, false) }
        var progress = false
        var readChannel = false
        // Local side → channel.
        if forward.readable && !forward.localEOF && forward.toChannel.count < Self.chunk {
            forward.readable = false
            let n = recv(forward.socket, scratch.baseAddress, Self.chunk - forward.toChannel.count, 0)
            if n > 0 {
                forward.toChannel.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                progress = true
            } else if n == 0 {
                forward.localEOF = true
                progress = true
            } else if errno != EAGAIN && errno != EINTR {
                forward.failed = true
                return (true, false)
            }
        }
        while !forward.toChannel.isEmpty && engine.acceptsChannelData {
            var result = ChannelWrite.blocked
            _ = forward.toChannel.consume { bytes in
                result = engine.write(channel, bytes)
                if case .wrote(let n) = result { return n }
                return 0
            }
            readChannel = true
            switch result {
            case .wrote: progress = true
            case .blocked: break
            case .failed:
                forward.failed = true
                return (true, true)
            }
            guard case .wrote = result else { break }
        }
        if forward.localEOF && forward.toChannel.isEmpty && !forward.eofSent {
            // An error here means the channel is gone: nothing more to send anyway.
            if (try? engine.sendEOF(channel)) != false {
                forward.eofSent = true
                progress = true
            }
        }
        // Channel → local side.
        if !forward.toSocket.isEmpty && forward.writable {
            forward.writable = false
            progress = flushToSocket(forward) || progress
        }
        while forward.toSocket.isEmpty && !forward.remoteEOF {
            readChannel = true
            // A direct-tcpip channel has no stderr; anything sent as such is read and dropped.
            while case .bytes = engine.read(channel, stream: 1, into: scratch) {}
            switch engine.read(channel, stream: 0, into: scratch) {
            case .bytes(let n):
                progress = true
                let sent = send(forward.socket, scratch.baseAddress, n, SocketFlags.noSignal)
                if sent < 0 && errno != EAGAIN && errno != EINTR {
                    forward.failed = true
                    return (true, true)
                }
                let taken = max(0, sent)
                if taken < n {
                    forward.toSocket.append(UnsafeRawBufferPointer(rebasing: scratch[taken..<n]))
                }
                continue
            case .nothing:
                if engine.isEOF(channel) {
                    forward.remoteEOF = true
                    progress = true
                }
            case .eof:
                forward.remoteEOF = true
                progress = true
            case .failed:
                forward.failed = true
                return (true, true)
            }
            break
        }
        if forward.remoteEOF && forward.toSocket.isEmpty && !forward.shutDown {
            _ = shutdown(forward.socket, SocketFlags.shutWrite)
            forward.shutDown = true
            progress = true
        }
        return (progress, readChannel)
    }

    private func flushToSocket(_ forward: ForwardedConnection<Channel>) -> Bool {
        var moved = false
        while !forward.toSocket.isEmpty {
            var failed = false
            let taken = forward.toSocket.consume { bytes in
                let n = send(forward.socket, bytes.baseAddress, bytes.count, SocketFlags.noSignal)
                if n < 0 && errno != EAGAIN && errno != EINTR { failed = true }
                return max(0, n)
            }
            if failed {
                forward.failed = true
                return true
            }
            if taken == 0 { break }
            moved = true
        }
        return moved
    }

    /// Closes the channels of finished connections and their sockets. Nil, or the end when
    /// the connection itself broke.
    private func closeFinishedForwards() -> SSHChannelEnd? {
        var kept: [ForwardedConnection<Channel>] = []
        for forward in forwards {
            guard forward.finished, let channel = forward.channel else {
                kept.append(forward)
                continue
            }
            engine.release(channel)
            _ = close(forward.socket)
            forward.channel = nil
        }
        forwards = kept
        if engine.isClosed { return .lost(engine.failure(0, "forwarding")) }
        return nil
    }

    /// The end: the session channel freed, forwarded connections and their channels closed.
    private func cleanUp() {
        if let main { engine.free(main.raw) }
        for forward in forwards + opening + negotiating {
            if let channel = forward.channel { engine.free(channel) }
            _ = close(forward.socket)
        }
        negotiating = []
        engine.cancelDirectOpen()
        forwards = []
        opening = []
        engine.settle(until: Date(timeIntervalSinceNow: 1))
    }
}
