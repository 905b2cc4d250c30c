/*
 * script_call.c: a script call, as bytes for the fan-out. Each script's body is joined
 * once from its parts (scripts.c has them, and says what each script does), and hashed
 * into the SHA1 that EVALSHA names.
 *
 * Calls go by EVALSHA; a -NOSCRIPT reply (the server restarted or SCRIPT FLUSH ran)
 * is answered by sending the same call as EVAL, once, which also re-caches the
 * script (resend_as_eval, which each request carries to the fan-out).
 */
#include "scripts.h"

#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A writable global, on purpose: the joined bodies are the same for every client, so
 * they are written once under pthread_once by the first client and only read after,
 * by every client and thread. Static storage, not an allocation: nothing would ever
 * free it, and a leak checker would say so. */
#define DLOCK_SCRIPT_MAX 8192
static char bodies[DLOCK_SCRIPT_COUNT][DLOCK_SCRIPT_MAX];
static pthread_once_t joined = PTHREAD_ONCE_INIT;
static bool too_long; /* a script outgrew DLOCK_SCRIPT_MAX: a bug of ours */

static void join_parts(void)
{
    for (int i = 0; i < DLOCK_SCRIPT_COUNT; i++) {
        size_t at = 0;
        for (const char *const *p = dlock__script_parts(i); *p != NULL; p++) {
            size_t len = strlen(*p);
            if (at + len >= DLOCK_SCRIPT_MAX) {
                too_long = true;
                break;
            }
            memcpy(bodies[i] + at, *p, len);
            at += len;
        }
        bodies[i][at] = '\0';
    }
}

int dlock__scripts_init(dlock__scripts *s, dlock__err *e)
{
    static const char hex[] = "0123456789abcdef";
    pthread_once(&joined, join_parts);
    if (too_long) /* caught by every test, never cut short on a server */
        return dlock__err_set(e, DLOCK_ERR_INVALID, "a script is over %d bytes", DLOCK_SCRIPT_MAX);
    for (int i = 0; i < DLOCK_SCRIPT_COUNT; i++) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(bodies[i], strlen(bodies[i]), md, &len, EVP_sha1(), NULL) || len != 20)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "SHA1 of a script failed (OpenSSL)");
        for (unsigned int k = 0; k < len; k++) {
            s->sha[i][2 * k] = hex[md[k] >> 4];
            s->sha[i][2 * k + 1] = hex[md[k] & 15];
        }
        s->sha[i][40] = '\0';
    }
    return DLOCK_OK;
}

/* The decimal digits of v, written backwards from end: the start. */
static char *digits(char *end, size_t v)
{
    do
        *--end = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return end;
}

/* Append one RESP header, PREFIX and the number v, then CRLF. */
static char *header(char *at, char prefix, size_t v)
{
    char buf[24];
    char *d = digits(buf + sizeof buf, v);
    *at++ = prefix;
    size_t n = (size_t)(buf + sizeof buf - d);
    memcpy(at, d, n);
    at += n;
    *at++ = '\r';
    *at++ = '\n';
    return at;
}

/* Append one bulk string. */
static char *bulk(char *at, const char *p, size_t len)
{
    at = header(at, '$', len);
    memcpy(at, p, len);
    at += len;
    *at++ = '\r';
    *at++ = '\n';
    return at;
}

/* Format "VERB head nkeys args..." into *out (malloc'd, freed by free): DLOCK_ERR_NOMEM,
 * or DLOCK_ERR_INVALID for an impossible argument count (a bug of ours). Written here
 * in one pass into one allocation, not by hiredis's redisFormatCommandArgv, which
 * prints every length with sprintf into a string it grows: every lock operation formats
 * a call, and that formatting was a tenth of a lock service's time. */
static int format(const char *verb, const char *head, int nkeys, int nargs, const char *const *args,
                  const size_t *lens, char **out, int *outlen)
{
    *out = NULL;
    if (nargs < 0 || nargs > 1000000 || nkeys < 0)
        return DLOCK_ERR_INVALID;
    char nk[24];
    char *nkp = digits(nk + sizeof nk, (size_t)nkeys);
    size_t nklen = (size_t)(nk + sizeof nk - nkp);
    size_t vlen = strlen(verb), hlen = strlen(head);
    /* Each element: "$" + at most 20 digits + CRLF + bytes + CRLF. */
    size_t total = 1 + 20 + 2 + (size_t)(3 + nargs) * (1 + 20 + 2 + 2) + vlen + hlen + nklen;
    for (int i = 0; i < nargs; i++) {
        if (lens[i] > (size_t)INT_MAX - total)
            return DLOCK_ERR_INVALID;
        total += lens[i];
    }
    if (total > (size_t)INT_MAX)
        return DLOCK_ERR_INVALID;
    char *buf = dlock__malloc(total);
    if (buf == NULL)
        return DLOCK_ERR_NOMEM;
    char *at = header(buf, '*', (size_t)(3 + nargs));
    at = bulk(at, verb, vlen);
    at = bulk(at, head, hlen);
    at = bulk(at, nkp, nklen);
    for (int i = 0; i < nargs; i++)
        at = bulk(at, args[i], lens[i]);
    *out = buf;
    *outlen = (int)(at - buf);
    return DLOCK_OK;
}

