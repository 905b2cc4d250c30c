/*
 * scripts.c: the Lua scripts that make each lock operation one atomic round trip.
 *
 * Key layout (fixed, so that other tools and bindings interoperate), with prefix P:
 *   P{name}         the lock: "<32-hex token> <holder description>", with a PX lease
 *   P{name}:fence   the fence counter
 *   P{name}:queue   waiters, scored by ticket (see below)
 * All share the hash tag {name}, so they live in one Cluster slot. Wake-ups go to the
 * waiting client's own channel, Pwake:<32 hex>, named in its queue entry: a release
 * wakes one process, not every process that waits on the name (P{name}:wake, the
 * channel every waiter of a name once shared, is no longer used).
 *
 * Calls go by EVALSHA; a -NOSCRIPT reply (the server restarted or SCRIPT FLUSH ran)
 * is answered by sending the same call as EVAL, once, which also re-caches the
 * script (resend_as_eval, which each request carries to the fan-out).
 */
#include "internal.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The wait queue and the handoff (docs/waiting.md). Waiters of a name are members of
 * the sorted set P{name}:queue, scored by a ticket (the waiter's arrival time, the
 * same on every node). A member carries the value the waiter's lock will have
 * ("<token> <holder>"), the channel its client listens on, and how long a lease it is
 * handed before it confirms. A release does not free a lock that has waiters: it
 * hands it to the head of the queue (handoff() below) and publishes the head's token
 * on the head's channel. The head already holds the lock when its wake-up arrives;
 * its next attempt confirms it with its own lease and a fence. The short handoff lease bounds what
 * a head that died costs: its lease runs out, and the waiters' next attempt finds the lock free.
 * The queue key lives DLOCK_QUEUE_TTL_MS past the last waiter's last word (an attempt
 * or a refresh), so a name whose waiters all died leaves nothing behind.
 *
 * Fence counters expire too: every write of one sets its retention (ARGV "retention",
 * dlock_config.fence_retention_ms). A counter that expired is remade by the TIME
 * floor below, which is why an expiry cannot make fences go back (docs/guarantees.md).
 *
 * The helpers are defined only where used: every definition is a closure built on
 * every call. replicate_commands lets a Redis older than 5 write after TIME.
 */
#define PRELUDE_LUA "if redis.replicate_commands then redis.replicate_commands() end\n"
/* The fence is max(counter + 1, server TIME in microseconds): a server restarted
 * without persistence forgets its counter, and the TIME floor keeps fences from going
 * back unless its clock does. 2^53 microseconds is 285 years, so Lua's double holds
 * the value exactly. The floor wins on almost every acquire (the counter holds an
 * earlier acquire's TIME), so the script writes the floor and reads the old value in
 * one command (SET ... GET, Redis 6.2), and writes counter + 1 over it only in the
 * rare case where the old value is not below the floor (two acquires in one
 * microsecond, or a clock that went back). A server without SET ... GET refuses it
 * without writing, and the script then reads and writes in two commands. */
#define FENCE_LUA                                                                                  \
    "local function next_fence(key, retention)\n"                                                  \
    "  local t = redis.call('TIME')\n"                                                             \
    "  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"                                      \
    "  local old = redis.pcall('SET', key, string.format('%d', f), 'PX', retention, 'GET')\n"      \
    "  if type(old) == 'table' then\n"                                                             \
    "    old = tonumber(redis.call('GET', key)) or 0\n"                                            \
    "    if old >= f then f = old + 1 end\n"                                                       \
    "    redis.call('SET', key, string.format('%d', f), 'PX', retention)\n"                        \
    "  else\n"                                                                                     \
    "    old = tonumber(old)\n"                                                                    \
    "    if old and old >= f then\n"                                                               \
    "      f = old + 1\n"                                                                          \
    "      redis.call('SET', key, string.format('%d', f), 'PX', retention)\n"                      \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "  return f\n"                                                                                 \
    "end\n"
