internal import CCFCurl
internal import CCFShim
import AccessCore
#if canImport(Glibc)
import Glibc
#endif

/// libcurl, loaded on first use with `dlopen` instead of being linked.
///
/// Only the login flows speak HTTP (app discovery, JWKS, the token exchange); a tunnel with a
/// service token or a cached token never does. Linked, libcurl brings ~25 libraries (GnuTLS,
/// Kerberos, LDAP, p11-kit, …) into every process, whose pages and constructors cost ~4 MB of
/// resident memory before the first connection (reference/perf.md, "Memory"). The `CCFCurl`
/// module therefore gives only the header (types and constants) and links nothing.
struct CurlLibrary: @unchecked Sendable {
    /// The one copy, loaded and `curl_global_init`-ed once; or why it could not be.
    static let shared: Result<CurlLibrary, TunnelFailure> = load()

    /// The soname of libcurl 4 (Debian: libcurl4 / libcurl4-openssl-dev).
    static let soname = "libcurl.so.4"

    let easyInit: @convention(c) () -> UnsafeMutableRawPointer?
    let easyCleanup: @convention(c) (UnsafeMutableRawPointer?) -> Void
    let easyPerform: @convention(c) (UnsafeMutableRawPointer?) -> CURLcode
    let easyStrerror: @convention(c) (CURLcode) -> UnsafePointer<CChar>?
    let slistAppend: @convention(c) (UnsafeMutablePointer<curl_slist>?, UnsafePointer<CChar>?) -> UnsafeMutablePointer<curl_slist>?
    let slistFreeAll: @convention(c) (UnsafeMutablePointer<curl_slist>?) -> Void
    /// The variadic `curl_easy_setopt` / `curl_easy_getinfo`, called through the
    /// `CCFShim_curl_*` forwarders.
    let easySetopt: UnsafeMutableRawPointer
    let easyGetinfo: UnsafeMutableRawPointer

    private static func load() -> Result<CurlLibrary, TunnelFailure> {
        guard let handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown reason"
            return .failure(.internalError("libcurl could not be loaded (\(reason)): install libcurl4"))
        }
        func symbol(_ name: String) -> UnsafeMutableRawPointer? { dlsym(handle, name) }
        guard let globalInit = symbol("curl_global_init"),
              let easyInit = symbol("curl_easy_init"), let easyCleanup = symbol("curl_easy_cleanup"),
              let easyPerform = symbol("curl_easy_perform"), let easyStrerror = symbol("curl_easy_strerror"),
              let slistAppend = symbol("curl_slist_append"), let slistFreeAll = symbol("curl_slist_free_all"),
              let easySetopt = symbol("curl_easy_setopt"), let easyGetinfo = symbol("curl_easy_getinfo")
        else {
            return .failure(.internalError("\(soname) lacks a function cf-access-tcp needs"))
        }
        // The handle stays open for the life of the process.
        let library = CurlLibrary(
            easyInit: unsafeBitCast(easyInit, to: (@convention(c) () -> UnsafeMutableRawPointer?).self),
            easyCleanup: unsafeBitCast(easyCleanup, to: (@convention(c) (UnsafeMutableRawPointer?) -> Void).self),
            easyPerform: unsafeBitCast(easyPerform, to: (@convention(c) (UnsafeMutableRawPointer?) -> CURLcode).self),
            easyStrerror: unsafeBitCast(easyStrerror, to: (@convention(c) (CURLcode) -> UnsafePointer<CChar>?).self),
            slistAppend: unsafeBitCast(slistAppend, to: (@convention(c) (UnsafeMutablePointer<curl_slist>?,
                                                                         UnsafePointer<CChar>?) -> UnsafeMutablePointer<curl_slist>?).self),
            slistFreeAll: unsafeBitCast(slistFreeAll, to: (@convention(c) (UnsafeMutablePointer<curl_slist>?) -> Void).self),
            easySetopt: easySetopt,
            easyGetinfo: easyGetinfo)
        let initialise = unsafeBitCast(globalInit, to: (@convention(c) (Int) -> CURLcode).self)
        guard initialise(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK else {
            return .failure(.internalError("libcurl could not be initialised"))
        }
        return .success(library)
    }
}
