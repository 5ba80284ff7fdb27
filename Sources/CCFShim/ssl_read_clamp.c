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
//
// Reading the answer a byte at a time also lets us see at once an answer that is not HTTP (an
// SSH banner, a misdirected --connect-to): its first bytes differ from "HTTP/". libwebsockets
// would wait for an end of headers that never comes, until the connect timeout; instead the read
// fails there (-1, which libwebsockets takes as a dead connection) and the bytes seen are kept
// for the message (CCFShim_not_http_answer).
//
// The state of a clamped SSL lives in its ex-data pointer itself, no allocation: bit 0 clamped,
// bit 1 "not HTTP", bits 2-4 how many of the first bytes were kept (at most 7), bits 8-63 those
// bytes. Once an answer is known not to be HTTP, what else is already decrypted is kept too (up
// to 7 bytes), so the message can show it ("SSH-2.0…").
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
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

#define CLAMPED ((uintptr_t)1)
#define NOT_HTTP ((uintptr_t)2)
#define COUNT(state) ((int)(((state) >> 2) & 7))
#define BYTE(state, i) ((char)(((state) >> (8 + 8 * (i))) & 0xff))

int CCFShim_clamp_reads(SSL *ssl, int on) {
    pthread_once(&once, setup);
    if (clamp_index < 0 || real_ssl_read == NULL) return 0;
    return SSL_set_ex_data(ssl, clamp_index, on ? (void *)CLAMPED : NULL);
}

int CCFShim_not_http_answer(SSL *ssl, char *first, int size) {
    pthread_once(&once, setup);
    if (clamp_index < 0 || size < 8) return 0;
    uintptr_t state = (uintptr_t)SSL_get_ex_data(ssl, clamp_index);
    if (!(state & NOT_HTTP)) return 0;
    int n = COUNT(state);
    for (int i = 0; i < n; i++) first[i] = BYTE(state, i);
    first[n] = 0;
    return n;
}

// `state` with one more first byte kept.
static uintptr_t keep(uintptr_t state, char byte) {
    int seen = COUNT(state);
    state |= (uintptr_t)(unsigned char)byte << (8 + 8 * seen);
    return (state & ~((uintptr_t)7 << 2)) | ((uintptr_t)(seen + 1) << 2);
}

int SSL_read(SSL *ssl, void *buf, int num) {
    pthread_once(&once, setup);
    if (clamp_index < 0) return real_ssl_read(ssl, buf, num);
    uintptr_t state = (uintptr_t)SSL_get_ex_data(ssl, clamp_index);
    if (!(state & CLAMPED)) return real_ssl_read(ssl, buf, num);
    if (state & NOT_HTTP) return -1;
    int n = real_ssl_read(ssl, buf, num > 1 ? 1 : num);
    int seen = COUNT(state);
    if (n != 1 || seen >= 5) return n;
    char byte = ((char *)buf)[0];
    state = keep(state, byte);
    if (byte != "HTTP/"[seen]) {
        state |= NOT_HTTP;
        char more;
        while (COUNT(state) < 7 && SSL_pending(ssl) > 0 && real_ssl_read(ssl, &more, 1) == 1) state = keep(state, more);
    }
    SSL_set_ex_data(ssl, clamp_index, (void *)state);
    return (state & NOT_HTTP) ? -1 : n;
}