/* Hand the lock to the head of the queue: set its value with its handoff lease, and
 * publish its token on its client's channel. False when nobody waits (ZPOPMIN of a
 * missing key is empty). A member is "<handoff ms> <channel length> <channel><value>". */
#define HANDOFF_LUA                                                                                \
    "local function handoff(lock, queue)\n"                                                        \
    "  local m = redis.call('ZPOPMIN', queue)[1]\n"                                                \
    "  if not m then return false end\n"                                                           \
    "  local h, n, rest = string.match(m, '^(%d+) (%d+) (.*)$')\n"                                 \
    "  n = tonumber(n)\n"                                                                          \
    "  redis.call('SET', lock, string.sub(rest, n + 1), 'PX', h)\n"                                \
    "  redis.call('PUBLISH', string.sub(rest, 1, n), string.sub(rest, n + 1, n + 32))\n"           \
    "  return true\n"                                                                              \
    "end\n"

/*
 * ACQUIRE  KEYS: lock, fence, queue
 *          ARGV: value, ttl_ms, token, ticket ("0": a plain try, not queued), fair ("1"),
 *                member (the queue entry), queue ttl ms, fence retention ms
 * Granted: the new fence (> 0). Refused: -(holder's PTTL), 0 when it has none.
 *
 * Three cases, told apart by one SET NX ... GET (Redis 7.0; older servers refuse the
 * combination without writing, and the script reads first):
 *   free      the caller takes it (in fair mode only if nobody waits before it);
 *   ours      a release handed it to us: confirm it with our own lease;
 *   another's refused; a queued caller joins the queue (or stays in it).
 * Either way a grant costs a fence. In fair mode a free lock with waiters goes to the
 * head of the queue, whoever finds it free: a waiter that died at the head is then
 * skipped once its handoff lease runs out.
 *
 * A plain try on a free lock costs SET NX GET, TIME and SET ... GET; a queued caller
 * that is refused, SET NX GET, ZADD, PEXPIRE and PTTL; a confirmation, SET NX GET,
 * PEXPIRE, TIME and SET ... GET.
 */
static const char acquire_lua[] = PRELUDE_LUA FENCE_LUA HANDOFF_LUA
    "local token, queued = ARGV[3], ARGV[4] ~= '0'\n"
    "local held\n"
    "if ARGV[5] == '1' then\n"
    "  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  if head and head ~= ARGV[6] then\n"
    "    held = redis.call('GET', KEYS[1])\n"
    "    if not held then\n"
    "      handoff(KEYS[1], KEYS[3])\n"
    "      held = ''\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if held == nil then\n"
    "  held = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET')\n"
    "  if type(held) == 'table' then\n"
    "    held = redis.call('GET', KEYS[1])\n"
    "    if not held then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end\n"
    "  end\n"
    "end\n"
    "local confirm = held and string.sub(held, 1, 32) == token\n"
    "if confirm then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
    "if confirm or not held then\n"
    "  if queued and not confirm then redis.call('ZREM', KEYS[3], ARGV[6]) end\n"
    "  return next_fence(KEYS[2], ARGV[8])\n"
    "end\n"
    "if queued then\n"
    "  redis.call('ZADD', KEYS[3], 'NX', ARGV[4], ARGV[6])\n"
    "  redis.call('PEXPIRE', KEYS[3], ARGV[7])\n"
    "end\n"
    "local pttl = redis.call('PTTL', KEYS[1])\n"
    "if pttl < 0 then pttl = 0 end\n"
    "return -pttl\n";

