// The one piece of logic in C, because it must sit under libwebsockets (issue 12, point 1).
//
// libwebsockets 4.1.6 reads the 101 response of a WebSocket upgrade with one large SSL_read and
// keeps whatever follows the headers in its own buffer, which no public API gives back. An edge
// that sends its first frame in the same TLS record as the 101 would lose those bytes once the
// carrier reads the TLS stream itself. So while a connection waits for its 101, reads of its
// SSL are clamped to one byte: libwebsockets stops exactly at the end of the headers and every
// later byte stays in OpenSSL for the carrier.
//
// This file defines SSL_read itself. The executable's definition comes first in the dynamic
// linker's lookup, so libwebsockets' calls land here too; every call is passed to OpenSSL's
// SSL_read (RTLD_NEXT), with `num` clamped to 1 only for an SSL marked with CCFShim_clamp_reads.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <openssl/ssl.h>
#include "CCFShim.h"

typedef int (*ssl_read_fn)(SSL *, void *, int);

static ssl_read_fn real_ssl_read;
static int clamp_index = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void) {
    real_ssl_read = (ssl_read_fn)dlsym(RTLD_NEXT, "SSL_read");
    if (real_ssl_read == NULL) {
        void *libssl = dlopen("libssl.so.3", RTLD_NOW | RTLD_NOLOAD);
        if (libssl != NULL) real_ssl_read = (ssl_read_fn)dlsym(libssl, "SSL_read");
    }
    clamp_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

int CCFShim_clamp_reads(SSL *ssl, int on) {
    pthread_once(&once, setup);
    if (clamp_index < 0 || real_ssl_read == NULL) return 0;
    return SSL_set_ex_data(ssl, clamp_index, on ? (void *)ssl : NULL);
}

int SSL_read(SSL *ssl, void *buf, int num) {
    pthread_once(&once, setup);
    if (clamp_index >= 0 && num > 1 && SSL_get_ex_data(ssl, clamp_index) != NULL) num = 1;
    return real_ssl_read(ssl, buf, num);
}
