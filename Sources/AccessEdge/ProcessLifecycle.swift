import Dispatch
import Foundation
import NIOCore
import NIOPosix

/// Blocks until SIGINT or SIGTERM. Create it before announcing readiness so a signal sent
/// right after the announcement line is never lost.
final class TerminationSignal {
    private let semaphore = DispatchSemaphore(value: 0)
    private let sources: [any DispatchSourceSignal]

    init() {
        signal(SIGPIPE, SIG_IGN)
        let semaphore = self.semaphore
        sources = [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { semaphore.signal() }
            source.resume()
            return source
        }
    }

    /// Returns once a termination signal has arrived.
    func wait() {
        semaphore.wait()
        sources.forEach { $0.cancel() }
    }
}

/// Runs a listener until a termination signal: announce, wait, shut down promptly.
enum ServerLifecycle {
    /// `start` binds `address` on `group`; `announce` turns the bound address into the
    /// stdout line.
    /// `sites` binds more listeners first, each announced as
    /// `cf-access-edge site HOST listening on ADDR:PORT` before the main line.
    static func run(address: HostPort,
                    start: (any EventLoopGroup) throws -> Channel,
                    sites: (any EventLoopGroup) throws -> [(host: String, channel: Channel)] = { _ in [] },
                    announce: (String) -> String) throws {
        let terminate = TerminationSignal()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
        let listener: Channel
        var siteListeners: [(host: String, channel: Channel)] = []
        do {
            siteListeners = try sites(group)
            listener = try start(group)
        } catch let error as IOError {
            try? group.syncShutdownGracefully()
            throw EdgeError("cannot listen on \(address) or a --site address: \(error)")
        } catch {
            try? group.syncShutdownGracefully()
            throw error
        }
        for site in siteListeners {
            Console.announce("cf-access-edge site \(site.host) listening on \(Self.describe(site.channel.localAddress))")
        }
        Console.announce(announce(Self.describe(listener.localAddress)))
        terminate.wait()

        // Never hang on the way out: a stuck shutdown still exits 0 shortly.
        DispatchQueue.global().asyncAfter(deadline: .now() + 3) { exit(0) }
        for site in siteListeners { try? site.channel.close().wait() }
        try? listener.close().wait()
        try? group.syncShutdownGracefully()
    }

    /// `ip:port`, IPv6 bracketed.
    static func describe(_ address: SocketAddress?) -> String {
        guard let address, let port = address.port else { return "unknown" }
        let ip = address.ipAddress ?? "unknown"
        return ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }
}
