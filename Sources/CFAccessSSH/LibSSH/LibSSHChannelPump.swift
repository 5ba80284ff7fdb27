import AccessTransport
import FoundationEssentials
import SystemPackage
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// The exec or shell channel a pump runs.
final class SessionChannel {
    let raw: OpaquePointer
    let exit: ChannelExit
    let input: Int32?
    let sink: OutputSink
    var escapes: SSHEscapes?
    var toSend = PumpBuffer()
    var inputEnded: Bool
    var eofSent = false
    var end: SSHChannelEnd?
    /// The channel ended by itself (the command exited): forwarded connections still open
    /// are carried to their end first, as OpenSSH does. Any other end stops everything.
    var endedByServer = false

    init(raw: OpaquePointer, exit: ChannelExit, input: Int32?, sink: @escaping OutputSink, escapes: SSHEscapes?) {
        self.raw = raw
        self.exit = exit
        self.input = input
        self.sink = sink
        self.escapes = escapes
        self.inputEnded = false
    }
}

/// One accepted connection of a local forward and its `direct-tcpip` channel.
final class ForwardedConnection {
    let socket: Int32
    let origin: (host: String, port: Int)
    let listener: SSHForwardListener
    var channel: OpaquePointer?
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

    init(socket: Int32, origin: (host: String, port: Int), listener: SSHForwardListener) {
        self.socket = socket
        self.origin = origin
        self.listener = listener
    }

    var originText: String { origin.host.contains(":") ? "[\(origin.host)]:\(origin.port)" : "\(origin.host):\(origin.port)" }

    /// Both directions ended (or something failed): the channel can be closed.
    var finished: Bool { failed || (shutDown && eofSent) }
}

/// How a session channel ended, as the server said it (exit-status, exit-signal): filled in by
/// libssh's channel callbacks, which also keep the callback table alive as long as the channel.
final class ChannelExit: @unchecked Sendable {
    var status: Int32?
    var signal: String?
    let callbacks: UnsafeMutablePointer<ssh_channel_callbacks_struct>

    init() {
        callbacks = UnsafeMutablePointer<ssh_channel_callbacks_struct>.allocate(capacity: 1)
        callbacks.initialize(to: ssh_channel_callbacks_struct())
        callbacks.pointee.size = MemoryLayout<ssh_channel_callbacks_struct>.size
        callbacks.pointee.userdata = Unmanaged.passUnretained(self).toOpaque()
        callbacks.pointee.channel_exit_status_function = exitStatusCallback
        callbacks.pointee.channel_exit_signal_function = exitSignalCallback
    }

    /// Registers the callbacks on `channel` (which must not outlive this object).
    func attach(to channel: OpaquePointer) {
        _ = ssh_set_channel_callbacks(channel, callbacks)
    }

    deinit {
        callbacks.deallocate()
    }

    /// The end the server reported (a signal wins over a status), or `-1` when it said neither.
    var end: SSHChannelEnd {
        if let signal { return .signalled(signal) }
        return .exited(status ?? -1)
    }
}

private let exitStatusCallback: @convention(c) (OpaquePointer?, OpaquePointer?, Int32, UnsafeMutableRawPointer?) -> Void = {
    _, _, status, userdata in
    guard let userdata else { return }
    Unmanaged<ChannelExit>.fromOpaque(userdata).takeUnretainedValue().status = status
}

private let exitSignalCallback: @convention(c) (
    OpaquePointer?, OpaquePointer?, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
    UnsafeMutableRawPointer?
) -> Void = { _, _, signal, _, _, _, userdata in
    guard let userdata, let signal else { return }
    // The signal's name is the server's text: visible-safe before it is a value.
    let name = ServerText.visible(String(cString: signal), limit: 64)
    Unmanaged<ChannelExit>.fromOpaque(userdata).takeUnretainedValue().signal = name.isEmpty ? "unknown" : name
}

