// libFuzzer targets (issue 12.14), built by scripts/fuzz into one binary together with the
// sources of AccessCore and the client's frame reader (one module, so internals are reachable).
// The target is chosen with the environment variable CFAT_FUZZ_TARGET.
#if canImport(Glibc)
import Glibc
#endif

/// Which target this run exercises.
private let target: String = {
    guard let raw = getenv("CFAT_FUZZ_TARGET") else { return "" }
    return String(cString: raw)
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    switch target {
    case "frames": fuzzFrames(bytes)
    case "jwt": fuzzJWT(bytes)
    case "url": fuzzURL(bytes)
    case "parsers": fuzzParsers(bytes)
    case "redaction": fuzzRedaction(bytes)
    case "upgrade": fuzzUpgradeAnswer(bytes)
    default:
        fputs("CFAT_FUZZ_TARGET must be one of: frames jwt url parsers redaction upgrade\n", stderr)
        exit(2)
    }
    return 0
}

/// What the reader reported, in a form two runs can compare: data is joined (its slices may be
/// cut anywhere), every other event is kept as is.
private func frameEvents(_ chunks: [ArraySlice<UInt8>]) -> [String] {
    var reader = FrameReader()
    var events: [String] = []
    var data: [UInt8] = []
    var stopped = false
    func flushData() {
        if !data.isEmpty { events.append("data \(data)") }
        data = []
    }
    for chunk in chunks where !stopped {
        Array(chunk).withUnsafeBytes { buffer in
            reader.feed(buffer) { event in
                switch event {
                case .data(let payload):
                    data += Array(payload)
                    return true
                case .text: flushData(); events.append("text")
                case .ping(let payload): flushData(); events.append("ping \(payload)")
                case .pong: flushData(); events.append("pong")
                case .close(let payload):
                    flushData(); events.append("close \(payload)"); stopped = true
                    return false
                case .violation(let what):
                    flushData(); events.append("violation \(what)"); stopped = true
                    return false
                }
                return true
            }
        }
    }
    flushData()
    return events
}

/// What the head reader made of `chunks`: its outcome (with `consumed` counted from the start of
/// all input, so splits compare) and, when complete, the verdict on the head. The bytes shown for
/// an answer that is not HTTP depend on how much had arrived, so only their shape is checked.
private func headOutcome(_ chunks: [ArraySlice<UInt8>]) -> String {
    let all = chunks.flatMap { $0 }
    var reader = ResponseHeadReader(limit: 1024)
    var offset = 0
    for chunk in chunks {
        let outcome = reader.feed(Array(chunk))
        switch outcome {
        case .needMore:
            offset += chunk.count
            continue
        case .complete(let head, let consumed):
            guard consumed >= 1, consumed <= chunk.count else {
                fputs("head reader consumed \(consumed) of \(chunk.count) bytes\n", stderr)
                abort()
            }
            return "complete \(head) at \(offset + consumed): \(WebSocketUpgrade.judge(head, expectedAccept: "A="))"
        case .notHTTP(let shown):
            guard !shown.isEmpty, shown.count <= ResponseHeadReader.shownPrefix, all.starts(with: shown) else {
                fputs("head reader showed \(shown) of \(all)\n", stderr)
                abort()
            }
            return "notHTTP"
        default:
            return "\(outcome)"
        }
    }
    return "needMore"
}

/// The upgrade answer's head reader (issue 19.2) agrees with itself whether the bytes come whole,
/// split where the first byte says, or byte by byte, and says exactly where the head ended.
private func fuzzUpgradeAnswer(_ bytes: [UInt8]) {
    guard let first = bytes.first else { return }
    let input = bytes.dropFirst()
    let whole = headOutcome([input])
    let cut = input.startIndex + Int(first) % (input.count + 1)
    let split = headOutcome([input[input.startIndex..<cut], input[cut...]])
    let single = headOutcome(input.indices.map { input[$0...$0] })
    if whole != split || whole != single {
        fputs("head reader disagrees:\nwhole  \(whole)\nsplit@\(cut) \(split)\nbytes  \(single)\n", stderr)
        abort()
    }
}

/// The frame reader reports the same events whether the bytes come whole or split (at a point
/// the first byte chooses, and byte by byte).
private func fuzzFrames(_ bytes: [UInt8]) {
    guard let first = bytes.first else { return }
    let input = bytes.dropFirst()
    let whole = frameEvents([input])
    let cut = input.startIndex + Int(first) % (input.count + 1)
    let split = frameEvents([input[input.startIndex..<cut], input[cut...]])
    let single = frameEvents(input.indices.map { input[$0...$0] })
    if whole != split || whole != single {
        fputs("frame reader disagrees:\nwhole  \(whole)\nsplit@\(cut) \(split)\nbytes  \(single)\n", stderr)
        abort()
    }
}

/// JWTs, key sets and the transfer service's JSON: any input is refused or accepted, never a crash.
private func fuzzJWT(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    _ = try? JWT.decode(text)
    _ = try? JWKS.parse(bytes)
    _ = TransferRules.tokens(fromOpened: bytes)
    _ = TransferRules.interpret(status: 200, servicePublicKey: text, body: bytes)
    _ = LoginLockRecord.parse(bytes)
    _ = SetCookie.parse(text)
}

/// Origin URLs (IDN to punycode included).
private func fuzzURL(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    if let origin = try? OriginURL.parse(text) {
        // A parsed origin parses again to itself.
        guard let again = try? OriginURL.parse(origin.httpsURL), again.host == origin.host else {
            fputs("OriginURL \(text) -> \(origin.httpsURL) does not parse back\n", stderr)
            abort()
        }
    }
}

/// Header, flag and address parsers.
private func fuzzParsers(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    _ = try? HeaderField.parse(text)
    _ = try? ConnectTarget.parse(text)
    _ = try? ListenAddress.parse(text, allowNonLoopback: false)
    _ = try? ListenAddress.parse(text, allowNonLoopback: true)
    _ = try? ProxySettings.parse(text)
    _ = try? ResolveOverride.parse(text)
    // A secret header prints as its name and the placeholder, whatever its value.
    if let header = try? HeaderField.parse(text), header.isSecret,
       header.description != header.name + ": " + Redaction.placeholder
        || String(reflecting: header) != "HeaderField(" + header.name + ": " + Redaction.placeholder + ")" {
        fputs("secret header \(header.name) printed as \(String(reflecting: header.description))\n", stderr)
        abort()
    }
}

/// Redaction is idempotent and never lets a JWT-shaped token through.
private func fuzzRedaction(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    let once = Redaction.scrub(text)
    let twice = Redaction.scrub(once)
    if once != twice {
        fputs("scrub is not idempotent:\n\(String(reflecting: text))\n-> \(String(reflecting: once))\n-> \(String(reflecting: twice))\n", stderr)
        abort()
    }
    for word in once.split(whereSeparator: { " =:&;,\"'()[]{}".contains($0) }) {
        if Redaction.isJWTShaped(Array(word.unicodeScalars)) {
            fputs("a JWT shape survived: \(word) in \(once)\n", stderr)
            abort()
        }
    }
}
