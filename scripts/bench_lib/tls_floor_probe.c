/* tls_floor_probe: what the user-space work of a TLS 1.3 WebSocket relay costs on this machine at
 * the least, per GiB, on one thread and with no socket (issue 27 point 1). Built and run by
 * `scripts/bench --sections floor`; not part of the product.
 *
 *   tls_floor_probe MIB CERT.pem KEY.pem
 *
 * A relay works on bytes a system call has just copied in, so every figure is taken on a buffer
 * of ~256 KiB that is already in the cache: each window of the MIB MiB is first copied into it
 * (not timed), as a recv() would leave it. Each figure is the thread's CPU seconds per GiB:
 *   copy        memcpy of each window into the buffer (the one figure that includes it)
 *   mask        a WebSocket mask (4-byte key) applied in place, 8 bytes a step
 *   seal, open  AES-128-GCM straight from EVP, in place, TLS 1.3's record shape (16 KiB + 1 byte
 *               of content type, the 5-byte header as associated data, a nonce per record); open
 *               checks every tag and every byte against what was sealed
 *   tls_write   OpenSSL's own TLS 1.3 record layer (a session made in memory,
 *               TLS_AES_128_GCM_SHA256): SSL_write of 256 KiB into a BIO that copies the records
 *               into a buffer, as the carrier's does
 *   tls_read    SSL_read of those records into 1 MiB, from a BIO that copies them out of a buffer
 *               holding ~256 KiB of them, as the carrier's does; every byte is checked
 * One line of JSON on stdout; exit 1 with a line on stderr when anything fails. */
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floor_probe.h"

#define BLOCK (256 * 1024)
#define RECORD_CONTENT (16 * 1024 + 1)
#define RECORD_SPAN (5 + RECORD_CONTENT + 16)

static void fail(const char *what) {
    unsigned long e = ERR_get_error();
    fprintf(stderr, "tls_floor_probe: %s%s%s\n", what, e ? ": " : "", e ? ERR_reason_error_string(e) : "");
    exit(1);
}

/* The records OpenSSL writes go to `scratch` through the sink; the source hands OpenSSL what
 * `scratch` holds. */
static unsigned char *scratch;
static size_t scratch_size, scratch_start, scratch_end;

static int sink_write(BIO *bio, const char *data, size_t length, size_t *written) {
    (void)bio;
    if (scratch_end + length > scratch_size) fail("the record buffer is full");
    memcpy(scratch + scratch_end, data, length);
    scratch_end += length;
    *written = length;
    return 1;
}

static int source_read(BIO *bio, char *data, size_t length, size_t *read) {
    size_t left = scratch_end - scratch_start;
    if (left == 0) {
        BIO_set_retry_read(bio);
        return 0;
    }
    if (length > left) length = left;
    memcpy(data, scratch + scratch_start, length);
    scratch_start += length;
    *read = length;
    return 1;
}

static long control(BIO *bio, int command, long number, void *pointer) {
    (void)bio, (void)number, (void)pointer;
    return command == BIO_CTRL_FLUSH ? 1 : 0;
}

/* Moves what one side wrote into the other side's memory BIO (the handshake only). */
static void carry(BIO *from, BIO *to) {
    char chunk[16384];
    int n;
    while ((n = BIO_read(from, chunk, sizeof chunk)) > 0)
        if (BIO_write(to, chunk, n) != n) fail("BIO_write");
}

static void handshake(SSL *client, SSL *server) {
    for (int round = 0; round < 20; round++) {
        int c = SSL_do_handshake(client);
        carry(SSL_get_wbio(client), SSL_get_rbio(server));
        int s = SSL_do_handshake(server);
        carry(SSL_get_wbio(server), SSL_get_rbio(client));
        if (c == 1 && s == 1) return;
    }
    fail("the TLS handshake did not finish");
}

static SSL_CTX *context(const SSL_METHOD *method) {
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) fail("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    if (SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256") != 1) fail("SSL_CTX_set_ciphersuites");
    return ctx;
}

static void mask(unsigned char *p, size_t n, uint32_t key) {
    const uint64_t key8 = (uint64_t)key << 32 | key;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        word ^= key8;
        memcpy(p + i, &word, 8);
    }
    for (; i < n; i++) p[i] ^= (unsigned char)(key >> (8 * (i % 4)));
}

#define WINDOW_RECORDS 15
#define WINDOW_PLAIN (WINDOW_RECORDS * (RECORD_CONTENT - 1))
#define WINDOW_SEALED (WINDOW_RECORDS * RECORD_SPAN)

