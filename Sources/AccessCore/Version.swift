/// The version of cf-access-tcp, as sent to Cloudflare in the `User-Agent` header.
package enum Version {
    /// The semantic version, e.g. "0.1.0".
    package static let string = "0.1.0"

    /// The `User-Agent` value: `cf-access-tcp/<version>` (cloudflared sends
    /// `cloudflared/<version>`).
    package static var userAgent: String { "cf-access-tcp/" + string }
}
