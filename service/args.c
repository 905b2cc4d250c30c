/*
 * args.c: reading a command's arguments: words, names, integers as redis-server reads
 * them, and the options that several commands share (TTL, WAIT, MAXHOLD, LABEL, VALUE).
 *
 * Every reader checks on the loop, before anything runs, so that a bad argument changes
 * nothing on the lock servers; those given `out` write the -ERR reply on failure, in
 * the words the clients' tests know.
 */
#include "dlockd.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool dd_arg_is(const resp_arg *a, const char *word)
{
    size_t n = strlen(word);
    return a->len == n && strncasecmp(a->p, word, n) == 0;
}

/* A lock name or label for the library: a C string, so no NUL inside. */
char *dd_arg_dup(const resp_arg *a, const char *what, size_t max, dd_buf *out)
{
    if (a->len == 0 || a->len > max) {
        dd_reply_error(out, "ERR %s must be 1 to %zu bytes", what, max);
        return NULL;
    }
    if (memchr(a->p, '\0', a->len) != NULL) {
        dd_reply_error(out, "ERR %s must not contain NUL bytes", what);
        return NULL;
    }
    char *s = strndup(a->p, a->len);
    if (s == NULL)
        abort();
    return s;
}

char *dd_arg_value(const resp_arg *a, dd_buf *out)
{
    if (a->len > DLOCK_LEADER_VALUE_MAX) {
        dd_reply_error(out, "ERR a leader's value must be at most %d bytes",
                       DLOCK_LEADER_VALUE_MAX);
        return NULL;
    }
    if (a->len == 0) {
        char *v = strdup("");
        if (v == NULL)
            abort();
        return v;
    }
    return dd_arg_dup(a, "a leader's value", DLOCK_LEADER_VALUE_MAX, out);
}

/* A decimal integer in [lo, hi], read as redis-server's string2ll reads one: an
 * optional '-', then digits with no leading zero ("0" alone excepted), nothing else
 * (no sign '+', no space, tab or newline before or after), within 64 bits. */
