// Test doubles of the login seams, shared by the transport and library tests (issue 13.5).
import AccessTransport
import AccessCore
import CFAccessTCP
import Foundation
import Logging

/// A fresh 0700 temporary directory, removed by `remove()`.
package struct TemporaryDirectory {
    package let path: String

    package init() {
        var template = Array((NSTemporaryDirectory() + "/cf-auth-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
    }

    package func remove() { try? FileManager.default.removeItem(atPath: path) }

    package func mode(of name: String) -> mode_t {
        var info = stat()
        precondition(stat(path + "/" + name, &info) == 0, "no \(name)")
        return info.st_mode & 0o777
    }
}

/// The box key of the vectors: python sealed the transfer answer to it.
package func vectorClientKey() -> SodiumBoxKey {
    SodiumBoxKey(publicKey: Base64.decode(AuthVectors.clientPublicKey, alphabet: .url)!,
                 secretKey: Base64.decode(AuthVectors.clientSecretKey, alphabet: .url)!)
}

/// Real libsodium, but the "ephemeral" key is the vectors' (so python's sealed box opens).
package struct VectorKeyBox: BoxOpener {
    package let real = SodiumBox()
    package init() {}
    package func makeEphemeralKey() -> any EphemeralBoxKey { vectorClientKey() }
    package func open(_ sealed: [UInt8], senderPublicKey: [UInt8], key: any EphemeralBoxKey) throws(BoxOpenProblem) -> [UInt8] {
        try real.open(sealed, senderPublicKey: senderPublicKey, key: key)
    }
}

/// A clock stopped at `now`, sleeping only counts; or, with `stepping`, each sleep moves its time on.
package final class FakeClock: WallClock, @unchecked Sendable {
    private let state: LockedBox<(now: Date, slept: Double)>
    private let stepping: Bool
    package init(_ now: Date, stepping: Bool = false) {
        state = LockedBox((now, 0))
        self.stepping = stepping
    }
    package func now() -> Date { state.withLock { $0.now } }
    package var slept: Double { state.withLock { $0.slept } }
    package func sleep(for duration: Duration) async -> Bool {
        let seconds = duration.secondsValue
        return await sleep(seconds: seconds)
    }
    package func sleep(seconds: Double) async -> Bool {
        state.withLock {
            $0.slept += seconds
            if stepping { $0.now += seconds }
        }
        await Task.yield()
        return true
    }
}

/// An HTTP client answering from a script, recording every request.
package final class ScriptedHTTP: HTTPClient, @unchecked Sendable {
    package typealias Answer = @Sendable (HTTPRequest) -> Result<HTTPResponse, TunnelFailure>
    private let answer: Answer
    package var answerClosure: Answer { answer }
    private let recorded = LockedBox<[HTTPRequest]>([])

    package init(_ answer: @escaping Answer) { self.answer = answer }

    package var requests: [HTTPRequest] { recorded.withLock { $0 } }

    package func send(_ request: HTTPRequest) async throws(TunnelFailure) -> HTTPResponse {
        recorded.withLock { $0.append(request) }
        return try answer(request).get()
    }
}

/// A browser that is never there (device mode).
package struct NoBrowser: BrowserOpener {
    package init() {}
    package func open(_ url: String) async -> Bool { false }
}

/// Records what would be shown.
package final class RecordingPresenter: LoginPresenter, @unchecked Sendable {
    package init() {}
    private let urls = LockedBox<[String]>([])
    package var shown: [String] { urls.withLock { $0 } }
    package func loginStarted(url: String, presentation: LoginPresentation) { urls.withLock { $0.append(url) } }
    package func waiting(elapsed: Duration, presentation: LoginPresentation) {}
    package func waitingForOtherProcess(pid: Int32, url: String?) {}
    package func loginEnded() {}
}

package func response(_ status: Int, _ headers: [(String, String)] = [], body: String = "") -> Result<HTTPResponse, TunnelFailure> {
    .success(HTTPResponse(status: status, headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8)))
}

/// Runs a python3 script; returns its stdout.
@discardableResult
package func runPython(_ script: String, arguments: [String] = []) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = ["-c", script] + arguments
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

/// A login lock another (fake) process always holds; `onAttempt` sees each attempt's number.
package final class HeldLock: LoginLock, @unchecked Sendable {
    package let pid: Int32
    private let attempts = LockedBox(0)
    private let hook = LockedBox<(@Sendable (Int) -> Void)?>(nil)
    package init(pid: Int32) { self.pid = pid }
    package var onAttempt: (@Sendable (Int) -> Void)? {
        get { hook.withLock { $0 } }
        set { hook.withLock { $0 = newValue } }
    }

    package func tryAcquire(tokenFileName: String) throws(TunnelFailure) -> LoginLockAttempt {
        let attempt = attempts.withLock { value -> Int in
            value += 1
            return value
        }
        onAttempt?(attempt)
        return .held(pid: pid)
    }
}

/// Records logins shown and waits for other processes.
package final class WaitRecordingPresenter: LoginPresenter, @unchecked Sendable {
    package init() {}
    package struct Other: Equatable {
        package let pid: Int32
        package let url: String?
        package init(pid: Int32, url: String?) {
            self.pid = pid
            self.url = url
        }
    }
    private let urls = LockedBox<[String]>([])
    private let waits = LockedBox<[Other]>([])
    package var shown: [String] { urls.withLock { $0 } }
    package var others: [Other] { waits.withLock { $0 } }
    package func loginStarted(url: String, presentation: LoginPresentation) { urls.withLock { $0.append(url) } }
    package func waiting(elapsed: Duration, presentation: LoginPresentation) {}
    package func waitingForOtherProcess(pid: Int32, url: String?) { waits.withLock { $0.append(Other(pid: pid, url: url)) } }
    package func loginEnded() {}
}
