/*
 * token.c: lock tokens and jitter from the kernel's CSPRNG.
 *
 * A token must be unguessable and unique across every client that ever takes the
 * same name: 128 bits from getrandom(2), never time, pid or a counter. getrandom
 * needs no global state and no seeding, so nothing here is initialised.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

/* Fill buf from getrandom, retrying on EINTR and short reads (a read of <= 256 bytes
 * from an initialised pool is never short, but the contract allows it). */
static int fill_random(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = getrandom(p, len, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return dlock__fail(DLOCK_ERR_IO, "getrandom: %s", strerror(errno));
        }
        p += got;
        len -= (size_t)got;
    }
    return DLOCK_OK;
}

int dlock__token_new(char out[DLOCK_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[DLOCK_TOKEN_LEN / 2];
    int rc = fill_random(raw, sizeof raw);
    if (rc != DLOCK_OK)
        return rc;
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DLOCK_TOKEN_LEN] = '\0';
    return DLOCK_OK;
}

bool dlock__token_valid(const char *s)
{
    for (int i = 0; i < DLOCK_TOKEN_LEN; i++) {
        char ch = s[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return false;
    }
    return s[DLOCK_TOKEN_LEN] == '\0';
}

uint64_t dlock__random_below(uint64_t bound)
{
    uint64_t x = 0;
    /* Jitter only spreads retries; if the kernel cannot give randomness, no jitter
     * is still correct. The modulo bias is irrelevant for delays. */
    if (bound == 0 || fill_random(&x, sizeof x) != DLOCK_OK)
        return 0;
    return x % bound;
}
