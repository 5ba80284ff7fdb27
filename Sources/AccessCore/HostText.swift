/// How a host is written beside a port or in a URL authority: an IPv6 address goes in brackets.
package enum HostText {
    /// `address`, in brackets when it is an IPv6 address (`::1` → `[::1]`, `10.0.0.1` as is).
    package static func bracketed(_ address: String) -> String {
        address.unicodeScalars.contains(":") ? "[" + address + "]" : address
    }

    /// `address:port`, an IPv6 address in brackets: `127.0.0.1:22`, `[::1]:22`.
    package static func withPort(_ address: String, _ port: Int) -> String {
        bracketed(address) + ":" + String(port)
    }
}
