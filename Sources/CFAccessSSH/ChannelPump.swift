import AccessTransport
import FoundationEssentials
import SystemPackage
internal import CCFSSH2
#if canImport(Glibc)
import Glibc
#endif

/// Requests other threads post to a running channel; a byte on a pipe wakes the pump's poll.
final class ChannelControl: @unchecked Sendable {
    enum Command {
        case write(Data)
        case endOfInput
        case resize(columns: Int, rows: Int)
        case close
    }

    private let pending = LockedBox<[Command]>([])
    let readEnd: Int32
    private let writeEnd: Int32

    init() throws(SSHFailure) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw SSHFailure(.localIO, "cannot create a pipe: \(String(cString: strerror(errno)))")
        }
        for end in fds {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Queues `command` and wakes the pump.
    func post(_ command: Command) {
        pending.withLock { $0.append(command) }
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Takes the queued commands (and the wake-up bytes).
    func drain() -> [Command] {
        var scratch = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &scratch, scratch.count) > 0 {}
        return pending.withLock { queue in
            defer { queue = [] }
            return queue
        }
    }
}

/// Where a channel's output goes: (stream 0 = stdout, 1 = stderr, bytes) -> written?
typealias OutputSink = (Int32, UnsafeRawBufferPointer) -> Bool

/// Writes all of `bytes` to `fd`, waiting if the descriptor is non-blocking and full.
func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
    var offset = 0
    while offset < bytes.count {
        let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
        if n > 0 {
            offset += n
        } else if n < 0 && errno == EINTR {
            continue
        } else if n < 0 && errno == EAGAIN {
            var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&entry, 1, 1000)
        } else {
            return false
        }
    }
    return true
}

/// A sink writing stdout and stderr to two descriptors.
func descriptorSink(output: Int32, error: Int32) -> OutputSink {
    { stream, bytes in writeAll(stream == 0 ? output : error, bytes) }
}

/// Collects a command's output in memory.
final class OutputCollector: Sendable {
    private let collected = LockedBox((output: Data(), error: Data()))

    var sink: OutputSink {
        { [collected] stream, bytes in
            collected.withLock { c in
                if stream == 0 { c.output.append(contentsOf: bytes) } else { c.error.append(contentsOf: bytes) }
            }
            return true
        }
    }

    func result(end: SSHChannelEnd) -> SSHExecResult {
        collected.withLock { SSHExecResult(standardOutput: $0.output, standardError: $0.error, end: end) }
    }
}

