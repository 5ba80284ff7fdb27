@_exported import AccessCore
@_exported import AccessTransport
import Foundation
import Logging

/// Runs a tunnel the way the command line needs it: over stdin/stdout (ssh ProxyCommand) or for
/// every connection accepted on a local listener.
public final class TunnelRunner: @unchecked Sendable {
    private let configuration: CarrierConfiguration
    private let logger: Logger
    private let report: @Sendable (String) -> Void

    /// - Parameters:
    ///   - configuration: how to reach the origin.
    ///   - logger: where diagnostics go (never stdout).
    ///   - report: receives each plain one-line failure message meant for people (stderr in the CLI).
    public init(configuration: CarrierConfiguration, logger: Logger, report: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
        self.logger = logger
        self.report = report
    }

    /// Bridges stdin/stdout to one WebSocket and returns the exit status once the tunnel has
    /// ended: 0 after a normal end, 1 when the WebSocket could not be opened.
    public func runStdio() -> Int32 {
        struct Progress { var failed = false; var bridgeEnded = false; var outputEnded = false }
        let progress = LockedBox(Progress())
        let changed = DispatchSemaphore(value: 0)
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report] event in
            switch event {
            case .established:
                break
            case .failed(_, let failure):
                report(failure.message)
                progress.withLock { $0.failed = true; $0.bridgeEnded = true }
                changed.signal()
            case .closed:
                progress.withLock { $0.bridgeEnded = true }
                changed.signal()
            }
        }
        do {
            try loop.start()
        } catch {
            report(error.message)
            return 1
        }
        let fd: Int32
        do {
            fd = try StdioBridge.start {
                progress.withLock { $0.outputEnded = true }
                changed.signal()
            }
        } catch {
            report("\(error)")
            return 1
        }
        loop.bridge(socket: fd)
        // Done when the bridge ended (so the Close frame went out) and every byte reached stdout;
        // once stdout is finished, give the WebSocket close a bounded moment, never a hang.
        while true {
            let state = progress.withLock { $0 }
            if state.failed { return 1 }
            if state.bridgeEnded && state.outputEnded { return 0 }
            if state.outputEnded {
                if changed.wait(timeout: .now() + 3) == .timedOut { return 0 }
            } else {
                changed.wait()
            }
        }
    }

    /// Listens on `address`, bridging each accepted connection to its own WebSocket, until `stop`
    /// is signalled; then closes the listener and every connection before returning.
    public func runListener(on address: ListenAddress, stop: DispatchSemaphore,
                            onListening: (String) -> Void) throws(TunnelFailure) {
        let loop = CarrierLoop(configuration: configuration, logger: logger) { [report, logger] event in
            switch event {
            case .established(let id):
                logger.debug("connection \(id) established")
            case .failed(_, let failure):
                report(failure.message)
            case .closed(let id, let up, let down):
                logger.debug("connection \(id) closed", metadata: ["sent": "\(up)", "received": "\(down)"])
            }
        }
        try loop.start()
        let listener = try LoopbackListener(address: address)
        onListening(listener.boundAddress)
        listener.startAccepting { fd in loop.bridge(socket: fd) }
        stop.wait()
        listener.close()
        loop.shutdown()
    }
}

extension Error {
    /// The plain message of a tunnel failure, or a description of any other error.
    fileprivate var message: String {
        (self as? TunnelFailure)?.message ?? "\(self)"
    }
}