/*
 * RELEASE  KEYS: lock, fence, queue
 *          ARGV: token, fence floor ("0": none), member to dequeue ("": none),
 *                fence retention ms, mode ("1": release, "0": give back), ticket
 * 1 when our token was released, 0 when the key is gone or another owner's.
 * A release hands the lock to the head of the queue, if anyone waits; with nobody
 * queued it deletes it, and the ZPOPMIN that says so costs one command: an
 * uncontended release is GET, ZPOPMIN and DEL.
 * The fence floor is how Redlock's default mode raises every node's counter to the
 * fence the quorum handed out, without an extra round trip. It is applied even where
 * our key is gone: a counter only ever goes up, and a fence that was handed out is
 * a floor every later fence must clear. So is the dequeue: a waiter that got the lock
 * from a quorum stays queued on the nodes that refused it, and must not stay there.
 * Giving back (the clean-up of an attempt that won too few nodes) puts the member
 * back in the queue and hands the lock on only to another waiter: a waiter that was
 * handed the lock on a minority of nodes keeps its place, and frees them for a retry.
 */
static const char release_lua[] = PRELUDE_LUA HANDOFF_LUA
    "local f = tonumber(ARGV[2])\n"
    "if f and f > 0 and (tonumber(redis.call('GET', KEYS[2])) or 0) < f then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])\n"
    "end\n"
    "if ARGV[3] ~= '' and ARGV[5] == '1' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n"
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, 32) ~= ARGV[1] then return 0 end\n"
    "if ARGV[5] ~= '1' then\n"
    "  if ARGV[3] ~= '' then\n"
    "    redis.call('ZADD', KEYS[3], 'NX', ARGV[6], ARGV[3])\n"
    "  end\n"
    "  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  if not head or head == ARGV[3] then\n"
    "    redis.call('DEL', KEYS[1])\n"
    "    return 1\n"
    "  end\n"
    "end\n"
    "if not handoff(KEYS[1], KEYS[3]) then redis.call('DEL', KEYS[1]) end\n"
    "return 1\n";

/*
 * LEAVE  KEYS: lock, queue   ARGV: member, token, pass ("1": pass the lock on)
 * A waiter gives up (deadline, cancel): it leaves the queue, and a lock handed to it as
 * it gave up, or found free with waiters queued, goes to the next waiter. A waiter that
 * got the lock from a quorum leaves the queues of the nodes that refused it without
 * passing anything on: a late release there may have handed it that node too, which its
 * own release will free.
 */
static const char leave_lua[] = PRELUDE_LUA HANDOFF_LUA
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "if ARGV[3] ~= '1' then return 1 end\n"
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, 32) == ARGV[2] then\n"
    "  if not handoff(KEYS[1], KEYS[2]) and v then redis.call('DEL', KEYS[1]) end\n"
    "end\n"
    "return 1\n";

/*
 * REFRESH  KEYS: lock, queue   ARGV: queue ttl ms
 * A waiter's heartbeat: keep the queue alive, and learn whether the lock is free (a
 * lease that ran out publishes nothing). The lock's PTTL, or -3 when the queue is gone
 * (a server restarted): the waiter then attempts, which queues it again.
 */
static const char refresh_lua[] =
    "if redis.call('PEXPIRE', KEYS[2], ARGV[1]) == 0 then return -3 end\n"
    "return redis.call('PTTL', KEYS[1])\n";

/*
 * EXTEND  KEYS: lock   ARGV: token, ttl_ms (> 0, checked by the caller: PEXPIRE with
 * ttl <= 0 deletes the key, a silent release). 1 when extended, 0 when not ours.
 */
static const char extend_lua[] = "local v = redis.call('GET', KEYS[1])\n"
                                 "if v and string.sub(v, 1, 32) == ARGV[1] then\n"
                                 "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                 "  return 1\n"
                                 "end\n"
                                 "return 0\n";

/*
 * FENCE  KEYS: lock, fence   ARGV: token, fence, fence retention ms
 * Strict fence mode's second round: raise the counter to the fence the quorum handed
 * out, but only on a node that still holds our token. 1 when done, 0 when not ours.
 */
static const char fence_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, 32) ~= ARGV[1] then return 0 end\n"
    "if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "end\n"
    "return 1\n";

