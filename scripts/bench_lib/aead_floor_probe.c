/* aead_floor_probe: what sealing and opening TLS 1.3 records with BoringSSL's AEAD costs on this
 * machine, per GiB, on one thread and with no socket: the AEAD the bridge's records use since
 * session 20 (RecordAEAD, reference/DECISIONS.md "The records' AEAD is BoringSSL's"). Built and
 * run by `scripts/bench --sections floor` beside tls_floor_probe (OpenSSL's AEAD), linked with the
 * BoringSSL objects of the package's own build (swift-crypto's CCryptoBoringSSL) and calling the
 * functions CCFShim_BoringSSL.h declares, as RecordAEAD does. Not part of the product.
 *
 *   aead_floor_probe MIB
 *
 * Same shape as tls_floor_probe's seal and open: windows of 15 records of 16 KiB + 1 byte of
 * content type (the type goes in as BoringSSL's extra input, as RecordAEAD passes it), the 5-byte
 * header as associated data, a nonce per record, AES-128-GCM; each window is copied into a
 * buffer that stays in the cache before it is timed. Every tag is checked and every opened byte
 * compared with what was sealed. One line of JSON on stdout ({"bssl_seal": s, "bssl_open": s},
 * CPU seconds per GiB); exit 1 with a line on stderr when anything fails. */
#include "CCFShim_BoringSSL.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floor_probe.h"

#define RECORD_PLAIN (16 * 1024)
#define RECORD_SPAN (5 + RECORD_PLAIN + 1 + 16)
#define WINDOW_RECORDS 15
#define WINDOW_PLAIN (WINDOW_RECORDS * RECORD_PLAIN)
#define WINDOW_SEALED (WINDOW_RECORDS * RECORD_SPAN)

static void fail(const char *what) {
    fprintf(stderr, "aead_floor_probe: %s\n", what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: aead_floor_probe MIB\n");
        return 1;
    }
    long mib = strtol(argv[1], NULL, 10);
    if (mib < 4 || mib > 8192) fail("MIB must be 4 to 8192");
    size_t windows = ((size_t)mib << 20) / WINDOW_PLAIN;
    size_t total = windows * WINDOW_PLAIN;
    unsigned char *plain = allocate(total);
    pattern(plain, total);
    unsigned char *sealed = allocate(windows * WINDOW_SEALED);
    unsigned char *window = allocate(WINDOW_SEALED);

    unsigned char key[16], iv[12], n[12];
    for (int i = 0; i < 16; i++) key[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 12; i++) iv[i] = (unsigned char)(i * 13 + 2);
    struct evp_aead_ctx_st *aead = CCryptoBoringSSL_EVP_AEAD_CTX_new(CCryptoBoringSSL_EVP_aead_aes_128_gcm(), key, 16, 16);
    if (!aead) fail("EVP_AEAD_CTX_new");
    const uint8_t type = 23;
    double t, seal = 0, open = 0;
    uint64_t sequence = 0;
    for (size_t w = 0; w < windows; w++) {
        for (size_t r = 0; r < WINDOW_RECORDS; r++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            rec[0] = 23, rec[1] = 3, rec[2] = 3;
            rec[3] = (RECORD_PLAIN + 1 + 16) >> 8, rec[4] = (RECORD_PLAIN + 1 + 16) & 0xff;
            memcpy(rec + 5, plain + w * WINDOW_PLAIN + r * RECORD_PLAIN, RECORD_PLAIN);
        }
        t = thread_cpu();
        for (size_t r = 0; r < WINDOW_RECORDS; r++, sequence++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            size_t tail = 0;
            nonce(n, iv, sequence);
            if (CCryptoBoringSSL_EVP_AEAD_CTX_seal_scatter(aead, rec + 5, rec + 5 + RECORD_PLAIN, &tail, 17, n, 12,
                                                           rec + 5, RECORD_PLAIN, &type, 1, rec, 5) != 1
                || tail != 17)
                fail("sealing a record");
        }
        seal += thread_cpu() - t;
        memcpy(sealed + w * WINDOW_SEALED, window, WINDOW_SEALED);
    }
    sequence = 0;
    for (size_t w = 0; w < windows; w++) {
        memcpy(window, sealed + w * WINDOW_SEALED, WINDOW_SEALED);
        t = thread_cpu();
        for (size_t r = 0; r < WINDOW_RECORDS; r++, sequence++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            size_t opened = 0;
            nonce(n, iv, sequence);
            if (CCryptoBoringSSL_EVP_AEAD_CTX_open(aead, rec + 5, &opened, RECORD_PLAIN + 17, n, 12, rec + 5,
                                                   RECORD_PLAIN + 17, rec, 5) != 1
                || opened != RECORD_PLAIN + 1)
                fail("a sealed record did not open");
        }
        open += thread_cpu() - t;
        for (size_t r = 0; r < WINDOW_RECORDS; r++) {
            const unsigned char *rec = window + r * RECORD_SPAN;
            if (memcmp(rec + 5, plain + w * WINDOW_PLAIN + r * RECORD_PLAIN, RECORD_PLAIN) != 0 || rec[5 + RECORD_PLAIN] != type)
                fail("an opened record differs from what was sealed");
        }
    }
    CCryptoBoringSSL_EVP_AEAD_CTX_free(aead);
    printf("{\"bssl_seal\": %.4f, \"bssl_open\": %.4f}\n", seal * GIB / (double)total, open * GIB / (double)total);
    return 0;
}
