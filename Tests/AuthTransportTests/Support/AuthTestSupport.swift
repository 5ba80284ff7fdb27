@testable import AccessTransport
import AccessCore
import CFAccessTCP
import Foundation
import AccessTestSupport
import Logging

/// A fresh 0700 temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let path: String

    init() {
        var template = Array((NSTemporaryDirectory() + "/cf-auth-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    func mode(of name: String) -> mode_t {
        var info = stat()
        precondition(stat(path + "/" + name, &info) == 0, "no \(name)")
        return info.st_mode & 0o777
    }
}

/// The box key of the vectors: python sealed the transfer answer to it.
func vectorClientKey() -> SodiumBoxKey {
    SodiumBoxKey(publicKey: Base64.decode(AuthVectors.clientPublicKey, alphabet: .url)!,
                 secretKey: Base64.decode(AuthVectors.clientSecretKey, alphabet: .url)!)
}

/// Real libsodium, but the "ephemeral" key is the vectors' (so python's sealed box opens).
struct VectorKeyBox: BoxOpener {
    let real = SodiumBox()
    func makeEphemeralKey() -> any EphemeralBoxKey { vectorClientKey() }
    func open(_ sealed: [UInt8], senderPublicKey: [UInt8], key: any EphemeralBoxKey) throws(BoxOpenProblem) -> [UInt8] {
        try real.open(sealed, senderPublicKey: senderPublicKey, key: key)
    }
}

/// A clock stopped at `now`, sleeping only counts; or, with `stepping`, each sleep moves its time on.
final class FakeClock: WallClock, @unchecked Sendable {
    private let state: LockedBox<(now: Date, slept: Double)>
    private let stepping: Bool
    init(_ now: Date, stepping: Bool = false) {
        state = LockedBox((now, 0))
        self.stepping = stepping
    }
    func now() -> Date { state.withLock { $0.now } }
    var slept: Double { state.withLock { $0.slept } }
    func sleep(seconds: Double) async -> Bool {
        state.withLock {
            $0.slept += seconds
            if stepping { $0.now += seconds }
        }
        await Task.yield()
        return true
    }
}

/// An HTTP client answering from a script, recording every request.
final class ScriptedHTTP: HTTPClient, @unchecked Sendable {
    typealias Answer = @Sendable (HTTPRequest) -> Result<HTTPResponse, TunnelFailure>
    private let answer: Answer
    var answerClosure: Answer { answer }
    private let recorded = LockedBox<[HTTPRequest]>([])

    init(_ answer: @escaping Answer) { self.answer = answer }

    var requests: [HTTPRequest] { recorded.withLock { $0 } }

    func send(_ request: HTTPRequest) async throws(TunnelFailure) -> HTTPResponse {
        recorded.withLock { $0.append(request) }
        return try answer(request).get()
    }
}

/// A browser that is never there (device mode).
struct NoBrowser: BrowserOpener {
    func open(_ url: String) async -> Bool { false }
}

/// Records what would be shown.
final class RecordingPresenter: LoginPresenter, @unchecked Sendable {
    private let urls = LockedBox<[String]>([])
    var shown: [String] { urls.withLock { $0 } }
    func loginStarted(url: String, presentation: LoginPresentation) { urls.withLock { $0.append(url) } }
    func waiting(elapsedSeconds: Int, presentation: LoginPresentation) {}
    func waitingForOtherProcess(pid: Int32, url: String?) {}
    func loginEnded() {}
}

func response(_ status: Int, _ headers: [(String, String)] = [], body: String = "") -> Result<HTTPResponse, TunnelFailure> {
    .success(HTTPResponse(status: status, headers: headers.map { (name: $0.0, value: $0.1) }, body: Array(body.utf8)))
}

/// Runs a python3 script; returns its stdout.
@discardableResult
func runPython(_ script: String, arguments: [String] = []) throws -> String {
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