/*
 * FENCED_SET  KEYS: register   ARGV: fence, value
 * The resource side: write {value, fence} unless a higher fence was accepted. 1 when
 * written, 0 when refused. Fences are compared as numbers (they fit a double exactly).
 */
static const char fenced_set_lua[] =
    "local last = tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0\n"
    "if tonumber(ARGV[1]) < last then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])\n"
    "return 1\n";

/*
 * RENEW  KEYS: lock 1..K   ARGV: token 1, ttl_ms 1, ..., token K, ttl_ms K
 * The watchdog's batch: extend every lock that still holds its token. Returns a
 * string of K characters, '1' extended, '0' not ours: one reply of K bytes, not an
 * array of K replies, whatever K. A key of the wrong type counts as not ours rather
 * than failing the whole batch.
 */
static const char renew_lua[] =
    "local r = {}\n"
    "for i = 1, #KEYS do\n"
    "  local v = redis.pcall('GET', KEYS[i])\n"
    "  if type(v) == 'string' and string.sub(v, 1, 32) == ARGV[2 * i - 1] then\n"
    "    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])\n"
    "    r[i] = '1'\n"
    "  else\n"
    "    r[i] = '0'\n"
    "  end\n"
    "end\n"
    "return table.concat(r)\n";

/* INSPECT  KEYS: lock, fence   -> {value or "", PTTL, fence or "0"} */
static const char inspect_lua[] = "return {redis.call('GET', KEYS[1]) or '',\n"
                                  "        redis.call('PTTL', KEYS[1]),\n"
                                  "        redis.call('GET', KEYS[2]) or '0'}\n";

static const char *const bodies[DLOCK_SCRIPT_COUNT] = {
    [DLOCK_SCRIPT_ACQUIRE] = acquire_lua, [DLOCK_SCRIPT_RELEASE] = release_lua,
    [DLOCK_SCRIPT_EXTEND] = extend_lua,   [DLOCK_SCRIPT_INSPECT] = inspect_lua,
    [DLOCK_SCRIPT_FENCE] = fence_lua,     [DLOCK_SCRIPT_FENCED_SET] = fenced_set_lua,
    [DLOCK_SCRIPT_LEAVE] = leave_lua,     [DLOCK_SCRIPT_RENEW] = renew_lua,
    [DLOCK_SCRIPT_REFRESH] = refresh_lua,
};

/* A script's body: the locks' from the table above, the stock's from stock.c, which
 * keeps them beside the calls that decode their replies (it says why). */
static const char *body(enum dlock__script_id id)
{
    static const char *const stock[] = {dlock__stock_update_lua, dlock__stock_reserve_lua,
                                        dlock__stock_end_lua};
    _Static_assert(DLOCK_SCRIPT_COUNT - DLOCK_SCRIPT_STOCK_UPDATE == 3, "one body per script");
    return id >= DLOCK_SCRIPT_STOCK_UPDATE ? stock[id - DLOCK_SCRIPT_STOCK_UPDATE] : bodies[id];
}

int dlock__scripts_init(dlock__scripts *s, dlock__err *e)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < DLOCK_SCRIPT_COUNT; i++) {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (!EVP_Digest(body(i), strlen(body(i)), md, &len, EVP_sha1(), NULL) || len != 20)
            return dlock__err_set(e, DLOCK_ERR_NOMEM, "SHA1 of a script failed (OpenSSL)");
        for (unsigned int k = 0; k < len; k++) {
            s->sha[i][2 * k] = hex[md[k] >> 4];
            s->sha[i][2 * k + 1] = hex[md[k] & 15];
        }
        s->sha[i][40] = '\0';
    }
    return DLOCK_OK;
}

/* Format "VERB head nkeys args..." into *out: DLOCK_ERR_NOMEM, or DLOCK_ERR_INVALID
 * for an impossible argument count (a bug of ours). Calls with a few arguments (every lock
 * operation) use the stack; a renewal batch, with thousands, the heap. */
