/* What the two floor probes (tls_floor_probe.c, aead_floor_probe.c) share: the thread's CPU clock,
 * buffers touched before anything is timed, TLS 1.3's per-record nonce and the bench's byte
 * pattern. Each probe defines its own fail(). Not part of the product. */
#ifndef FLOOR_PROBE_H
#define FLOOR_PROBE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static void fail(const char *what);

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static unsigned char *allocate(size_t n) {
    unsigned char *p = malloc(n);
    if (!p) fail("out of memory");
    memset(p, 0x5a, n); /* touch every page before anything is timed */
    return p;
}

/* RFC 8446 §5.3: the IV xored with the record's number, big-endian in the last 8 bytes. */
static void nonce(unsigned char out[12], const unsigned char iv[12], uint64_t sequence) {
    memcpy(out, iv, 12);
    for (int i = 0; i < 8; i++) out[11 - i] ^= (unsigned char)(sequence >> (8 * i));
}

/* byte i = i % 251, the pattern of the bench's source target. */
static void pattern(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i % 251);
}

#endif
