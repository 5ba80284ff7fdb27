internal import CCFCurl
internal import CCFShim
import AccessCore
import FoundationEssentials

extension ConnectOverride {
    /// `HOST:PORT:CONNECT-HOST:CONNECT-PORT`, an IPv6 address in brackets.
    var curlEntry: String {
        "\(host):\(port):\(HostText.withPort(address, targetPort))"
    }
}

/// The HTTP client of the login flows, over libcurl's easy API.
///
/// Each request runs `curl_easy_perform` on a thread of its own (it blocks; the cooperative
/// pool must not). Redirects are never followed; only `https` is spoken; `--resolve`
/// overrides go to `CURLOPT_RESOLVE` and `--ca-file` to `CURLOPT_CAINFO`, so tests reach a
/// loopback server under a real name with real certificate checks; without `--ca-file`,
/// `SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured as OpenSSL honours them. Bodies over 1 MiB fail.
/// Proxies come from the environment (`https_proxy`, `no_proxy`), as libcurl reads them.
/// libcurl itself is loaded by the first request (`CurlLibrary`), not linked.
package struct CurlHTTPClient: HTTPClient {
    /// The largest body accepted.
    package static let bodyLimit = 1 << 20
    /// The most header bytes accepted in one answer (a metadata JWT is a few KiB).
    package static let headerLimit = 64 << 10

    /// A PEM file of CA certificates to trust instead of the system store.
    package let caFile: String?
    /// `HOST:PORT:ADDR` overrides.
    package let resolve: [ResolveOverride]
    /// The `User-Agent` to send.
    package let userAgent: String
    /// `CURLOPT_CONNECT_TO` entries (the tunnel's `--connect-to`: the app host's requests go to
    /// another address, Host/SNI/checks unchanged).
    package let connectTo: [ConnectOverride]
    /// Pinned keys for the requests to `pinnedHost` (`CURLOPT_PINNEDPUBLICKEY`: libcurl checks the
    /// leaf's key), and that host; requests to other hosts (the team domain) are not pinned.
    package let pins: [PublicKeyPin]
    package let pinnedHost: String?

    /// Creates a client.
    package init(caFile: String? = nil, resolve: [ResolveOverride] = [], connectTo: [ConnectOverride] = [],
                userAgent: String = Version.userAgent, pins: [PublicKeyPin] = [], pinnedHost: String? = nil) {
        self.caFile = caFile
        self.resolve = resolve
        self.connectTo = connectTo
        self.userAgent = userAgent
        self.pins = pins
        self.pinnedHost = pinnedHost
    }

    /// Sends `request` on a dedicated thread and returns the answer as it is (3xx included).
    /// Cancelling the calling task aborts the transfer within about a second (libcurl's progress
    /// callback, which it calls at least once a second even while the server is silent) and
    /// throws kind `.cancelled`.
    package func send(_ request: HTTPRequest) async throws(TunnelFailure) -> HTTPResponse {
        let cancelled = LockedBox(false)
        let result: Result<HTTPResponse, TunnelFailure> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                PThread.start(name: "cfat curl") { [self] in
                    continuation.resume(returning: perform(request, cancelled: cancelled))
                }
            }
        } onCancel: {
            cancelled.withLock { $0 = true }
        }
        return try result.get()
    }

    /// Runs one transfer; blocking. It stops (CURLE_ABORTED_BY_CALLBACK) once `cancelled` is set.
    private func perform(_ request: HTTPRequest, cancelled: LockedBox<Bool>) -> Result<HTTPResponse, TunnelFailure> {
        let host = URL(string: request.url)?.host ?? "the server"
        if cancelled.withLock({ $0 }) { return .failure(.cancelled("the request to \(host)")) }
        let curl: CurlLibrary
        switch CurlLibrary.shared {
        case .success(let loaded): curl = loaded
        case .failure(let failure): return .failure(failure)
        }
        guard let handle = curl.easyInit() else {
            return .failure(.internalError("libcurl could not be initialised"))
        }
        defer { curl.easyCleanup(handle) }
        let sink = ResponseSink(limit: Self.bodyLimit, cancelled: cancelled)
        let sinkPointer = Unmanaged.passRetained(sink)
        defer { sinkPointer.release() }

        var headerList: UnsafeMutablePointer<curl_slist>?
        var resolveList: UnsafeMutablePointer<curl_slist>?
        var connectToList: UnsafeMutablePointer<curl_slist>?
        defer {
            curl.slistFreeAll(headerList)
            curl.slistFreeAll(resolveList)
            curl.slistFreeAll(connectToList)
        }
        for entry in connectTo {
            connectToList = curl.slistAppend(connectToList, entry.curlEntry)
        }
        for header in request.headers {
            headerList = curl.slistAppend(headerList, header.name + ": " + header.value)
        }
        for entry in resolve {
            resolveList = curl.slistAppend(resolveList, entry.description)
        }
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let cookie = request.cookies.map { $0.name + "=" + $0.value }.joined(separator: "; ")

        let code: CURLcode = errorBuffer.withUnsafeMutableBufferPointer { errors in
            var ok = true
            func set(_ option: CURLoption, _ value: Int) { ok = ok && CCFShim_curl_setopt_long(curl.easySetopt, handle, option, value) == CURLE_OK }
            func set(_ option: CURLoption, _ value: String) { ok = ok && CCFShim_curl_setopt_str(curl.easySetopt, handle, option, value) == CURLE_OK }
            func set(_ option: CURLoption, pointer: UnsafeRawPointer?) { ok = ok && CCFShim_curl_setopt_ptr(curl.easySetopt, handle, option, pointer) == CURLE_OK }
            set(CURLOPT_URL, request.url)
            set(CURLOPT_NOSIGNAL, 1)
            set(CURLOPT_FOLLOWLOCATION, 0)
            set(CURLOPT_PROTOCOLS_STR, "https")
            set(CURLOPT_TIMEOUT, max(1, request.timeoutSeconds))
            set(CURLOPT_CONNECTTIMEOUT, max(1, min(request.timeoutSeconds, 15)))
            set(CURLOPT_USERAGENT, userAgent)
            set(CURLOPT_ERRORBUFFER, pointer: UnsafeRawPointer(errors.baseAddress))
            switch request.method {
            case "HEAD": set(CURLOPT_NOBODY, 1)
            case "GET": set(CURLOPT_HTTPGET, 1)
            case "POST": set(CURLOPT_POST, 1)
            default: set(CURLOPT_CUSTOMREQUEST, request.method)
            }
            if let body = request.body {
                // The size first, so the copy takes exactly these bytes (a body may hold a token:
                // libcurl's copy is freed with the handle).
                set(CURLOPT_POSTFIELDSIZE, body.count)
                body.withUnsafeBytes { set(CURLOPT_COPYPOSTFIELDS, pointer: $0.baseAddress) }
            }
            if let headerList { set(CURLOPT_HTTPHEADER, pointer: UnsafeRawPointer(headerList)) }
            if let resolveList { set(CURLOPT_RESOLVE, pointer: UnsafeRawPointer(resolveList)) }
            if let connectToList { set(CURLOPT_CONNECT_TO, pointer: UnsafeRawPointer(connectToList)) }
            if !cookie.isEmpty { set(CURLOPT_COOKIE, cookie) }
            if !pins.isEmpty, let pinnedHost, URL(string: request.url)?.host?.lowercased() == pinnedHost.lowercased() {
                set(CURLOPT_PINNEDPUBLICKEY, pins.map(\.description).joined(separator: ";"))
            }
            if let caFile {
                set(CURLOPT_CAINFO, caFile)
            } else {
                // libcurl ignores OpenSSL's SSL_CERT_FILE and SSL_CERT_DIR; curl, OpenSSL and Go
                // honour them (corporate TLS inspection), so do we (issue 17.3). --ca-file wins.
                for (option, variable) in [(CURLOPT_CAINFO, "SSL_CERT_FILE"), (CURLOPT_CAPATH, "SSL_CERT_DIR")] {
                    if let value = getenv(variable).map({ String(cString: $0) }), !value.isEmpty { set(option, value) }
                }
            }
            let opaque = UnsafeRawPointer(sinkPointer.toOpaque())
            ok = ok && CCFShim_curl_setopt_write(curl.easySetopt, handle, CURLOPT_WRITEFUNCTION, curlBodyCallback) == CURLE_OK
            set(CURLOPT_WRITEDATA, pointer: opaque)
            ok = ok && CCFShim_curl_setopt_write(curl.easySetopt, handle, CURLOPT_HEADERFUNCTION, curlHeaderCallback) == CURLE_OK
            set(CURLOPT_HEADERDATA, pointer: opaque)
            // A function pointer travels through the variadic setopt like any pointer (POSIX).
            set(CURLOPT_XFERINFOFUNCTION, pointer: unsafeBitCast(curlProgressCallback, to: UnsafeRawPointer.self))
            set(CURLOPT_XFERINFODATA, pointer: opaque)
            set(CURLOPT_NOPROGRESS, 0)
            guard ok else { return CURLE_FAILED_INIT }
            return curl.easyPerform(handle)
        }
        let reason = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        guard code == CURLE_OK else {
            if code == CURLE_ABORTED_BY_CALLBACK, cancelled.withLock({ $0 }) {
                return .failure(.cancelled("the request to \(host)"))
            }
            if sink.headersOverflowed || code == CURLE_OUT_OF_MEMORY {
                // libcurl says "Out of memory" for a header line over its own 100 KB cap.
                return .failure(TunnelFailure(category: .protocolViolation, isRetryable: false,
                                              message: "\(host) sent response headers over \(Self.headerLimit / 1024) KiB: refusing the answer",
                                              detail: "headers over \(Self.headerLimit) bytes (libcurl error \(code.rawValue))",
                                              kind: .oversizedAnswer))
            }
            if sink.overflowed {
                return .failure(TunnelFailure(category: .protocolViolation, isRetryable: false,
                                              message: "\(host) sent more than 1 MiB: refusing the answer",
                                              detail: "body over \(Self.bodyLimit) bytes", kind: .oversizedAnswer))
            }
            if code == CURLE_COULDNT_CONNECT, let url = URL(string: request.url), let urlHost = url.host {
                // Name the address, and tell "no route" (Network unavailable) from a refusal.
                if let (address, port) = overriddenAddress(host: urlHost, port: url.port ?? 443) {
                    let shown = HostText.withPort(address, port)
                    if let problem = AddressResolver.routeProblem(address: address, port: port) {
                        return .failure(.networkUnavailable(detail: "\(host) (\(shown)): \(problem)"))
                    }
                    return .failure(.connectionRefused(address: "\(host) (\(shown))"))
                }
            }
            return .failure(Self.failure(code: code, host: host, reason: reason))
        }
        var status = 0
        _ = CCFShim_curl_getinfo_long(curl.easyGetinfo, handle, CURLINFO_RESPONSE_CODE, &status)
        return .success(HTTPResponse(status: status, headers: sink.headers, body: sink.body))
    }

    /// Where a `--connect-to` or `--resolve` entry sends `host:port`, if one does.
    func overriddenAddress(host: String, port: Int) -> (String, Int)? {
        AddressOverride.route(host: host, port: port, connectTo: connectTo, resolve: resolve)
    }

    /// The failure for a libcurl error code.
    static func failure(code: CURLcode, host: String, reason: String) -> TunnelFailure {
        var text = reason
        if text.isEmpty, case .success(let curl) = CurlLibrary.shared, let message = curl.easyStrerror(code) {
            text = String(cString: message)
        }
        if text.isEmpty { text = "libcurl error \(code.rawValue)" }
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .dns(host: host)
        case CURLE_COULDNT_CONNECT:
            return .connectionRefused(address: host)
        case CURLE_OPERATION_TIMEDOUT:
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "No answer from \(host) in time: check your network and that \(host) is reachable, then try again",
                                 detail: "\(host): \(text)", kind: .timedOut)
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            return .pinMismatch(host: host, presented: [])
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_ISSUER_ERROR:
            return .tls(host: host, reason: text)
        default:
            return TunnelFailure(category: .transport, isRetryable: true,
                                 message: "HTTPS request to \(host) failed: \(text); check the network and try again",
                                 detail: "\(host): libcurl error \(code.rawValue)", kind: .requestFailed)
        }
    }
}

