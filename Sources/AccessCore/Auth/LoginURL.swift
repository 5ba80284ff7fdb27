/// The browser login URL of the transfer flow (PROTOCOL.md §3 step 2).
package enum LoginURL {
    /// Builds `https://<app host>/cdn-cgi/access/cli?aud=…&edge_token_transfer=true&redirect_url=…&send_org_token=true&token=…`.
    ///
    /// - `redirect_url` is the app URL with `aud` and `token` in its query;
    /// - keys are sorted and values escaped as Go's `url.Values.Encode` does (cloudflared
    ///   builds it so), so the URL is byte-for-byte the one cloudflared would open;
    /// - `close_interstitial=true` is added when `closeInterstitial`.
    ///
    /// - Parameters:
    ///   - app: the origin (its `httpsURL` is the app URL).
    ///   - publicKey: the ephemeral box public key, base64 URL alphabet with padding.
    ///   - appAUD: the application's AUD.
    package static func build(app: OriginURL, publicKey: String, appAUD: String, closeInterstitial: Bool = false) -> String {
        let redirect = app.httpsURL + "?" + encode([("aud", appAUD), ("token", publicKey)])
        var pairs = [
            ("aud", appAUD), ("token", publicKey), ("redirect_url", redirect),
            ("send_org_token", "true"), ("edge_token_transfer", "true"),
        ]
        if closeInterstitial { pairs.append(("close_interstitial", "true")) }
        return "https://" + app.hostHeader + "/cdn-cgi/access/cli?" + encode(pairs)
    }

    /// `k=v&…` sorted by key, each part escaped like Go's `url.QueryEscape`.
    static func encode(_ pairs: [(String, String)]) -> String {
        pairs.sorted { $0.0 < $1.0 }.map { queryEscape($0.0) + "=" + queryEscape($0.1) }.joined(separator: "&")
    }

    /// Go's `url.QueryEscape`: unreserved characters stay, space becomes `+`, every other
    /// byte `%XX` (upper-case hex).
    package static func queryEscape(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: " "):
                out += "+"
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out += "%"
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 0xF)])
            }
        }
        return out
    }
}
