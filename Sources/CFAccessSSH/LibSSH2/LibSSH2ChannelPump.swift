import AccessTransport
import FoundationEssentials
import SystemPackage
internal import CCFSSH2
// The socket constants (SHUT_WR, MSG_NOSIGNAL, IPPROTO_TCP) come with the first C module that
// includes their headers, here libssh's.
internal import CCFLibSSH
#if canImport(Glibc)
import Glibc
#endif

/// The exec or shell channel a pump runs.
final class SSH2SessionChannel {
    let raw: OpaquePointer
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

    init(raw: OpaquePointer, input: Int32?, sink: @escaping OutputSink, escapes: SSHEscapes?) {
        self.raw = raw
        self.input = input
        self.sink = sink
        self.escapes = escapes
        self.inputEnded = false
    }
}

/// One accepted connection of a local forward and its `direct-tcpip` channel.
final class SSH2ForwardedConnection {
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

/// Runs on the session's thread until the channel (if any) ends, carrying its data and that of
/// the session's local forwards in one `poll` loop.
///
/// Issue 16 point 6 (downloads stalling until the next keepalive): libssh2 reads the socket
/// inside *every* call that can read — a read of stderr, a write (which first drains incoming
/// window adjusts), a channel open — and queues what it parsed for whichever channel it belongs
/// to. The old pump read stdout until EAGAIN, then stderr; when stderr's read pulled in the
/// server's next stdout packet, that packet sat in libssh2's queue while the socket was empty,
/// the pump slept in `poll` until the keepalive timer, and the server, out of window, sent
/// nothing more. The rule now: the pump sleeps only after a round in which no byte arrived from
/// the socket and no channel can make progress on what libssh2 already holds (read_avail, a
/// window to write into); and a recv that found the socket empty makes every later recv of the
/// round return EAGAIN without looking (``SocketIO``), so what arrives meanwhile stays in the
/// kernel, where `poll` sees it.
final class SSH2SessionPump {
    let session: LibSSH2Session
    let io: SocketIO
    let control: ChannelControl
    var main: SSH2SessionChannel?
    var forwards: [SSH2ForwardedConnection] = []
    /// Accepted connections whose channel is not open yet; the first one's open is in flight
    /// (libssh2 opens one channel at a time).
    var opening: [SSH2ForwardedConnection] = []
    var accepting = true
    private let scratch: UnsafeMutableRawBufferPointer

    static let chunk = 256 * 1024

    init(session: LibSSH2Session, control: ChannelControl) {
        self.session = session
        self.io = session.box.io
        self.control = control
        scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: SSH2SessionPump.chunk, alignment: 16)
    }

    deinit {
        scratch.deallocate()
    }