int dlock__call_format(const dlock__scripts *s, enum dlock__script_id id, int nkeys, int nargs,
                       const char *const *args, const size_t *lens, dlock__call *out, dlock__err *e)
{
    memset(out, 0, sizeof *out);
    out->id = id;
    out->nkeys = nkeys;
    out->nargs = nargs;
    out->args = args;
    out->lens = lens;
    out->keyed = nkeys > 0;
    out->slot = out->keyed ? dlock__key_slot(args[0], lens[0]) : 0;
    /* Only the EVALSHA form now: the EVAL form, the whole script, is needed once per
     * server restart or SCRIPT FLUSH, not on every call. */
    int rc =
        format("EVALSHA", s->sha[id], nkeys, nargs, args, lens, &out->evalsha, &out->evalsha_len);
    if (rc != DLOCK_OK)
        dlock__err_set(e, rc, "%s formatting a command",
                       rc == DLOCK_ERR_NOMEM ? "out of memory" : "bad argument count");
    return rc;
}

const char *dlock__script_body(enum dlock__script_id id)
{
    pthread_once(&joined, join_parts);
    return bodies[id];
}

int dlock__call_eval(dlock__call *call)
{
    if (call->eval != NULL)
        return DLOCK_OK;
    return format("EVAL", bodies[call->id], call->nkeys, call->nargs, call->args, call->lens,
                  &call->eval, &call->eval_len);
}

int dlock__call_as_eval(dlock__call *call)
{
    int rc = dlock__call_eval(call);
    if (rc != DLOCK_OK)
        return rc;
    free(call->evalsha);
    call->evalsha = call->eval;
    call->evalsha_len = call->eval_len;
    call->eval = NULL;
    return DLOCK_OK;
}

void dlock__call_free(dlock__call *call)
{
    free(call->evalsha);
    free(call->eval);
    call->evalsha = call->eval = NULL;
}

/* A -NOSCRIPT reply (the server restarted, or SCRIPT FLUSH ran) is answered by
 * sending the script itself, which also caches it for the next EVALSHA. */
static int resend_as_eval(void *arg, const redisReply *reply, const char **cmd, size_t *len)
{
    dlock__call *call = arg;
    *cmd = NULL;
    if (!dlock__is_noscript(reply))
        return DLOCK_OK;
    int rc = dlock__call_eval(call);
    if (rc != DLOCK_OK)
        return rc;
    *cmd = call->eval;
    *len = (size_t)call->eval_len;
    return DLOCK_OK;
}

/* Whether a script run late, long after its caller gave up on it, harms nobody: it
 * gives back or reads, takes nothing (a lock, units) and writes nothing. */
static bool harmless_late(enum dlock__script_id id)
{
    return id == DLOCK_SCRIPT_RELEASE || id == DLOCK_SCRIPT_LEAVE || id == DLOCK_SCRIPT_REFRESH ||
           id == DLOCK_SCRIPT_INSPECT || id == DLOCK_SCRIPT_STOCK_END || id == DLOCK_SCRIPT_FENCE ||
           id == DLOCK_SCRIPT_SLOT_READ || id == DLOCK_SCRIPT_LEADER;
}

void dlock__call_reqs(dlock__call *call, dlock__req *reqs, int n, bool await)
{
    for (int i = 0; i < n; i++) {
        reqs[i].harmless_late = harmless_late(call->id);
        reqs[i].cmd = call->evalsha;
        reqs[i].cmdlen = (size_t)call->evalsha_len;
        reqs[i].resend = resend_as_eval;
        reqs[i].resend_arg = call;
        reqs[i].await = await;
        dlock__call_slot(call, &reqs[i]);
    }
}

void dlock__call_slot(const dlock__call *call, dlock__req *r)
{
    r->keyed = call->keyed;
    r->slot = call->slot;
}