static int format(const char *verb, const char *head, int nkeys, int nargs, const char *const *args,
                  const size_t *lens, char **out, int *outlen)
{
    const char *argv_stack[3 + 12];
    size_t len_stack[3 + 12];
    const char **argv = argv_stack;
    size_t *argvlen = len_stack;
    char nk[16];
    *out = NULL;
    if (nargs < 0 || nargs > 1000000)
        return DLOCK_ERR_INVALID;
    if (nargs > 12) {
        argv = dlock__malloc((size_t)(3 + nargs) * sizeof *argv);
        argvlen = dlock__malloc((size_t)(3 + nargs) * sizeof *argvlen);
        if (argv == NULL || argvlen == NULL) {
            free(argv);
            free(argvlen);
            return DLOCK_ERR_NOMEM;
        }
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = verb;
    argv[1] = head;
    argv[2] = nk;
    argvlen[0] = strlen(verb);
    argvlen[1] = strlen(head);
    argvlen[2] = strlen(nk);
    for (int i = 0; i < nargs; i++) {
        argv[3 + i] = args[i];
        argvlen[3 + i] = lens[i];
    }
    *outlen = redisFormatCommandArgv(out, 3 + nargs, argv, argvlen);
    if (argv != argv_stack) {
        free(argv);
        free(argvlen);
    }
    if (*outlen < 0) {
        *out = NULL;
        return DLOCK_ERR_NOMEM;
    }
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
    /* Only the EVALSHA form now: the EVAL form, the whole script, is needed once per
     * server restart or SCRIPT FLUSH, not on every call. */
    int rc =
        format("EVALSHA", s->sha[id], nkeys, nargs, args, lens, &out->evalsha, &out->evalsha_len);
    if (rc != DLOCK_OK)
        dlock__err_set(e, rc, "%s formatting a command",
                       rc == DLOCK_ERR_NOMEM ? "out of memory" : "bad argument count");
    return rc;
}

int dlock__call_eval(dlock__call *call)
{
    if (call->eval != NULL)
        return DLOCK_OK;
    return format("EVAL", body(call->id), call->nkeys, call->nargs, call->args, call->lens,
                  &call->eval, &call->eval_len);
}

void dlock__call_free(dlock__call *call)
{
    redisFreeCommand(call->evalsha);
    redisFreeCommand(call->eval);
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

void dlock__call_reqs(dlock__call *call, dlock__req *reqs, int n, bool await)
{
    for (int i = 0; i < n; i++) {
        reqs[i].cmd = call->evalsha;
        reqs[i].cmdlen = (size_t)call->evalsha_len;
        reqs[i].resend = resend_as_eval;
        reqs[i].resend_arg = call;
        reqs[i].await = await;
    }
}

int dlock__keys_make(const char *prefix, size_t prefix_len, const char *name, size_t name_len,
                     dlock__keys *k, dlock__err *e)
{
    static const char *const suffix[3] = {"", ":fence", ":queue"};
    const char **dst[3] = {&k->lock, &k->fence, &k->queue};
    size_t *len[3] = {&k->lock_len, &k->fence_len, &k->queue_len};
    size_t base = prefix_len + name_len + sizeof "{}";
    k->buf = dlock__malloc(3 * base + sizeof ":fence:queue");
    if (k->buf == NULL)
        return dlock__err_set(e, DLOCK_ERR_NOMEM, "out of memory");
    char *p = k->buf;
    for (int i = 0; i < 3; i++) {
        char *q = p;
        *dst[i] = p;
        memcpy(q, prefix, prefix_len);
        q += prefix_len;
        *q++ = '{';
        memcpy(q, name, name_len);
        q += name_len;
        *q++ = '}';
        size_t slen = strlen(suffix[i]);
        memcpy(q, suffix[i], slen + 1);
        *len[i] = (size_t)(q - p) + slen;
        p += *len[i] + 1;
    }
    return DLOCK_OK;
}