/// Runs on the session's thread until the channel (if any) ends, carrying its data and that of
/// the session's local forwards in one `poll` loop.
///
/// Issue 16 point 6 (downloads stalling until the next keepalive): the SSH library reads the
/// socket inside calls that are not reads of that channel (a write, another channel's read, a
/// channel open) and keeps what it parsed in the buffer of the channel it belongs to. Data left
/// there while the socket is empty wakes no `poll`. The rule: the pump sleeps only after a round
/// in which nothing moved and no channel holds data it could take (`ssh_channel_poll` on every
/// channel, which also reads what the socket has, is asked last).
final class SessionPump {
    let session: LibSSHSession
    let control: ChannelControl
    var main: SessionChannel?
    var forwards: [ForwardedConnection] = []
    /// Accepted connections whose channel is not open yet; the first one's open is in flight
    /// (one channel is opened at a time).
    var opening: [ForwardedConnection] = []
    private var openingChannel: OpaquePointer?
    var accepting = true
    private let scratch: UnsafeMutableRawBufferPointer
    /// When the server last sent a packet, and how many it had sent then.
    private var lastInbound = Date()
    private var packetsSeen: UInt64 = 0
    private var nextKeepalive = Date()

    static let chunk = 256 * 1024

    init(session: LibSSHSession, control: ChannelControl) {
        self.session = session
        self.control = control
        scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: SessionPump.chunk, alignment: 16)
    }

    deinit {
        scratch.deallocate()
    }

    private var raw: OpaquePointer { session.raw }
    private var listeners: [SSHForwardListener] { session.box.forwards.filter { !$0.isClosed } }
    /// libssh holds bytes it could not send yet: no more channel data until the socket took them.
    private var writePending: Bool { session.writePending }

    /// Readiness seen by the last `poll`.
    private struct Readiness {
        var control = true
        var input = false
        var listeners: Set<Int32> = []
    }

    // MARK: The loop

    func run() -> SSHChannelEnd {
        defer { cleanUp() }
        lastInbound = Date()
        packetsSeen = session.box.received.pointee.in_packets
        let keepalive = session.configuration.keepalive
        nextKeepalive = Date().addingTimeInterval(keepalive.effectiveInterval.seconds)
        var ready = Readiness()
        while true {
            var progress = false

            for command in control.drain(pipeReadable: ready.control) {
                if let end = handle(command) { return end }
            }

            if let main, main.end == nil {
                progress = service(main, inputReadable: ready.input) || progress
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
            for forward in forwards {
                progress = service(forward) || progress
            }
            if let end = closeFinishedForwards() { return end }
            switch openNext() {
            case .lost(let failure): return .lost(failure)
            case .moved(let moved): progress = progress || moved
            }
            // libssh sends a packet at once only when its last poll found the socket writable,
            // and a channel read that finds data buffered does not poll: what is queued is sent
            // here (this polls only while something is queued; the channel reads and
            // canProgressNow read the socket).
            _ = ssh_blocking_flush(raw, 0)

            // Keepalives ask for a reply: too long without a packet from the server means the
            // connection is dead even if no socket error says so.
            let packets = session.box.received.pointee.in_packets
            if packets != packetsSeen {
                packetsSeen = packets
                lastInbound = Date()
            }
            if keepalive.isEnabled {
                if Date() >= nextKeepalive {
                    sendKeepalive()
                    nextKeepalive = Date().addingTimeInterval(keepalive.effectiveInterval.seconds)
                }
                let silent = Date().timeIntervalSince(lastInbound)
                if keepalive.isConnectionLost(silence: .milliseconds(Int64(silent * 1000))) {
                    return .lost(SSHFailure(.connectionLost, "Connection lost: no answer to keepalives for \(Int(silent)) s"))
                }
            }
            if session.isClosed {
                return .lost(session.failure("the session ran"))
            }

            // Sleep only when nothing can move without news from outside.
            var timeout: Int32 = -1
            if progress || canProgressNow() {
                timeout = 0
            } else if keepalive.isEnabled {
                let untilKeepalive = max(0, Int(nextKeepalive.timeIntervalSinceNow * 1000) + 1)
                let silence = Duration.milliseconds(Int64(Date().timeIntervalSince(lastInbound) * 1000))
                let untilLoss = keepalive.remainingBeforeLoss(silence: silence).map { Int($0.seconds * 1000) + 10 } ?? untilKeepalive
                timeout = Int32(clamping: max(0, min(untilKeepalive, untilLoss)))
            }
            switch wait(timeout: timeout) {
            case .ended(let end): return end
            case .ready(let seen): ready = seen
            }
        }
    }

    /// OpenSSH's `keepalive@openssh.com` global request, which asks for a reply. libssh keeps one
    /// such request at a time: a call while the last reply is unread only reads it, so a second
    /// call sends the next request (and does nothing while the server has not answered yet).
    private func sendKeepalive() {
        _ = ssh_send_keepalive(raw)
        _ = ssh_send_keepalive(raw)
    }

    /// Whether a channel holds data it could take now, or has a window to write into: then the
    /// pump must not sleep. `ssh_channel_poll` also reads what the socket has.
    private func canProgressNow() -> Bool {
        // libssh reads the socket whenever a channel's buffer it is asked about is empty, and
        // files what it reads under the channel it belongs to: asking about stderr can fill
        // stdout, asking about one channel can fill another. So the question is asked again
        // until a pass in which no packet arrived.
        while true {
            let seen = session.box.received.pointee.in_packets
            if anyChannelCanMove() { return true }
            if session.box.received.pointee.in_packets == seen { return false }
        }
    }

    private func anyChannelCanMove() -> Bool {
        let room = !writePending
        if let main, main.end == nil {
            if buffered(main.raw) { return true }
            if !main.toSend.isEmpty && room && ssh_channel_window_size(main.raw) > 0 { return true }
        }
        for forward in forwards {
            guard let channel = forward.channel, !forward.failed else { continue }
            if forward.toSocket.isEmpty && !forward.remoteEOF && buffered(channel) { return true }
            if !forward.toChannel.isEmpty && room && ssh_channel_window_size(channel) > 0 { return true }
        }
        if let main, main.end == nil, ssh_channel_is_eof(main.raw) != 0 { return true }
        return false
    }

    /// Data (or its end) waits in `channel`'s buffers.
    private func buffered(_ channel: OpaquePointer) -> Bool {
        let out = ssh_channel_poll(channel, 0)
        if out > 0 || out == SSH_EOF { return true }
        let err = ssh_channel_poll(channel, 1)
        return err > 0
    }

    private enum Waited {
        case ready(Readiness)
        case ended(SSHChannelEnd)
    }

    private func wait(timeout: Int32) -> Waited {
        var entries: [pollfd] = []
        var events = Int16(POLLIN)
        if writePending { events |= Int16(POLLOUT) }
        entries.append(pollfd(fd: session.fd, events: events, revents: 0))
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
        var polledForwards: [ForwardedConnection] = []
        for forward in forwards where forward.channel != nil && !forward.failed {
            var wanted: Int16 = 0
            if !forward.localEOF && forward.toChannel.count < SessionPump.chunk { wanted |= Int16(POLLIN) }
            if !forward.toSocket.isEmpty { wanted |= Int16(POLLOUT) }
            guard wanted != 0 else { continue }
            polledForwards.append(forward)
            entries.append(pollfd(fd: forward.socket, events: wanted, revents: 0))
        }
        let count = poll(&entries, nfds_t(entries.count), timeout)
        if count < 0 && errno != EINTR {
            return .ended(.localOutputFailed("poll: \(String(cString: strerror(errno)))"))
        }
        var ready = Readiness()
        let socket = entries[0].revents
        if socket & Int16(POLLIN | POLLOUT) != 0 {
            // Let libssh send what waits for the socket to take it (and read what came, in the
            // same poll). With nothing queued this does nothing: the next round's reads read.
            _ = ssh_blocking_flush(raw, 0)
        }
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
            // A window-change asks for no reply: it only queues a packet.
            if ssh_channel_change_pty_size(main.raw, Int32(columns), Int32(rows)) == SSH_ERROR {
                let failure = session.failure("resizing the terminal")
                if failure.kind == .connectionLost { main.end = .lost(failure) }
            }
        case .close:
            _ = ssh_channel_close(main.raw)
            main.end = .closed
        }
        return nil
    }

    /// Moves the session channel's data both ways; whether anything moved.
    private func service(_ main: SessionChannel, inputReadable: Bool) -> Bool {
        var progress = false
        let fetched = readOutput(main)
        if let end = fetched.end {
            main.end = end
            return true
        }
        progress = progress || fetched.progress

        if inputReadable, let input = main.input, !main.inputEnded {
            let n = read(input, scratch.baseAddress, SessionPump.chunk)
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
                            _ = ssh_channel_close(main.raw)
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

        while !main.toSend.isEmpty && !writePending {
            var rc: Int32 = 0
            _ = main.toSend.consume { bytes in
                rc = ssh_channel_write(main.raw, bytes.baseAddress, UInt32(min(bytes.count, SessionPump.chunk)))
                return Int(max(0, rc))
            }
            if rc > 0 {
                progress = true
            } else if rc == 0 || rc == SSH_AGAIN {
                break
            } else {
                main.end = .lost(session.failure("writing to the channel"))
                return true
            }
        }
        if main.inputEnded && main.toSend.isEmpty && !main.eofSent && !writePending {
            let rc = ssh_channel_send_eof(main.raw)
            if rc == SSH_OK {
                main.eofSent = true
                progress = true
            } else if rc != SSH_AGAIN {
                main.end = .lost(session.failure("ending the command's input"))
                return true
            }
        }
        if ssh_channel_is_eof(main.raw) != 0 {
            let last = readOutput(main)
            if let end = last.end {
                main.end = end
                return true
            }
            if ssh_channel_poll(main.raw, 0) == SSH_EOF && ssh_channel_poll(main.raw, 1) <= 0 {
                main.end = finish(main)
                main.endedByServer = true
                return true
            }
            return true
        }
        return progress
    }

    /// Reads what libssh has for either stream and hands it to the sink. Stops after a few MiB
    /// so the rest of the loop (input, forwards, keepalives) gets its turn.
    private func readOutput(_ main: SessionChannel) -> (progress: Bool, end: SSHChannelEnd?) {
        var progress = false
        var total = 0
        var again = true
        while again && total < 8 * SessionPump.chunk {
            again = false
            for stream: Int32 in [0, 1] {
                while total < 8 * SessionPump.chunk {
                    let n = Int(ssh_channel_read_nonblocking(main.raw, scratch.baseAddress, UInt32(SessionPump.chunk), stream))
                    if n > 0 {
                        progress = true
                        again = true
                        total += n
                        if !main.sink(stream, UnsafeRawBufferPointer(rebasing: scratch[0..<n])) {
                            if errno == EPIPE { return (true, .outputClosed) }
                            return (true, .localOutputFailed(String(cString: strerror(errno))))
                        }
                        continue
                    }
                    if n == 0 || n == Int(SSH_EOF) || n == Int(SSH_AGAIN) { break }
                    return (progress, .lost(session.failure("reading from the channel")))
                }
            }
        }
        return (progress, nil)
    }

    /// The remote side sent EOF and every byte was read: wait (bounded) for its exit status and
    /// close, then close our side.
    private func finish(_ main: SessionChannel) -> SSHChannelEnd {
        let deadline = Date(timeIntervalSinceNow: 5)
        // The exit-status (or -signal) comes before the server's close; wait for one of them.
        while main.exit.status == nil && main.exit.signal == nil && ssh_channel_is_closed(main.raw) == 0 && !session.isClosed {
            guard (try? session.waitSocket(until: deadline, what: "closing the channel")) != nil else { break }
            // Not ssh_channel_poll: after the server's EOF it answers without reading the socket.
            // This call reads what arrived (once, the session being non-blocking).
            _ = ssh_channel_get_exit_status(main.raw)
        }
        _ = ssh_channel_close(main.raw)
        return main.exit.end
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
            _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            opening.append(ForwardedConnection(socket: socket, origin: peerAddress(storage), listener: listener))
            accepted = true
        }
        return accepted
    }

    private enum Opened {
        case moved(Bool)
        case lost(SSHFailure)
    }

    /// Drives the open of the first waiting connection's channel.
    private func openNext() -> Opened {
        guard let next = opening.first else { return .moved(false) }
        let forward = next.listener.forward
        if openingChannel == nil {
            guard let channel = ssh_channel_new(raw) else { return .lost(session.failure("opening a forwarded connection")) }
            openingChannel = channel
        }
        let channel = openingChannel!
        let rc = ssh_channel_open_forward(channel, forward.host, Int32(forward.hostPort), next.origin.host, Int32(next.origin.port))
        if rc == SSH_AGAIN { return .moved(false) }
        openingChannel = nil
        opening.removeFirst()
        if rc == SSH_OK {
            next.channel = channel
            forwards.append(next)
            next.listener.onEvent?(.opened(origin: next.originText))
            return .moved(true)
        }
        let failure = session.failure("opening a forwarded connection")
        let reason = openFailureReason()
        ssh_channel_free(channel)
        if failure.kind == .connectionLost || failure.kind == .timedOut { return .lost(failure) }
        _ = close(next.socket)
        next.listener.onEvent?(.openFailed(origin: next.originText, reason: reason))
        return .moved(true)
    }

    /// The server's reason for refusing a channel, in OpenSSH's words (see
    /// ``ChannelOpenFailure/reason(libsshError:)``).
    private func openFailureReason() -> String {
        ChannelOpenFailure.reason(libsshError: session.lastErrorText())
    }

    /// Moves one forwarded connection's data both ways; whether anything moved.
    private func service(_ forward: ForwardedConnection) -> Bool {
        guard let channel = forward.channel, !forward.failed else { return false }
        var progress = false
        // Local side → channel.
        if forward.readable && !forward.localEOF && forward.toChannel.count < SessionPump.chunk {
            forward.readable = false
            let n = recv(forward.socket, scratch.baseAddress, SessionPump.chunk - forward.toChannel.count, 0)
            if n > 0 {
                forward.toChannel.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                progress = true
            } else if n == 0 {
                forward.localEOF = true
                progress = true
            } else if errno != EAGAIN && errno != EINTR {
                forward.failed = true
                return true
            }
        }
        while !forward.toChannel.isEmpty && !writePending {
            var rc: Int32 = 0
            _ = forward.toChannel.consume { bytes in
                rc = ssh_channel_write(channel, bytes.baseAddress, UInt32(bytes.count))
                return Int(max(0, rc))
            }
            if rc > 0 {
                progress = true
            } else if rc == 0 || rc == SSH_AGAIN {
                break
            } else {
                forward.failed = true
                return true
            }
        }
        if forward.localEOF && forward.toChannel.isEmpty && !forward.eofSent {
            let rc = ssh_channel_send_eof(channel)
            if rc != SSH_AGAIN {
                forward.eofSent = true   // an error here means the channel is gone: nothing more to send anyway
                progress = true
            }
        }
        // Channel → local side.
        if !forward.toSocket.isEmpty && forward.writable {
            forward.writable = false
            progress = flushToSocket(forward) || progress
        }
        while forward.toSocket.isEmpty && !forward.remoteEOF {
            // A direct-tcpip channel has no stderr; anything sent as such is read and dropped.
            while ssh_channel_read_nonblocking(channel, scratch.baseAddress, UInt32(SessionPump.chunk), 1) > 0 {}
            let n = Int(ssh_channel_read_nonblocking(channel, scratch.baseAddress, UInt32(SessionPump.chunk), 0))
            if n > 0 {
                progress = true
                let sent = send(forward.socket, scratch.baseAddress, n, Int32(MSG_NOSIGNAL))
                if sent < 0 && errno != EAGAIN && errno != EINTR {
                    forward.failed = true
                    return true
                }
                let taken = max(0, sent)
                if taken < n {
                    forward.toSocket.append(UnsafeRawBufferPointer(rebasing: scratch[taken..<n]))
                }
                continue
            }
            if n == 0 || n == Int(SSH_AGAIN) { break }
            if n == Int(SSH_EOF) || ssh_channel_is_eof(channel) != 0 {
                forward.remoteEOF = true
                progress = true
                break
            }
            forward.failed = true
            return true
        }
        if forward.remoteEOF && forward.toSocket.isEmpty && !forward.shutDown {
            _ = shutdown(forward.socket, Int32(SHUT_WR))
            forward.shutDown = true
            progress = true
        }
        return progress
    }

    private func flushToSocket(_ forward: ForwardedConnection) -> Bool {
        var moved = false
        while !forward.toSocket.isEmpty {
            var failed = false
            let taken = forward.toSocket.consume { bytes in
                let n = send(forward.socket, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
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

    /// Closes the channels of finished connections (libssh frees a channel whose close is still
    /// on its way once the server's close comes) and their sockets. Nil, or the end when the
    /// connection itself broke.
    private func closeFinishedForwards() -> SSHChannelEnd? {
        var kept: [ForwardedConnection] = []
        for forward in forwards {
            guard forward.finished, let channel = forward.channel else {
                kept.append(forward)
                continue
            }
            _ = ssh_channel_close(channel)
            ssh_channel_free(channel)
            _ = close(forward.socket)
            forward.channel = nil
        }
        forwards = kept
        if session.isClosed {
            return .lost(session.failure("forwarding"))
        }
        return nil
    }

    /// The end: the session channel freed, forwarded connections and their channels closed.
    private func cleanUp() {
        if let main { ssh_channel_free(main.raw) }
        for forward in forwards + opening {
            if let channel = forward.channel { ssh_channel_free(channel) }
            _ = close(forward.socket)
        }
        if let openingChannel { ssh_channel_free(openingChannel) }
        openingChannel = nil
        forwards = []
        opening = []
        session.flushOutput(until: Date(timeIntervalSinceNow: 1))
    }
}

extension LibSSHSession {
    /// Runs a started channel (or, with nil, only the session's forwards) until it ends: its
    /// output to `sink`, `input` (read when it is readable, through `escapes` if given) and
    /// posted writes to the channel, resizes and EOF from `control`, keepalives as
    /// `configuration.keepalive` says, and the forwards registered with `addForward(_:)`.
    /// Frees the channel. Runs on the session's thread.
    func pump(channel: ChannelHandle?, input: Int32?, sink: @escaping OutputSink, control: ChannelControl,
              escapes: SSHEscapes?) -> SSHChannelEnd {
        let pump = SessionPump(session: self, control: control)
        if let channel {
            pump.main = SessionChannel(raw: channel.raw, exit: channel.exit, input: input, sink: sink, escapes: escapes)
        }
        return pump.run()
    }

    /// Adds `listener` to the forwards the pump serves (on the session's thread).
    func addForward(_ listener: SSHForwardListener) {
        box.forwards.append(listener)
    }
}

/// Why a server refused to open a channel (RFC 4254 §5.1), as OpenSSH's ssh says it
/// (`connect failed: Connection refused`).
enum ChannelOpenFailure {
    /// The reason codes' names, as OpenSSH prints them.
    static let names: [Int: String] = [1: "administratively prohibited", 2: "connect failed",
                                       3: "unknown channel type", 4: "resource shortage"]

    /// From libssh 0.10's message, `Channel opening failure: channel 54 error (2) Connection
    /// refused`: the code's name, then the server's own description (already visible-safe).
    /// Another message is returned as it is.
    static func reason(libsshError text: String) -> String {
        guard let marker = text.firstRange(of: "error (") else { return text }
        let rest = text[marker.upperBound...]
        guard let close = rest.firstIndex(of: ")"), let code = Int(rest[..<close]) else { return text }
        let description = String(rest[rest.index(after: close)...]).trimmingHorizontalWhitespace
        let name = names[code] ?? "reason \(code)"
        return description.isEmpty ? name : "\(name): \(description)"
    }
}
