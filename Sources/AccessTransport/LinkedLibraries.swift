internal import CCFOpenSSL
internal import CCFQREncode
internal import CCFSodium
#if canImport(Glibc)
import Glibc
#endif

/// The versions of the C libraries this process runs with, for `cf-access-tcp --version`: what a
/// bug report needs (Debian updates them apart from the tool).
package enum LinkedLibraries {
    /// One `(library, version)` pair per C library the tunnel uses. libcurl is loaded only for a
    /// login, so its line says when it cannot be loaded and which package provides it.
    package static func versions() -> [(name: String, version: String)] {
        [
            ("OpenSSL", openSSLVersion()),
            ("libsodium", String(cString: sodium_version_string())),
            ("libqrencode", String(cString: QRcode_APIVersionString())),
            ("libcurl", curlVersion()),
        ]
    }

    /// "3.0.19 27 Jan 2026" from OpenSSL's "OpenSSL 3.0.19 27 Jan 2026".
    private static func openSSLVersion() -> String {
        let text = String(cString: OpenSSL_version(OPENSSL_VERSION))
        return text.hasPrefix("OpenSSL ") ? String(text.dropFirst("OpenSSL ".count)) : text
    }

    /// libcurl's own version text, read with a `dlopen` of its own that is closed again (the
    /// login's `CurlLibrary` stays unloaded until a login needs it).
    private static func curlVersion() -> String {
        guard let handle = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL) else {
            return "not loadable: logins need it (Debian package libcurl4)"
        }
        defer { dlclose(handle) }
        guard let symbol = dlsym(handle, "curl_version") else { return "libcurl.so.4 has no curl_version" }
        let curlVersion = unsafeBitCast(symbol, to: (@convention(c) () -> UnsafePointer<CChar>?).self)
        guard let text = curlVersion() else { return "unknown" }
        // "libcurl/7.88.1 OpenSSL/3.0.17 zlib/1.2.13 …": the first word is libcurl's own.
        let first = String(cString: text).split(separator: " ").first.map(String.init) ?? ""
        return first.hasPrefix("libcurl/") ? String(first.dropFirst("libcurl/".count)) : first
    }
}
