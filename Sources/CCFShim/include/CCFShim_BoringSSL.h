// The few functions of BoringSSL's AEAD API that the records after the upgrade use
// (AccessTransport's RecordAEAD), from the copy of BoringSSL that swift-crypto builds into the
// package: its symbols carry swift-crypto's `CCryptoBoringSSL_` prefix, so they never meet
// OpenSSL's.
//
// Declared here rather than imported: BoringSSL's headers define C types under the same names as
// OpenSSL's (`BUF_MEM`, ...), and one Swift module cannot import both. The declarations use
// BoringSSL's own struct tags, left incomplete (OpenSSL has no type of these names), and are
// BoringSSL's <openssl/aead.h> prototypes word for word, with the prefix: scripts/check-c-warnings
// compiles this header together with swift-crypto's CCryptoBoringSSL_aead.h, so a prototype that
// drifts from BoringSSL's is a compile error, not a wrong call.
#ifndef CCFSHIM_BORINGSSL_H
#define CCFSHIM_BORINGSSL_H

#include <stddef.h>
#include <stdint.h>

struct evp_aead_st;
struct evp_aead_ctx_st;

const struct evp_aead_st *CCryptoBoringSSL_EVP_aead_aes_128_gcm(void);
const struct evp_aead_st *CCryptoBoringSSL_EVP_aead_aes_256_gcm(void);
const struct evp_aead_st *CCryptoBoringSSL_EVP_aead_chacha20_poly1305(void);

struct evp_aead_ctx_st *CCryptoBoringSSL_EVP_AEAD_CTX_new(const struct evp_aead_st *aead, const uint8_t *key,
                                                           size_t key_len, size_t tag_len);
void CCryptoBoringSSL_EVP_AEAD_CTX_free(struct evp_aead_ctx_st *ctx);

int CCryptoBoringSSL_EVP_AEAD_CTX_seal_scatter(const struct evp_aead_ctx_st *ctx, uint8_t *out, uint8_t *out_tag,
                                               size_t *out_tag_len, size_t max_out_tag_len, const uint8_t *nonce,
                                               size_t nonce_len, const uint8_t *in, size_t in_len,
                                               const uint8_t *extra_in, size_t extra_in_len, const uint8_t *ad,
                                               size_t ad_len);
int CCryptoBoringSSL_EVP_AEAD_CTX_open(const struct evp_aead_ctx_st *ctx, uint8_t *out, size_t *out_len,
                                       size_t max_out_len, const uint8_t *nonce, size_t nonce_len,
                                       const uint8_t *in, size_t in_len, const uint8_t *ad, size_t ad_len);

void CCryptoBoringSSL_ERR_clear_error(void);

#endif