    private var raw: OpaquePointer { session.raw }
    private var listeners: [SSHForwardListener] { session.box.forwards.filter { !$0.isClosed } }

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
        io.lastInbound = Date()
        var ready = Readiness()
        while true {
            io.receivedThisRound = 0
            var progress = false
            var readSomething = false

            for command in control.drain(pipeReadable: ready.control) {
                if let end = handle(command) { return end }
            }

            if let main, main.end == nil {
                let (moved, read) = service(main, inputReadable: ready.input)
                progress = progress || moved
                readSomething = readSomething || read
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
                let (moved, read) = service(forward)
                progress = progress || moved
                readSomething = readSomething || read
            }
            if let end = closeFinishedForwards() { return end }
            switch openNext() {
            case .lost(let failure): return .lost(failure)
            case .moved(let moved): progress = progress || moved
            }

            // The socket said it had data, but no channel read it (all waiting on their local
            // side, or none open): take it into our buffer, so poll does not spin on it and
            // silence is not mistaken for a dead connection.
            if ready.socketReadable && !readSomething && !io.drained, let failure = io.fill() {
                return .lost(failure)
            }

            var nextKeepalive: Int32 = 0
            let keepalive = session.configuration.keepalive
            if keepalive.isEnabled {
                let rc = libssh2_keepalive_send(raw, &nextKeepalive)
                if rc < 0 && rc != LIBSSH2_ERROR_EAGAIN { return .lost(session.failure(rc, "sending a keepalive")) }
                // Keepalives ask for a reply: too long without a byte from the server means the
                // connection is dead even if no socket error says so.
                let silent = Date().timeIntervalSince(io.lastInbound)
                if keepalive.isConnectionLost(silence: .milliseconds(Int64(silent * 1000))) {
                    return .lost(SSHFailure(.connectionLost, "Connection lost: no answer to keepalives for \(Int(silent)) s"))
                }
            }
            if !io.flush() {
                return .lost(SSHFailure(.connectionLost, "Connection lost: \(io.sendErrorText ?? "the tunnel closed")"))
            }

            // Sleep only when nothing can move without news from outside.
            let busy = progress || io.receivedThisRound > 0 || canProgressNow()
            var timeout: Int32 = -1
            if busy {
                timeout = 0
            } else if keepalive.isEnabled {
                let untilKeepalive = max(1, Int(nextKeepalive)) * 1000
                let silence = Duration.milliseconds(Int64(Date().timeIntervalSince(io.lastInbound) * 1000))
                let untilLoss = keepalive.remainingBeforeLoss(silence: silence).map { Int($0.seconds * 1000) + 10 } ?? untilKeepalive
                timeout = Int32(clamping: max(0, min(untilKeepalive, untilLoss)))
            }
            switch wait(timeout: timeout) {
            case .ended(let end): return end
            case .ready(let seen): ready = seen
            }
        }
    }

    /// Whether a channel can move data that libssh2 already holds (or into a window it already
    /// has): then the pump must not sleep.
    private func canProgressNow() -> Bool {
        let room = io.pendingOutbound < SocketIO.highWater
        if io.bufferedInbound > 0 && (main.map { $0.end == nil } ?? false || forwards.contains { $0.channel != nil && !$0.failed } || !opening.isEmpty) {
            return true
        }
        if let main, main.end == nil {
            if readAvailable(main.raw) > 0 { return true }
            if !main.toSend.isEmpty && room && libssh2_channel_window_write_ex(main.raw, nil) > 0 { return true }
        }
        for forward in forwards {
            guard let channel = forward.channel, !forward.failed else { continue }
            if forward.toSocket.isEmpty && !forward.remoteEOF && readAvailable(channel) > 0 { return true }
            if !forward.toChannel.isEmpty && room && libssh2_channel_window_write_ex(channel, nil) > 0 { return true }
        }
        return false
    }

    private func readAvailable(_ channel: OpaquePointer) -> UInt {
        var available: UInt = 0
        _ = libssh2_channel_window_read_ex(channel, &available, nil)
        return available
    }

    private enum Waited {
        case ready(Readiness)
        case ended(SSHChannelEnd)
    }

    private func wait(timeout: Int32) -> Waited {
        var entries: [pollfd] = []
        var events = Int16(POLLIN)
        if io.bufferedInbound >= SocketIO.inboundLimit { events = 0 }
        if io.pendingOutbound > 0 { events |= Int16(POLLOUT) }
        entries.append(pollfd(fd: io.fd, events: events, revents: 0))
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
        var polledForwards: [SSH2ForwardedConnection] = []
        for forward in forwards where forward.channel != nil && !forward.failed {
            var wanted: Int16 = 0
            if !forward.localEOF && forward.toChannel.count < SSH2SessionPump.chunk { wanted |= Int16(POLLIN) }
            if !forward.toSocket.isEmpty { wanted |= Int16(POLLOUT) }
            guard wanted != 0 else { continue }
            polledForwards.append(forward)
            entries.append(pollfd(fd: forward.socket, events: wanted, revents: 0))
        }
        let count = poll(&entries, nfds_t(entries.count), timeout)
        io.polled()
        if count < 0 && errno != EINTR {
            return .ended(.localOutputFailed("poll: \(String(cString: strerror(errno)))"))
        }
        var ready = Readiness()
        let session = entries[0].revents
        if session & Int16(POLLOUT) != 0 { io.flush() }
        if session & Int16(POLLIN) != 0 { ready.socketReadable = true }
        if session & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 && session & Int16(POLLIN) == 0 {
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
            let rc = try? session.retry("resizing", until: Date(timeIntervalSinceNow: 5)) {
                libssh2_channel_request_pty_size_ex(main.raw, Int32(columns), Int32(rows), 0, 0)
            }
            if let rc, rc < 0 {
                let failure = session.failure(rc, "resizing the terminal")
                if failure.kind == .connectionLost { main.end = .lost(failure) }
            }
        case .close:
            _ = try? session.retry("closing the channel", until: Date(timeIntervalSinceNow: 5)) { libssh2_channel_close(main.raw) }
            main.end = .closed
        }
        return nil
    }

    /// Moves the session channel's data both ways; (progress, read from libssh2).
    private func service(_ main: SSH2SessionChannel, inputReadable: Bool) -> (Bool, Bool) {
        var progress = false
        let fetched = readOutput(main)
        if let end = fetched.end {
            main.end = end
            return (true, true)
        }
        progress = progress || fetched.progress

        if inputReadable, let input = main.input, !main.inputEnded {
            let n = read(input, scratch.baseAddress, SSH2SessionPump.chunk)
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
                            _ = libssh2_channel_close(main.raw)
                            main.end = .closed
                            return (true, true)
                        }
                    }
                } else {
                    main.toSend.append(bytes)
                }
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                main.inputEnded = true
            }
        }

        while !main.toSend.isEmpty && io.pendingOutbound < SocketIO.highWater {
            var rc = 0
            _ = main.toSend.consume { bytes in
                rc = libssh2_channel_write_ex(main.raw, 0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self),
                                              min(bytes.count, SSH2SessionPump.chunk))
                return max(0, rc)
            }
            if rc > 0 {
                progress = true
            } else if rc == Int(LIBSSH2_ERROR_EAGAIN) || rc == 0 {
                break
            } else {
                main.end = .lost(session.failure(Int32(rc), "writing to the channel"))
                return (true, true)
            }
        }
        if main.inputEnded && main.toSend.isEmpty && !main.eofSent {
            let rc = libssh2_channel_send_eof(main.raw)
            if rc == 0 {
                main.eofSent = true
                progress = true
            } else if rc != LIBSSH2_ERROR_EAGAIN {
                main.end = .lost(session.failure(rc, "ending the command's input"))
                return (true, true)
            }
        }
        if libssh2_channel_eof(main.raw) == 1 {
            let last = readOutput(main)
            if let end = last.end {
                main.end = end
            } else {
                main.end = finish(main.raw)
                main.endedByServer = true
            }
            return (true, true)
        }
        return (progress, true)
    }

    /// Reads what libssh2 has for either stream and hands it to the sink. Stops after a few
    /// MiB so the rest of the loop (input, forwards, keepalives) gets its turn.
    private func readOutput(_ main: SSH2SessionChannel) -> (progress: Bool, end: SSHChannelEnd?) {
        var progress = false
        var total = 0
        var again = true
        while again && total < 8 * SSH2SessionPump.chunk {
            again = false
            for stream: Int32 in [0, Int32(SSH_EXTENDED_DATA_STDERR)] {
                while total < 8 * SSH2SessionPump.chunk {
                    let n = libssh2_channel_read_ex(main.raw, stream, scratch.baseAddress!.assumingMemoryBound(to: CChar.self),
                                                    SSH2SessionPump.chunk)
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
                    if n == Int(LIBSSH2_ERROR_EAGAIN) || n == 0 { break }
                    return (progress, .lost(session.failure(Int32(n), "reading from the channel")))
                }
            }
        }
        return (progress, nil)
    }

    /// The remote side sent EOF: close the channel, wait (bounded) for its close, and read
    /// the exit status or signal.
    private func finish(_ channel: OpaquePointer) -> SSHChannelEnd {
        let deadline = Date(timeIntervalSinceNow: 5)
        _ = try? session.retry("closing the channel", until: deadline) { libssh2_channel_close(channel) }
        _ = try? session.retry("closing the channel", until: deadline) { libssh2_channel_wait_closed(channel) }
        var signal: UnsafeMutablePointer<CChar>?
        var signalLength = 0
        _ = libssh2_channel_get_exit_signal(channel, &signal, &signalLength, nil, nil, nil, nil)
        if let signal {
            defer { free(signal) }
            // The signal's name is the server's text: visible-safe before it is a value.
            if signalLength > 0 { return .signalled(ServerText.visible(UnsafeRawBufferPointer(start: signal, count: signalLength), limit: 64)) }
        }
        return .exited(libssh2_channel_get_exit_status(channel))
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
            opening.append(SSH2ForwardedConnection(socket: socket, origin: peerAddress(storage), listener: listener))
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
        let channel = libssh2_channel_direct_tcpip_ex(raw, forward.host, Int32(forward.hostPort),
                                                      next.origin.host, Int32(next.origin.port))
        if let channel {
            opening.removeFirst()
            next.channel = channel
            // A direct-tcpip channel has no stderr; anything sent as such is dropped (and its
            // window given back) instead of piling up unread.
            libssh2_channel_handle_extended_data2(channel, LIBSSH2_CHANNEL_EXTENDED_DATA_IGNORE)
            forwards.append(next)
            next.listener.onEvent?(.opened(origin: next.originText))
            return .moved(true)
        }
        let code = libssh2_session_last_errno(raw)
        if code == LIBSSH2_ERROR_EAGAIN { return .moved(false) }
        let failure = session.failure(code, "opening a forwarded connection")
        if failure.kind == .connectionLost || failure.kind == .timedOut { return .lost(failure) }
        opening.removeFirst()
        _ = close(next.socket)
        next.listener.onEvent?(.openFailed(origin: next.originText, reason: openFailureReason()))
        return .moved(true)
    }

    /// The server's reason for refusing a channel, from libssh2's message
    /// ("Channel open failure (connect failed)" → "connect failed").
    private func openFailureReason() -> String {
        let text = session.lastErrorText()
        if let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")"), open < close {
            return String(text[text.index(after: open)..<close])
        }
        return text
    }

    /// Moves one forwarded connection's data both ways; (progress, read from libssh2).
    private func service(_ forward: SSH2ForwardedConnection) -> (Bool, Bool) {
        guard let channel = forward.channel, !forward.failed else { return (false, false) }
        var progress = false
        var readChannel = false
        // Local side → channel.
        if forward.readable && !forward.localEOF && forward.toChannel.count < SSH2SessionPump.chunk {
            forward.readable = false
            let n = recv(forward.socket, scratch.baseAddress, SSH2SessionPump.chunk - forward.toChannel.count, 0)
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
        while !forward.toChannel.isEmpty && io.pendingOutbound < SocketIO.highWater {
            var rc = 0
            _ = forward.toChannel.consume { bytes in
                rc = libssh2_channel_write_ex(channel, 0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
                return max(0, rc)
            }
            readChannel = true
            if rc > 0 {
                progress = true
            } else if rc == Int(LIBSSH2_ERROR_EAGAIN) || rc == 0 {
                break
            } else {
                forward.failed = true
                return (true, true)
            }
        }
        if forward.localEOF && forward.toChannel.isEmpty && !forward.eofSent {
            let rc = libssh2_channel_send_eof(channel)
            if rc == 0 || rc != LIBSSH2_ERROR_EAGAIN {
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
            let n = libssh2_channel_read_ex(channel, 0, scratch.baseAddress!.assumingMemoryBound(to: CChar.self), SSH2SessionPump.chunk)
            readChannel = true
            if n > 0 {
                progress = true
                let sent = send(forward.socket, scratch.baseAddress, n, Int32(MSG_NOSIGNAL))
                if sent < 0 && errno != EAGAIN && errno != EINTR {
                    forward.failed = true
                    return (true, true)
                }
                let taken = max(0, sent)
                if taken < n {
                    forward.toSocket.append(UnsafeRawBufferPointer(rebasing: scratch[taken..<n]))
                }
                continue
            }
            if n == Int(LIBSSH2_ERROR_EAGAIN) || n == 0 {
                if libssh2_channel_eof(channel) == 1 {
                    forward.remoteEOF = true
                    progress = true
                }
                break
            }
            forward.failed = true
            return (true, true)
        }
        if forward.remoteEOF && forward.toSocket.isEmpty && !forward.shutDown {
            _ = shutdown(forward.socket, Int32(SHUT_WR))
            forward.shutDown = true
            progress = true
        }
        return (progress, readChannel)
    }

    private func flushToSocket(_ forward: SSH2ForwardedConnection) -> Bool {
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

    /// Closes the channels of finished connections (without waiting for the server's close:
    /// libssh2 frees a channel whose close is still on its way with the session) and their
    /// sockets. Nil, or the end when the connection itself broke.
    private func closeFinishedForwards() -> SSHChannelEnd? {
        var kept: [SSH2ForwardedConnection] = []
        for forward in forwards {
            guard forward.finished, let channel = forward.channel else {
                kept.append(forward)
                continue
            }
            let rc = libssh2_channel_close(channel)
            if rc == LIBSSH2_ERROR_EAGAIN {
                // The close went out; the server's answer comes later. Done with it here.
                _ = close(forward.socket)
                forward.channel = nil
                detached.append(channel)
                continue
            }
            _ = libssh2_channel_free(channel)
            _ = close(forward.socket)
            forward.channel = nil
        }
        forwards = kept
        // Channels closed by us whose server close may still come: free them once it did.
        detached.removeAll { channel in
            let rc = libssh2_channel_free(channel)
            return rc != LIBSSH2_ERROR_EAGAIN
        }
        if let failure = io.sendErrorText {
            return .lost(SSHFailure(.connectionLost, "Connection lost: \(failure)"))
        }
        return nil
    }

    /// Channels closed locally, waiting for the server's close before libssh2 frees them.
    private var detached: [OpaquePointer] = []

    /// The end: the session channel freed, forwarded connections and their channels closed.
    private func cleanUp() {
        if let main { _ = libssh2_channel_free(main.raw) }
        for forward in forwards + opening {
            if let channel = forward.channel { _ = libssh2_channel_free(channel) }
            _ = close(forward.socket)
        }
        forwards = []
        opening = []
        for channel in detached { _ = libssh2_channel_free(channel) }
        detached = []
        _ = io.flush()
    }
}

extension LibSSH2Session {
    /// Runs a started channel (or, with nil, only the session's forwards) until it ends: its
    /// output to `sink`, `input` (read when it is readable, through `escapes` if given) and
    /// posted writes to the channel, resizes and EOF from `control`, keepalives as
    /// `configuration.keepalive` says, and the forwards registered with `addForward(_:)`.
    /// Frees the channel. Runs on the session's thread.
    func pump(channel: SSH2ChannelHandle?, input: Int32?, sink: @escaping OutputSink, control: ChannelControl,
              escapes: SSHEscapes?) -> SSHChannelEnd {
        let pump = SSH2SessionPump(session: self, control: control)
        if let channel {
            pump.main = SSH2SessionChannel(raw: channel.raw, input: input, sink: sink, escapes: escapes)
        }
        return pump.run()
    }

    /// Adds `listener` to the forwards the pump serves (on the session's thread).
    func addForward(_ listener: SSHForwardListener) {
        box.forwards.append(listener)
    }
}