/// Collects the header lines and body of one transfer; touched only by its curl thread.
private final class ResponseSink {
    let limit: Int
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    var overflowed = false
    /// Bytes of header lines received; past `CurlHTTPClient.headerLimit` the answer is refused.
    var headerBytes = 0
    var headersOverflowed = false

    /// Set when the caller's task is cancelled: the progress callback then aborts the transfer.
    let cancelled: LockedBox<Bool>

    init(limit: Int, cancelled: LockedBox<Bool>) {
        self.limit = limit
        self.cancelled = cancelled
    }

    func appendHeaderLine(_ bytes: UnsafeRawBufferPointer) {
        // "\r\n" is one Character in Swift: trim by scalars, not with hasSuffix("\n").
        let line = String(decoding: bytes, as: UTF8.self).trimmingWhitespaceAndNewlines
        if line.hasPrefix("HTTP/") {
            // A new status line (after 100 Continue or a proxy's CONNECT): start over.
            headers = []
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = String(line[..<colon]).trimmingHorizontalWhitespace
        let value = String(line[line.index(after: colon)...]).trimmingHorizontalWhitespace
        guard !name.isEmpty else { return }
        headers.append((name, value))
    }
}

private let curlBodyCallback: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, user in
    guard let user else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    let total = size * count
    guard total > 0, let data else { return total }
    guard sink.body.count + total <= sink.limit else {
        sink.overflowed = true
        return 0
    }
    sink.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: total))
    return total
}

/// libcurl's progress callback (`CURLOPT_XFERINFOFUNCTION`): non-zero aborts the transfer.
private let curlProgressCallback: @convention(c) (UnsafeMutableRawPointer?, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> Int32 = {
    user, _, _, _, _ in
    guard let user else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    return sink.cancelled.withLock { $0 } ? 1 : 0
}

private let curlHeaderCallback: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, user in
    guard let user else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    let total = size * count
    guard total > 0, let data else { return total }
    sink.headerBytes += total
    guard sink.headerBytes <= CurlHTTPClient.headerLimit else {
        sink.headersOverflowed = true
        return 0
    }
    sink.appendHeaderLine(UnsafeRawBufferPointer(start: data, count: total))
    return total
}
