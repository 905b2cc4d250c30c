/*
 * token.c: lock tokens and jitter from the kernel's CSPRNG.
 *
 * A token must be unguessable and unique across every client that ever takes the
 * same name: 128 bits from getrandom(2), never time, pid or a counter. getrandom
 * needs no global state and no seeding, so nothing here is initialised.
 *
 * Tokens are taken from a per-thread pool of getrandom bytes, refilled
 * DLOCK_POOL_BYTES at a time: on this glibc (2.36) getrandom is a system call, which
 * costs about 1 us on a kernel with page-table isolation, once per acquire otherwise
 * (docs/benchmarks.md). The bytes are the kernel's, used once each and wiped when
 * used, so a token is exactly as unguessable as one read on its own.
 */
#include "base.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

/* Fill buf from getrandom, retrying on EINTR and short reads (a read of <= 256 bytes
 * from an initialised pool is never short; a longer one, such as a refill of the
 * token pool, can be cut short by a signal). */
static int fill_random(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t got = getrandom(p, len, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return DLOCK_ERR_IO; /* errno says why */
        }
        p += got;
        len -= (size_t)got;
    }
    return DLOCK_OK;
}

/* 32 tokens per getrandom call: the call's cost all but disappears, and the pool stays
 * small (it is in every thread's TLS block, whether the thread takes locks or not). */
#define DLOCK_POOL_BYTES 512

/*
 * The pool: thread-local, so threads never share or lock it (like error.c's detail
 * buffer, it is state outside the handles only in that sense). Fork safety: a child
 * of fork() starts with a copy of the forking thread's pool, whose unused bytes the
 * parent will also use. So the pool remembers the fork generation it was filled in
 * (dlock__fork_gen: counted by a pthread_atfork child handler, no system call), and a
 * caller in a forked child refills it before taking a byte. Unlike a pid, a
 * generation cannot be reused by a later process.
 */
static _Thread_local struct {
    unsigned char bytes[DLOCK_POOL_BYTES];
    size_t used;  /* bytes[used..] have not been handed out */
    bool filled;  /* bytes holds unused random bytes of generation gen */
    uint64_t gen; /* dlock__fork_gen() when filled */
} pool;

int dlock__token_new(char out[DLOCK_TOKEN_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    enum { RAW = DLOCK_TOKEN_LEN / 2 };
    _Static_assert(DLOCK_POOL_BYTES % RAW == 0, "the pool holds whole tokens");
    uint64_t gen = dlock__fork_gen();
    if (!pool.filled || pool.gen != gen || pool.used + RAW > DLOCK_POOL_BYTES) {
        /* Mark it empty first: a failed refill must not leave old bytes for reuse. */
        pool.filled = false;
        int rc = fill_random(pool.bytes, sizeof pool.bytes);
        if (rc != DLOCK_OK)
            return rc;
        pool.filled = true;
        pool.gen = gen;
        pool.used = 0;
    }
    unsigned char *raw = pool.bytes + pool.used;
    pool.used += RAW;
    for (size_t i = 0; i < RAW; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DLOCK_TOKEN_LEN] = '\0';
    /* A used byte is not left behind: not for a core dump, not for a later token. */
    memset(raw, 0, RAW);
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
