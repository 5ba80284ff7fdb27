internal import CCFOpenSSL

/// Initialises OpenSSL once, without its exit-time cleanup (`OPENSSL_INIT_NO_ATEXIT`): the
/// process may exit while a carrier, libcurl or a finishing thread still touches OpenSSL's global
/// state, and freeing that state under them corrupts the heap. The operating system reclaims it.
enum OpenSSLSetup {
    /// Evaluated once, before libcurl, libwebsockets or our own calls initialise OpenSSL.
    static let initialised: Bool = OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1
}