extension SSHSession {
    /// Runs a started channel until it ends: its output to `sink`, `input` (read when it is
    /// readable) and posted writes to the channel, resizes and EOF from `control`, keepalives
    /// as `configuration.keepalive` says. Frees the channel. Runs on the session's thread.
    func pump(channel: OpaquePointer, input: Int32?, sink: OutputSink, control: ChannelControl) -> SSHChannelEnd {
        defer { _ = libssh2_channel_free(channel) }
        box.lastInbound = Date()
        var toSend: [UInt8] = []
        var inputEnded = false
        var eofSent = false
        var buffer = [UInt8](repeating: 0, count: 32_768)
        let closeDeadline: () -> Date = { Date(timeIntervalSinceNow: 5) }

        /// Reads what libssh2 has for either stream; nil on progress, or how the channel ended.
        func readAvailable() -> (progress: Bool, end: SSHChannelEnd?) {
            var progress = false
            var again = true
            while again {
                again = false
                for stream: Int32 in [0, Int32(SSH_EXTENDED_DATA_STDERR)] {
                    while true {
                        let n = buffer.withUnsafeMutableBytes { bytes in
                            libssh2_channel_read_ex(channel, stream, bytes.baseAddress!.assumingMemoryBound(to: CChar.self),
                                                    bytes.count)
                        }
                        if n > 0 {
                            progress = true
                            again = true
                            let written = buffer.withUnsafeBytes { sink(stream, UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                            if !written {
                                if errno == EPIPE { return (true, .outputClosed) }
                                return (true, .localOutputFailed(String(cString: strerror(errno))))
                            }
                            continue
                        }
                        if n == Int(LIBSSH2_ERROR_EAGAIN) || n == 0 { break }
                        return (progress, .lost(failure(Int32(n), "reading from the channel")))
                    }
                }
            }
            return (progress, nil)
        }

        while true {
            var progress = false
            for command in control.drain() {
                switch command {
                case .write(let data): toSend += data
                case .endOfInput: inputEnded = true
                case .resize(let columns, let rows):
                    let rc = try? retry("resizing", until: closeDeadline()) {
                        libssh2_channel_request_pty_size_ex(channel, Int32(columns), Int32(rows), 0, 0)
                    }
                    if let rc, rc < 0 {
                        let failure = failure(rc, "resizing the terminal")
                        if failure.kind == .connectionLost { return .lost(failure) }
                    }
                case .close:
                    _ = try? retry("closing the channel", until: closeDeadline()) { libssh2_channel_close(channel) }
                    return .closed
                }
            }
            let fetched = readAvailable()
            if let end = fetched.end { return end }
            progress = progress || fetched.progress

            while !toSend.isEmpty {
                let n = toSend.withUnsafeBytes { bytes in
                    libssh2_channel_write_ex(channel, 0, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
                }
                if n > 0 {
                    toSend.removeFirst(n)
                    progress = true
                } else if n == Int(LIBSSH2_ERROR_EAGAIN) || n == 0 {
                    break
                } else {
                    return .lost(failure(Int32(n), "writing to the channel"))
                }
            }
            if inputEnded && toSend.isEmpty && !eofSent {
                let rc = libssh2_channel_send_eof(channel)
                if rc == 0 {
                    eofSent = true
                } else if rc != LIBSSH2_ERROR_EAGAIN {
                    return .lost(failure(rc, "ending the command's input"))
                }
            }
            if libssh2_channel_eof(channel) == 1 {
                let last = readAvailable()
                if let end = last.end { return end }
                return finish(channel)
            }
            var nextKeepalive: Int32 = 0
            if configuration.keepalive.isEnabled {
                let rc = libssh2_keepalive_send(raw, &nextKeepalive)
                if rc < 0 && rc != LIBSSH2_ERROR_EAGAIN { return .lost(failure(rc, "sending a keepalive")) }
                // Keepalives ask for a reply: too long without a byte from the server means the
                // connection is dead even if no socket error says so.
                let silent = Date().timeIntervalSince(box.lastInbound)
                if configuration.keepalive.isConnectionLost(silence: .milliseconds(Int64(silent * 1000))) {
                    return .lost(SSHFailure(.connectionLost,
                                            "Connection lost: no answer to keepalives for \(Int(silent)) s"))
                }
                if nextKeepalive <= 0 { nextKeepalive = 1 }
            }

            // Wait for the socket, the input or a posted command.
            var entries: [pollfd] = []
            var events = Int16(POLLIN)
            if libssh2_session_block_directions(raw) & LIBSSH2_SESSION_BLOCK_OUTBOUND != 0 { events |= Int16(POLLOUT) }
            entries.append(pollfd(fd: fd, events: events, revents: 0))
            entries.append(pollfd(fd: control.readEnd, events: Int16(POLLIN), revents: 0))
            let readInput = input != nil && !inputEnded && toSend.count < 256 * 1024
            if let input, readInput { entries.append(pollfd(fd: input, events: Int16(POLLIN), revents: 0)) }
            let timeout: Int32 = progress ? 0 : (nextKeepalive > 0 ? nextKeepalive * 1000 : 30_000)
            let ready = poll(&entries, nfds_t(entries.count), timeout)
            if ready < 0 && errno != EINTR {
                return .localOutputFailed("poll: \(String(cString: strerror(errno)))")
            }
            if let input, readInput, entries.count > 2, entries[2].revents != 0 {
                let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                if n > 0 {
                    toSend += buffer[0..<n]
                } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                    inputEnded = true
                }
            }
            if entries[0].revents & Int16(POLLHUP | POLLERR) != 0 && entries[0].revents & Int16(POLLIN) == 0 {
                return .lost(SSHFailure(.connectionLost, "Connection lost: the tunnel closed"))
            }
        }
    }

    /// The remote side sent EOF: close the channel, wait (bounded) for its close, and read
    /// the exit status or signal.
    private func finish(_ channel: OpaquePointer) -> SSHChannelEnd {
        let deadline = Date(timeIntervalSinceNow: 5)
        _ = try? retry("closing the channel", until: deadline) { libssh2_channel_close(channel) }
        _ = try? retry("closing the channel", until: deadline) { libssh2_channel_wait_closed(channel) }
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
}

/// An interactive channel with a pseudo-terminal (a shell or a command), from
/// ``SSHSession/openShell(terminal:command:environment:)``.
public final class SSHInteractiveChannel: Sendable {
    private let session: SSHSession
    private let channel: ChannelHandle
    private let control: ChannelControl

    init(session: SSHSession, channel: ChannelHandle, control: ChannelControl) {
        self.session = session
        self.channel = channel
        self.control = control
    }

    /// Tells the remote the terminal's new size (SIGWINCH). Safe from any thread.
    public func resize(columns: Int, rows: Int) {
        control.post(.resize(columns: columns, rows: rows))
    }

    /// Sends `data` as keyboard input. Safe from any thread.
    public func write(_ data: Data) {
        control.post(.write(data))
    }

    /// Ends the input (EOF).
    public func endInput() {
        control.post(.endOfInput)
    }

    /// Closes the channel; ``run(input:output:)`` then returns `.closed`.
    public func close() {
        control.post(.close)
    }

    /// Runs the channel until it ends: `input` (a descriptor, e.g. a raw-mode terminal, or
    /// nil for ``write(_:)`` only) goes to the remote, its output to `output`. The escape hatch
    /// for a terminal; the caller keeps owning both descriptors.
    public func run(input: FileDescriptor?, output: FileDescriptor) async -> SSHChannelEnd {
        let channel = self.channel
        let control = self.control
        let (input, output) = (input?.rawValue, output.rawValue)
        do {
            return try await session.onThread { session in
                session.pump(channel: channel.raw, input: input, sink: descriptorSink(output: output, error: output),
                             control: control)
            }
        } catch {
            return .lost(error)
        }
    }

    /// Runs the channel until it ends, handing each piece of output to `onOutput` (on the
    /// session's thread); input comes from ``write(_:)``.
    public func run(onOutput: @escaping @Sendable (Data) -> Void) async -> SSHChannelEnd {
        let channel = self.channel
        let control = self.control
        do {
            return try await session.onThread { session in
                session.pump(channel: channel.raw, input: nil, sink: { _, bytes in onOutput(Data(bytes)); return true },
                             control: control)
            }
        } catch {
            return .lost(error)
        }
    }
}
