/// The HTTP side of opening a tunnel, written and judged by us (RFC 6455 §4.1, RFC 9110 §9.3.6):
/// the WebSocket upgrade request, the verdict on its answer, and the `CONNECT` request for a proxy.
/// Pure: the carrier sends these bytes and feeds back what came (`ResponseHeadReader`).
package enum WebSocketUpgrade {
    /// The GUID RFC 6455 appends to `Sec-WebSocket-Key` before hashing it into the accept value.
    package static let acceptGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Largest request head we send: an edge refuses larger ones, and a 70 KB `-H` is a mistake
    /// better named before any byte leaves.
    package static let requestLimit = 64 << 10

    /// The upgrade request: `GET path`, `Host`, the WebSocket protocol headers with `key`, then
    /// the request's own headers in order. `host` is the Host header's value.
    package static func requestHead(_ request: UpgradeRequest, host: String, key: String) -> [UInt8] {
        var head = "GET \(request.origin.path) HTTP/1.1\r\n"
        head += "Host: \(host)\r\n"
        head += "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        head += "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
        for field in request.headers {
            head += "\(field.name): \(field.value)\r\n"
        }
        head += "\r\n"
        return Array(head.utf8)
    }

    /// What an answer to the upgrade says.
    package enum Verdict: Sendable, Equatable {
        /// `101` with the right accept value: the WebSocket is open.
        case accepted
        /// Any other status: the edge refused (`UpgradeRefusal.classify` says why).
        case refused(status: Int, location: String?)
        /// A `101` that does not open a WebSocket: what is wrong with it.
        case broken(String)
    }

    /// Judges the answer to an upgrade whose `Sec-WebSocket-Key` hashes to `expectedAccept`.
    package static func judge(_ head: ResponseHead, expectedAccept: String) -> Verdict {
        guard head.status == 101 else {
            return .refused(status: head.status, location: head.value("Location"))
        }
        guard head.lists("Upgrade", token: "websocket") else {
            return .broken("a 101 answer without \"Upgrade: websocket\"")
        }
        guard head.lists("Connection", token: "upgrade") else {
            return .broken("a 101 answer without \"Connection: Upgrade\"")
        }
        guard head.value("Sec-WebSocket-Accept") == expectedAccept else {
            return .broken("a wrong Sec-WebSocket-Accept in the 101 answer")
        }
        // We asked for no extension and no subprotocol, so the edge may not pick one (§4.1).
        if let extensions = head.value("Sec-WebSocket-Extensions"), !extensions.isEmpty {
            return .broken("an extension we did not ask for in the 101 answer (\(Display.quoted(extensions, limit: 60)))")
        }
        if let proto = head.value("Sec-WebSocket-Protocol"), !proto.isEmpty {
            return .broken("a subprotocol we did not ask for in the 101 answer (\(Display.quoted(proto, limit: 60)))")
        }
        return .accepted
    }

    /// The `CONNECT` request that asks an HTTP proxy for a tunnel to `target` (`host:port`, an
    /// IPv6 address in brackets).
    package static func proxyConnectHead(target: String) -> [UInt8] {
        Array("CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\nUser-Agent: \(Version.userAgent)\r\n\r\n".utf8)
    }
}