static double per_gib(double seconds, size_t bytes) { return seconds * GIB / (double)bytes; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: tls_floor_probe MIB CERT.pem KEY.pem\n");
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
    unsigned char *out = allocate(1 << 20);
    scratch_size = 2 * BLOCK;
    scratch = allocate(scratch_size);
    double t, copy = 0, masking = 0, seal = 0, open = 0, tls_write = 0, tls_read = 0;

    /* copy, and masking on the copy */
    for (size_t w = 0; w < windows; w++) {
        t = thread_cpu();
        memcpy(window, plain + w * WINDOW_PLAIN, WINDOW_PLAIN);
        copy += thread_cpu() - t;
        t = thread_cpu();
        mask(window, WINDOW_PLAIN, 0x1f2e3d4cu + (uint32_t)w);
        masking += thread_cpu() - t;
    }

    /* seal and open, straight from EVP */
    unsigned char key[16], iv[12], n[12];
    for (int i = 0; i < 16; i++) key[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < 12; i++) iv[i] = (unsigned char)(i * 13 + 2);
    EVP_CIPHER_CTX *aead = EVP_CIPHER_CTX_new();
    if (!aead || EVP_EncryptInit_ex(aead, EVP_aes_128_gcm(), NULL, key, NULL) != 1) fail("EVP_EncryptInit_ex");
    int length;
    uint64_t sequence = 0;
    for (size_t w = 0; w < windows; w++) {
        for (size_t r = 0; r < WINDOW_RECORDS; r++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            rec[0] = 23, rec[1] = 3, rec[2] = 3;
            rec[3] = (RECORD_CONTENT + 16) >> 8, rec[4] = (RECORD_CONTENT + 16) & 0xff;
            memcpy(rec + 5, plain + w * WINDOW_PLAIN + r * (RECORD_CONTENT - 1), RECORD_CONTENT - 1);
            rec[5 + RECORD_CONTENT - 1] = 23;
        }
        t = thread_cpu();
        for (size_t r = 0; r < WINDOW_RECORDS; r++, sequence++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            nonce(n, iv, sequence);
            if (EVP_EncryptInit_ex(aead, NULL, NULL, NULL, n) != 1
                || EVP_EncryptUpdate(aead, NULL, &length, rec, 5) != 1
                || EVP_EncryptUpdate(aead, rec + 5, &length, rec + 5, RECORD_CONTENT) != 1
                || EVP_EncryptFinal_ex(aead, rec + 5 + RECORD_CONTENT, &length) != 1
                || EVP_CIPHER_CTX_ctrl(aead, EVP_CTRL_GCM_GET_TAG, 16, rec + 5 + RECORD_CONTENT) != 1)
                fail("sealing a record");
        }
        seal += thread_cpu() - t;
        memcpy(sealed + w * WINDOW_SEALED, window, WINDOW_SEALED);
    }
    if (EVP_DecryptInit_ex(aead, EVP_aes_128_gcm(), NULL, key, NULL) != 1) fail("EVP_DecryptInit_ex");
    sequence = 0;
    for (size_t w = 0; w < windows; w++) {
        memcpy(window, sealed + w * WINDOW_SEALED, WINDOW_SEALED);
        t = thread_cpu();
        for (size_t r = 0; r < WINDOW_RECORDS; r++, sequence++) {
            unsigned char *rec = window + r * RECORD_SPAN;
            nonce(n, iv, sequence);
            if (EVP_DecryptInit_ex(aead, NULL, NULL, NULL, n) != 1
                || EVP_DecryptUpdate(aead, NULL, &length, rec, 5) != 1
                || EVP_DecryptUpdate(aead, rec + 5, &length, rec + 5, RECORD_CONTENT) != 1
                || EVP_CIPHER_CTX_ctrl(aead, EVP_CTRL_GCM_SET_TAG, 16, rec + 5 + RECORD_CONTENT) != 1
                || EVP_DecryptFinal_ex(aead, rec + 5 + RECORD_CONTENT, &length) != 1)
                fail("a sealed record did not open");
        }
        open += thread_cpu() - t;
        for (size_t r = 0; r < WINDOW_RECORDS; r++)
            if (memcmp(window + r * RECORD_SPAN + 5, plain + w * WINDOW_PLAIN + r * (RECORD_CONTENT - 1),
                       RECORD_CONTENT - 1) != 0)
                fail("an opened record differs from what was sealed");
    }
    EVP_CIPHER_CTX_free(aead);

    /* OpenSSL's record layer */
    SSL_CTX *server_ctx = context(TLS_server_method()), *client_ctx = context(TLS_client_method());
    if (SSL_CTX_use_certificate_file(server_ctx, argv[2], SSL_FILETYPE_PEM) != 1) fail("the certificate");
    if (SSL_CTX_use_PrivateKey_file(server_ctx, argv[3], SSL_FILETYPE_PEM) != 1) fail("the key");
    SSL *server = SSL_new(server_ctx), *client = SSL_new(client_ctx);
    if (!server || !client) fail("SSL_new");
    BIO *pipes[4];
    for (int i = 0; i < 4; i++) {
        pipes[i] = BIO_new(BIO_s_mem());
        if (!pipes[i]) fail("BIO_new");
        BIO_set_mem_eof_return(pipes[i], -1);
    }
    SSL_set_bio(server, pipes[0], pipes[1]);
    SSL_set_bio(client, pipes[2], pipes[3]);
    SSL_set_accept_state(server);
    SSL_set_connect_state(client);
    handshake(client, server);
    /* The server's session tickets reach the client before the records that are timed. */
    carry(SSL_get_wbio(server), SSL_get_rbio(client));
    if (SSL_read(client, out, 1) > 0) fail("unexpected application data");
    ERR_clear_error();

    BIO_METHOD *sink = BIO_meth_new(BIO_TYPE_SOURCE_SINK | BIO_get_new_index(), "floor sink");
    BIO_METHOD *source = BIO_meth_new(BIO_TYPE_SOURCE_SINK | BIO_get_new_index(), "floor source");
    if (!sink || !source) fail("BIO_meth_new");
    BIO_meth_set_write_ex(sink, sink_write);
    BIO_meth_set_ctrl(sink, control);
    BIO_meth_set_read_ex(source, source_read);
    BIO_meth_set_ctrl(source, control);
    BIO *to_wire = BIO_new(sink), *from_wire = BIO_new(source);
    if (!to_wire || !from_wire) fail("BIO_new");
    BIO_set_init(to_wire, 1);
    BIO_set_init(from_wire, 1);
    SSL_set0_wbio(server, to_wire);
    SSL_set0_rbio(client, from_wire);

    /* SSL_write of each window, the records kept (in `sealed`, reused) for SSL_read */
    size_t wire_end = 0;
    for (size_t w = 0; w < windows; w++) {
        memcpy(window, plain + w * WINDOW_PLAIN, WINDOW_PLAIN);
        scratch_end = 0;
        t = thread_cpu();
        if (SSL_write(server, window, WINDOW_PLAIN) != WINDOW_PLAIN) fail("SSL_write");
        tls_write += thread_cpu() - t;
        if (wire_end + scratch_end > windows * WINDOW_SEALED) fail("more records than expected");
        memcpy(sealed + wire_end, scratch, scratch_end);
        wire_end += scratch_end;
    }

    /* SSL_read of them, ~256 KiB of records at a time, every byte checked */
    size_t wire_read = 0, received = 0;
    while (wire_read < wire_end) {
        size_t chunk = wire_end - wire_read < BLOCK ? wire_end - wire_read : BLOCK;
        memcpy(scratch, sealed + wire_read, chunk);
        wire_read += chunk;
        scratch_start = 0;
        scratch_end = chunk;
        for (;;) {
            t = thread_cpu();
            int got = SSL_read(client, out, 1 << 20);
            tls_read += thread_cpu() - t;
            if (got <= 0) {
                if (SSL_get_error(client, got) != SSL_ERROR_WANT_READ) fail("SSL_read");
                break;
            }
            if (received + (size_t)got > total || memcmp(out, plain + received, (size_t)got) != 0)
                fail("SSL_read gave other bytes than SSL_write took");
            received += (size_t)got;
        }
    }
    if (received != total) fail("SSL_read gave fewer bytes than SSL_write took");

    printf("{\"mib\": %ld, \"cipher\": \"%s\", \"openssl\": \"%s\", \"copy\": %.4f, \"mask\": %.4f, "
           "\"seal\": %.4f, \"open\": %.4f, \"tls_write\": %.4f, \"tls_read\": %.4f}\n",
           mib, SSL_get_cipher_name(client), OpenSSL_version(OPENSSL_VERSION), per_gib(copy, total),
           per_gib(masking, total), per_gib(seal, total), per_gib(open, total), per_gib(tls_write, total),
           per_gib(tls_read, total));
    return 0;
}
