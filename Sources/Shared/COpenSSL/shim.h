#include <openssl/evp.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <openssl/pkcs7.h>
#include <openssl/cms.h>
#include <openssl/sha.h>
#include <openssl/rand.h>
#include <openssl/hmac.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/objects.h>
#include <openssl/asn1.h>

/* Shims for OpenSSL 3.0 macros: Swift cannot import function-like or compound macros. */
/* sk_X509_* are type-checking macros over OPENSSL_sk_*. */
static inline STACK_OF(X509) *storeledger_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int storeledger_sk_X509_push(STACK_OF(X509) *sk, X509 *x) { return sk_X509_push(sk, x); }
static inline int storeledger_sk_X509_num(const STACK_OF(X509) *sk) { return sk_X509_num(sk); }
static inline X509 *storeledger_sk_X509_value(const STACK_OF(X509) *sk, int i) { return sk_X509_value(sk, i); }
/* sk_X509_pop_free takes a free function; fixing X509_free here avoids a C function pointer in Swift. */
static inline void storeledger_sk_X509_pop_free(STACK_OF(X509) *sk) { sk_X509_pop_free(sk, X509_free); }
/* sk_X509_free frees only the stack (the certificates stay owned by their Swift wrappers). */
static inline void storeledger_sk_X509_free(STACK_OF(X509) *sk) { sk_X509_free(sk); }
/* OPENSSL_free is a macro that adds __FILE__/__LINE__. */
static inline void storeledger_OPENSSL_free(void *p) { OPENSSL_free(p); }
/* BIO_get_mem_data is a macro over BIO_ctrl. */
static inline long storeledger_BIO_get_mem_data(BIO *b, char **pp) { return BIO_get_mem_data(b, pp); }
/* XN_FLAG_ONELINE is a compound macro; drop ESC_MSB so UTF-8 names print as text. */
static inline unsigned long storeledger_XN_FLAG_ONELINE_UTF8(void) { return XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB; }