bool dd_arg_int(const resp_arg *a, int64_t lo, int64_t hi, int64_t *v)
{
    const char *p = a->p;
    size_t n = a->len;
    if (n == 0 || n > 20)
        return false;
    if (n == 1 && p[0] == '0') {
        if (lo > 0 || hi < 0)
            return false;
        *v = 0;
        return true;
    }
    bool neg = p[0] == '-';
    size_t i = neg ? 1 : 0;
    if (i == n || p[i] < '1' || p[i] > '9')
        return false;
    uint64_t x = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        unsigned d = (unsigned)(p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    int64_t r;
    if (neg) {
        if (x > (uint64_t)INT64_MAX + 1)
            return false;
        r = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
    } else {
        if (x > (uint64_t)INT64_MAX)
            return false;
        r = (int64_t)x;
    }
    if (r < lo || r > hi)
        return false;
    *v = r;
    return true;
}

bool dd_arg_ttl(const resp_arg *a, int64_t *ttl, dd_buf *out)
{
    if (dd_arg_int(a, DLOCK_TTL_MIN_MS, DLOCK_TTL_MAX_MS, ttl))
        return true;
    dd_reply_error(out, "ERR TTL must be an integer from %d to %d (milliseconds)", DLOCK_TTL_MIN_MS,
                   DLOCK_TTL_MAX_MS);
    return false;
}

bool dd_arg_wait(const resp_arg *a, int64_t *wait, dd_buf *out)
{
    if (dd_arg_int(a, -1, DLOCK_TTL_MAX_MS, wait))
        return true;
    dd_reply_error(out, "ERR WAIT must be -1 (forever) or an integer from 0 to %d (milliseconds)",
                   DLOCK_TTL_MAX_MS);
    return false;
}

/* ---- the options of LOCK, SEM ACQUIRE and ELECT ------------------------------------ */

bool dd_lock_options(resp_arg *argv, size_t argc, size_t first, const char *cmd, dd_lock_args *a,
                     dd_buf *out)
{
    /* Options in any order, each at most once; TTL, WAIT, LABEL, MAXHOLD and VALUE take
     * a value. Which a command takes: a permit is a shared holder already (SHARED is
     * LOCK's alone); a leadership (ELECT) is a session's, meant to last, with a value. */
    enum { TTL, WAIT, DETACHED, FAIR, LABEL, MAXHOLD, SHARED, VALUE, NOPTS };
    static const char *const names[NOPTS] = {"TTL",   "WAIT",    "DETACHED", "FAIR",
                                             "LABEL", "MAXHOLD", "SHARED",   "VALUE"};
    unsigned takes = a->elect ? 1u << TTL | 1u << WAIT | 1u << VALUE | 1u << LABEL | 1u << FAIR
                     : a->permits > 0 ? (1u << SHARED) - 1
                                      : (1u << VALUE) - 1;
    const char *listed = a->elect ? "TTL ms, WAIT ms, VALUE v, LABEL text, FAIR"
                         : a->permits > 0
                             ? "TTL ms, WAIT ms, DETACHED, FAIR, LABEL text, MAXHOLD ms"
                             : "TTL ms, WAIT ms, DETACHED, FAIR, SHARED, LABEL text, MAXHOLD ms";
    /* --max-hold bounds the hold of a lock, a section of work, not a leadership. */
    a->maxhold_ms = a->elect ? 0 : dd_srv.max_hold_ms;
    bool seen[NOPTS] = {false};
    for (size_t i = first; i < argc; i++) {
        int opt = 0;
        while (opt < NOPTS && !((takes >> opt & 1u) && dd_arg_is(&argv[i], names[opt])))
            opt++;
        if (opt == NOPTS) {
            dd_reply_error(out, "ERR unknown %s option '%.*s' (%s)", cmd,
                           (int)(argv[i].len > 64 ? 64 : argv[i].len), argv[i].p, listed);
            return false;
        }
        if (seen[opt]) {
            dd_reply_error(out, "ERR %s option %s given twice", cmd, names[opt]);
            return false;
        }
        seen[opt] = true;
        if ((opt == TTL || opt == WAIT || opt == LABEL || opt == MAXHOLD || opt == VALUE) &&
            i + 1 >= argc) {
            dd_reply_error(out, "ERR %s option %s needs a value", cmd, names[opt]);
            return false;
        }
        switch (opt) {
        case TTL:
            if (!dd_arg_ttl(&argv[++i], &a->ttl_ms, out))
                return false;
            break;
        case WAIT:
            if (!dd_arg_wait(&argv[++i], &a->wait_ms, out))
                return false;
            break;
        case DETACHED:
            a->detached = true;
            break;
        case FAIR:
            a->fair = true;
            break;
        case SHARED:
            a->shared = true;
            break;
        case MAXHOLD:
            if (!dd_arg_int(&argv[++i], 0, DLOCK_TTL_MAX_MS, &a->maxhold_ms)) {
                dd_reply_error(out,
                               "ERR MAXHOLD must be an integer from 0 (no limit) to %d "
                               "(milliseconds)",
                               DLOCK_TTL_MAX_MS);
                return false;
            }
            a->maxhold_given = true;
            break;
        case VALUE:
            if ((a->value = dd_arg_value(&argv[++i], out)) == NULL)
                return false;
            break;
        default: /* LABEL */
            a->label = dd_arg_dup(&argv[++i], "LABEL", DLOCK_LABEL_MAX, out);
            if (a->label == NULL)
                return false;
            break;
        }
    }
    if (a->detached && a->maxhold_given) {
        dd_reply_error(out, "ERR MAXHOLD is for session locks: a DETACHED lock is never "
                            "renewed, and ends with its TTL");
        return false;
    }
    if (a->elect && a->ttl_ms < DD_SESSION_TTL_MIN_MS) {
        dd_reply_error(out,
                       "ERR TTL of a leadership must be at least %d ms, so that its renewal "
                       "keeps up on a loaded machine",
                       DD_SESSION_TTL_MIN_MS);
        return false;
    }
    if (!a->detached && a->ttl_ms < DD_SESSION_TTL_MIN_MS) {
        /* Refused, never raised: the client plans around the lease it asked for. */
        dd_reply_error(out,
                       "ERR TTL of a session lock must be at least %d ms, so that its renewal "
                       "keeps up on a loaded machine (a DETACHED lock may be as short as %d ms)",
                       DD_SESSION_TTL_MIN_MS, DLOCK_TTL_MIN_MS);
        return false;
    }
    return true;
}
