// CCFShim: the one thin C shim of cf-access-tcp.
//
// Every symbol is prefixed CCFShim_ and only forwards something Swift cannot import
// directly: function-like or expression macros and variadic C functions. No logic lives here.
#ifndef CCFSHIM_H
#define CCFSHIM_H

#include <curl/curl.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
// Swift's Glibc module leaves out <sys/epoll.h>, <sys/eventfd.h>, <sys/random.h> and
// <sys/timerfd.h>; the carrier's loop and data path need them (no forwarders).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>

// curl_easy_setopt / curl_easy_getinfo are variadic: one typed forwarder per argument kind.
// libcurl is loaded with dlopen on first use (CurlLibrary.swift), not linked: each forwarder
// calls the function dlsym found, passed in as `fn`.
typedef CURLcode (*CCFShim_curl_setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*CCFShim_curl_getinfo_fn)(CURL *, CURLINFO, ...);
static inline CURLcode CCFShim_curl_setopt_long(void *fn, CURL *h, CURLoption o, long v) {
    return ((CCFShim_curl_setopt_fn)fn)(h, o, v);
}
static inline CURLcode CCFShim_curl_setopt_ptr(void *fn, CURL *h, CURLoption o, const void *v) {
    return ((CCFShim_curl_setopt_fn)fn)(h, o, v);
}
static inline CURLcode CCFShim_curl_setopt_str(void *fn, CURL *h, CURLoption o, const char *v) {
    return ((CCFShim_curl_setopt_fn)fn)(h, o, v);
}
static inline CURLcode CCFShim_curl_setopt_write(void *fn, CURL *h, CURLoption o,
    size_t (*cb)(char *, size_t, size_t, void *)) { return ((CCFShim_curl_setopt_fn)fn)(h, o, cb); }
static inline CURLcode CCFShim_curl_getinfo_long(void *fn, CURL *h, CURLINFO i, long *v) {
    return ((CCFShim_curl_getinfo_fn)fn)(h, i, v);
}

// SSL_OP_NO_RENEGOTIATION is built by the function-like macro SSL_OP_BIT, which Swift cannot import.
static inline uint64_t CCFShim_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }

// EVP_PKEY_PUBLIC_KEY is an expression macro (an OR of selection bits) Swift cannot import.
static inline int CCFShim_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }

// prctl is variadic, which Swift cannot call: the one option we use, PR_SET_DUMPABLE.
static inline int CCFShim_set_dumpable(int on) { return prctl(PR_SET_DUMPABLE, (unsigned long)on, 0UL, 0UL, 0UL); }
// The calling thread's name (PR_SET_NAME: the kernel keeps the first 15 bytes), for our own
// threads (AccessTransport's PThread): Swift's Glibc module has no pthread_setname_np.
static inline int CCFShim_set_thread_name(const char *name) { return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL); }
// syscall is variadic, and Swift's Glibc module has no sched_getaffinity (a GNU extension): the
// calling process's CPU affinity mask into `mask` (`size` bytes); the kernel's byte count, or -1.
static inline long CCFShim_sched_getaffinity(void *mask, size_t size) { return syscall(SYS_sched_getaffinity, 0, size, mask); }

// libdispatch's main-queue handle (an eventfd on Linux), made once (dispatch_once) by whoever
// asks first. When an async main parks the main thread, libdispatch makes it during that
// thread's exit and aborts (SIGILL) if no descriptor is left by then, which a tool started under
// a tiny RLIMIT_NOFILE could hit while its first task opened sockets. The tool asks first, before
// anything else; the libraries never call it.
extern int _dispatch_get_main_queue_handle_4CF(void);
static inline int CCFShim_prepare_main_queue_handle(void) { return _dispatch_get_main_queue_handle_4CF(); }

// BoringSSL's AEAD as swift-crypto builds it, for the records after the upgrade (RecordAEAD.swift).
#include "CCFShim_BoringSSL.h"

#endif
