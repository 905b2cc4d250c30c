/*
 * scripts.c: the Lua scripts that make each lock operation one atomic round trip.
 *
 * The keys they name are keys.c's layout. Wake-ups go to the waiting client's own
 * channel, Pwake:<32 hex>, named in its queue entry: a release wakes one process, not
 * every process that waits on the name.
 *
 * How a call runs them (each body joined once from its parts, its SHA1, EVALSHA and
 * the EVAL fallback) is script_call.c's: this file is what runs on the server.
 */
#include "scripts.h"

#include <string.h>

/*
 * The wait queue's functions, join() and dispatch() (the handoff), and the scripts only
 * a waiter runs, REFRESH and CONFIRM, are scripts_queue.c's: it says how the queue
 * works. The scripts here take, release, renew, inspect and break.
 *
 * Fence counters expire: every write of one sets its retention (ARGV "retention",
 * dlock_config.fence_retention_ms). A counter that expired is remade by the TIME
 * floor below, which is why an expiry cannot make fences go back (docs/guarantees.md).
 *
 * The helpers are defined only where used (each definition builds a closure on every
 * call): the common path, a plain try on a free name or a release nobody waits for,
 * builds only the fence's. replicate_commands lets a Redis older than 5 write after TIME.
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
/*
 * Shared holders (readers, and semaphore permits) of a name live in two keys beside
 * the lock: P{name}:holders, a sorted set of tokens scored by the end of each one's
 * lease (ms on the server's clock, TIME), and P{name}:holders:info, a hash of token
 * to "<host:pid>[ label]" for `dlock status`. While any shared lease runs, the lock key
 * itself holds the word "shared" (which no token can equal), with the longest shared
 * lease as its PX: an exclusive acquire therefore needs no new command, its SET NX
 * fails on the marker as it does on a holder, and a marker whose leases all ran out
 * expires with the last of them. sync() keeps that true after every change.
 */
#define SHARED_LUA                                                                                 \
    "local function now_ms()\n"                                                                    \
    "  local t = redis.call('TIME')\n"                                                             \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                         \
    "end\n"                                                                                        \
    "local function purge(holders, info, now)\n"                                                   \
    "  local dead = redis.call('ZRANGEBYSCORE', holders, '-inf', now)\n"                           \
    "  for i = 1, #dead, 1000 do\n"                                                                \
    "    redis.call('HDEL', info, unpack(dead, i, math.min(i + 999, #dead)))\n"                    \
    "  end\n"                                                                                      \
    "  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', holders, '-inf', now) end\n"               \
    "end\n"                                                                                        \
    "local function sync(lock, holders, info, now)\n"                                              \
    "  local last = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')\n"                         \
    "  if not last[1] then\n"                                                                      \
    "    redis.call('DEL', lock, info)\n"                                                          \
    "    return false\n"                                                                           \
    "  end\n"                                                                                      \
    "  local ms = tonumber(last[2]) - now\n"                                                       \
    "  if ms < 1 then ms = 1 end\n"                                                                \
    "  redis.call('SET', lock, 'shared', 'PX', ms)\n"                                              \
    "  redis.call('PEXPIRE', holders, ms)\n"                                                       \
    "  redis.call('PEXPIRE', info, ms)\n"                                                          \
    "  return true\n"                                                                              \
    "end\n"
/* A shared holder's renewal (needs SHARED_LUA): false when its lease ran out. */
#define RENEW_SHARED_LUA                                                                           \
    "local function renew_shared(lock, holders, info, token, ttl)\n"                               \
    "  local now = now_ms()\n"                                                                     \
    "  local s = redis.call('ZSCORE', holders, token)\n"                                           \
    "  if not s or tonumber(s) <= now then return false end\n"                                     \
    "  redis.call('ZADD', holders, 'XX', now + tonumber(ttl), token)\n"                            \
    "  sync(lock, holders, info, now)\n"                                                           \
    "  return true\n"                                                                              \
    "end\n"
/*
 * ACQUIRE  KEYS: lock, fence, queue, holders, holders info
 *          ARGV: value, ttl_ms, token, ticket ("0": a plain try, not queued), fair ("1"),
 *                member (the queue entry), queue ttl ms, fence retention ms
 * TRY      KEYS: lock, fence   ARGV: value, ttl_ms, fence retention ms (ACQUIRE's plain
 *          try, not fair: the same taking, TAKE_LUA, sent only the arguments it reads)
 * Granted: the new fence (> 0). Refused: -(holder's PTTL), 0 when it has none.
 *
 * Three cases, told apart by one SET NX ... GET (Redis 7.0; older servers refuse the
 * combination without writing, and the script reads first):
 *   free      the caller takes it (in fair mode only if nobody waits before it);
 *   ours      a release handed it to us: confirm it with our own lease;
 *   another's refused; a queued caller joins the queue (or stays in it).
 * Either way a grant costs a fence. In fair mode a free lock with waiters goes to the
 * head of the queue, whoever finds it free (a dead head's handoff lease runs out).
 *
 * A plain try on a free lock costs SET NX GET, TIME and SET ... GET; a queued caller
 * that is refused, SET NX GET, ZADD, PEXPIRE and PTTL; a confirmation, SET NX GET,
 * PEXPIRE, TIME and SET ... GET.
 */
#define TAKE_LUA                                                                                   \
    "if held == nil then\n"                                                                        \
    "  held = redis.pcall('SET', lock, value, 'NX', 'PX', ttl, 'GET')\n"                           \
    "  if type(held) == 'table' then\n"                                                            \
    "    held = redis.call('GET', lock)\n"                                                         \
    "    if not held then redis.call('SET', lock, value, 'PX', ttl) end\n"                         \
    "  end\n"                                                                                      \
    "end\n"                                                                                        \
    "local confirm = held and string.sub(held, 1, 32) == token\n"                                  \
    "if confirm then redis.call('PEXPIRE', lock, ttl) end\n"                                       \
    "if confirm or not held then\n"                                                                \
    "  if queued and not confirm then redis.call('ZREM', KEYS[3], ARGV[6]) end\n"                  \
    "  return next_fence(KEYS[2], retention)\n"                                                    \
    "end\n"                                                                                        \
    "if queued then\n"
/* TAKE_LUA goes on here, after join()'s definition (scripts_queue.c). */
#define TAKE_QUEUED_LUA                                                                            \
    "  join(KEYS[3], ARGV[4], ARGV[6], ARGV[7])\n"                                                 \
    "end\n"                                                                                        \
    "local pttl = redis.call('PTTL', lock)\n"                                                      \
    "if pttl < 0 then pttl = 0 end\n"                                                              \
    "return -pttl\n"
static const char *const acquire_lua[] = {
    PRELUDE_LUA,
    FENCE_LUA,
    "local lock, value, ttl, retention = KEYS[1], ARGV[1], ARGV[2], ARGV[8]\n"
    "local token, queued = ARGV[3], ARGV[4] ~= '0'\n"
    "local held\n"
    "if ARGV[5] == '1' then\n"
    "  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  if head and head ~= ARGV[6] then\n"
    "    held = redis.call('GET', KEYS[1])\n"
    "    if not held then\n",
    SHARED_LUA,
    dlock__dispatch_lua,
    "      dispatch(KEYS[1], KEYS[2], ARGV[8], KEYS[3], KEYS[4], KEYS[5], false)\n"
    "      held = ''\n"
    "    end\n"
    "  end\n"
    "end\n",
    TAKE_LUA,
    dlock__join_lua,
    TAKE_QUEUED_LUA,
    NULL};
static const char *const try_lua[] = {
    PRELUDE_LUA,
    FENCE_LUA,
    "local lock, value, ttl, retention = KEYS[1], ARGV[1], ARGV[2], ARGV[3]\n"
    "local token, queued, held = string.sub(value, 1, 32), false, nil\n",
    TAKE_LUA,
    dlock__join_lua,
    TAKE_QUEUED_LUA,
    NULL};

/*
 * ACQUIRE_SHARED  KEYS: lock, fence, queue, holders, holders info
 *                 ARGV: token, description, ttl_ms, ticket ("0": a plain try), limit,
 *                       member (the queue entry), queue ttl ms, fence retention ms
 * A shared holder (limit DLOCK_PERMITS_MAX) or a semaphore permit (limit K). Granted:
 * the new fence (> 0). Refused: -(ms until a holder's lease ends: the exclusive
 * holder's, or the shared lease that ends first).
 *
 * Admitted when no exclusive holder holds the name, fewer than `limit` shared ones
 * do, and nobody waits before the caller: a shared newcomer does not pass a queued
 * writer, which a stream of overlapping readers would otherwise starve. A queue whose
 * head could be served now (a lease ran out, unannounced) is served first. A caller
 * the queue served (a release admitted it) confirms with its own lease.
 */
static const char *const acquire_shared_lua[] = {
    PRELUDE_LUA,
    FENCE_LUA,
    SHARED_LUA,
    dlock__dispatch_lua,
    dlock__join_lua,
    "local token, queued, limit = ARGV[1], ARGV[4] ~= '0', tonumber(ARGV[5])\n"
    "local now = now_ms()\n"
    "local held = redis.call('GET', KEYS[1])\n"
    "if held == 'shared' then\n"
    "  purge(KEYS[4], KEYS[5], now)\n"
    "elseif not held then\n"
    "  redis.call('DEL', KEYS[4], KEYS[5])\n"
    "end\n"
    "local free = not held or held == 'shared'\n"
    "local granted = held == 'shared' and redis.call('ZSCORE', KEYS[4], token)\n"
    "if not granted and free then\n"
    "  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  if head and head ~= ARGV[6] then\n"
    "    dispatch(KEYS[1], KEYS[2], ARGV[8], KEYS[3], KEYS[4], KEYS[5], held)\n"
    "    held = redis.call('GET', KEYS[1])\n"
    "    free = not held or held == 'shared'\n"
    "    granted = held == 'shared' and redis.call('ZSCORE', KEYS[4], token)\n"
    "    head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  end\n"
    "  if not granted and free and (not head or head == ARGV[6]) and\n"
    "     redis.call('ZCARD', KEYS[4]) < limit then\n"
    "    granted = true\n"
    "  end\n"
    "end\n"
    "if granted then\n"
    "  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), token)\n"
    "  redis.call('HSET', KEYS[5], token, ARGV[2], 'limit', limit)\n"
    "  sync(KEYS[1], KEYS[4], KEYS[5], now)\n"
    "  if queued then redis.call('ZREM', KEYS[3], ARGV[6]) end\n"
    "  return next_fence(KEYS[2], ARGV[8])\n"
    "end\n"
    "if queued then join(KEYS[3], ARGV[4], ARGV[6], ARGV[7]) end\n"
    "local left = redis.call('PTTL', KEYS[1])\n"
    "if held == 'shared' then\n"
    "  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')\n"
    "  if first[2] then left = tonumber(first[2]) - now end\n"
    "end\n"
    "if left < 0 then left = 0 end\n"
    "return -left\n",
    NULL};

/*
 * RELEASE  KEYS: lock, fence, queue, holders, holders info[, a leader's record]
 *          ARGV: token, fence floor ("0": none), member to dequeue ("": none),
 *                fence retention ms, mode ("1": release, "0": give back), ticket, heir
 *                (the member of the releasing client's first waiter for the name, "":
 *                none), its lease ms, its ticket if it waits in its client alone;
 *                then, for a retake (linger.c), the pass bound in microseconds, the
 *                new lease in ms and how long the hold has lasted in microseconds
 * 1 when our token was released (as the exclusive holder or one of the shared ones),
 * 0 when the key is gone or another owner's, the heir's fence (> 1) when the lock
 * went to the heir: its lease and fence set here, this reply confirms it.
 * A retake keeps the lock instead, its lease set anew, while the queue's head (if any)
 * has waited less than the pass bound since its ticket (against the server's TIME),
 * and has been passed over for less than its share of it (the bound divided by the
 * number of waiters) since it became the head: the later of its ticket and the hold's
 * start, so a waiter that queued behind others waits its turn first. The first keeps
 * any waiter's wait near the bound, the second shares the time out among the holders
 * ahead of it. The reply is then -1 - the time the head may still be passed over, in
 * microseconds (the whole bound when nobody waits). Otherwise the retake is the
 * release it would have been, and its caller queues.
 * A release serves the queue (dispatch), if anyone waits; with nobody queued it
 * deletes the lock, and the ZPOPMIN that says so costs one command, taken before the
 * helpers are defined (dispatch goes on from the entry it popped): an uncontended
 * release is GET, ZPOPMIN and DEL. The fence floor is how Redlock's default mode
 * raises every node's counter to the fence the quorum handed out, without an extra
 * round trip. It is applied even where our key is gone: a counter only ever goes up,
 * and a fence that was handed out is a floor every later fence must clear. So is the
 * dequeue: a waiter that got the lock from a quorum stays queued on the nodes that
 * refused it, and must not stay there. An heir that waits in its client alone is
 * queued first, with its ticket: dispatch serves the first. Giving back (the clean-up
 * of an attempt that won too few nodes) puts the member back in the queue and hands
 * the lock on only to another waiter: a waiter that was handed the lock on a minority
 * of nodes keeps its place, and frees them for a retry.
 */
static const char *const release_lua[] = {
    PRELUDE_LUA,
    "local f = tonumber(ARGV[2])\n"
    "if f and f > 0 and (tonumber(redis.call('GET', KEYS[2])) or 0) < f then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])\n"
    "end\n"
    "if ARGV[3] ~= '' and ARGV[5] == '1' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n"
    "local v = redis.call('GET', KEYS[1])\n"
    "local held = false\n"
    "if v == 'shared' then\n",
    SHARED_LUA,
    "  local now = now_ms()\n"
    "  local s = redis.call('ZSCORE', KEYS[4], ARGV[1])\n"
    "  if not s or tonumber(s) <= now then return 0 end\n"
    "  redis.call('ZREM', KEYS[4], ARGV[1])\n"
    "  redis.call('HDEL', KEYS[5], ARGV[1])\n"
    "  purge(KEYS[4], KEYS[5], now)\n"
    "  if sync(KEYS[1], KEYS[4], KEYS[5], now) then held = 'shared' end\n"
    "elseif not v or string.sub(v, 1, 32) ~= ARGV[1] then\n"
    "  return 0\n"
    "elseif ARGV[10] then\n"
    "  local head, left = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES'), tonumber(ARGV[10])\n"
    "  if head[2] then\n"
    "    local t = redis.call('TIME')\n"
    "    local waited = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(head[2])\n"
    "    waited = math.max(waited, 0)\n"
    "    local share = math.floor(left / redis.call('ZCARD', KEYS[3]))\n"
    "    left = math.min(left - waited, share - math.min(waited, tonumber(ARGV[12])))\n"
    "  end\n"
    "  if left > 0 then\n"
    "    redis.call('PEXPIRE', KEYS[1], ARGV[11])\n"
    "    return -1 - left\n"
    "  end\n"
    "end\n"
    "if ARGV[5] == '1' and KEYS[6] and v ~= 'shared' then\n",
    dlock__retire_lua,
    "  retire(KEYS[6], ARGV[1])\n"
    "end\n"
    "if ARGV[5] ~= '1' then\n"
    "  if ARGV[3] ~= '' then\n"
    "    redis.call('ZADD', KEYS[3], 'NX', ARGV[6], ARGV[3])\n"
    "  end\n"
    "  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]\n"
    "  if not head or head == ARGV[3] then\n"
    "    if not held then redis.call('DEL', KEYS[1]) end\n"
    "    return 1\n"
    "  end\n"
    "end\n"
    "local first = not held and ARGV[7] == '' and redis.call('ZPOPMIN', KEYS[3])\n"
    "if first and not first[1] then redis.call('DEL', KEYS[1]) return 1 end\n",
    FENCE_LUA,
    SHARED_LUA,
    dlock__dispatch_lua,
    "if ARGV[9] and ARGV[9] ~= '' then redis.call('ZADD', KEYS[3], 'NX', ARGV[9], ARGV[7]) end\n"
    "local served = dispatch(KEYS[1], KEYS[2], ARGV[4], KEYS[3], KEYS[4], KEYS[5], held, ARGV[7],\n"
    "                        ARGV[8], first)\n"
    "if served == 'heir' then return next_fence(KEYS[2], ARGV[4]) end\n"
    "if not served and not held then redis.call('DEL', KEYS[1]) end\n"
    "return 1\n",
    NULL};

/*
 * LEAVE  KEYS: lock, fence, queue, holders, holders info
 *        ARGV: member, token, pass ("1": pass the lock on), fence retention ms
 * A waiter gives up (deadline, cancel): it leaves the queue, and a lock handed to it as
 * it gave up, or found free with waiters queued, goes to the next waiter. A waiter that
 * got the lock from a quorum leaves the queues of the nodes that refused it without
 * passing anything on: a late release there may have handed it that node too, which its
 * own release will free.
 */
static const char *const leave_lua[] = {
    PRELUDE_LUA,
    FENCE_LUA,
    SHARED_LUA,
    dlock__dispatch_lua,
    "redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "if ARGV[3] ~= '1' then return 1 end\n"
    "local v = redis.call('GET', KEYS[1])\n"
    "if v == 'shared' then\n"
    "  local now = now_ms()\n"
    "  redis.call('ZREM', KEYS[4], ARGV[2])\n"
    "  redis.call('HDEL', KEYS[5], ARGV[2])\n"
    "  purge(KEYS[4], KEYS[5], now)\n"
    "  dispatch(KEYS[1], KEYS[2], ARGV[4], KEYS[3], KEYS[4], KEYS[5],\n"
    "           sync(KEYS[1], KEYS[4], KEYS[5], now) and v)\n"
    "elseif not v or string.sub(v, 1, 32) == ARGV[2] then\n"
    "  if not dispatch(KEYS[1], KEYS[2], ARGV[4], KEYS[3], KEYS[4], KEYS[5], false) and v then\n"
    "    redis.call('DEL', KEYS[1])\n"
    "  end\n"
    "end\n"
    "return 1\n",
    NULL};

/*
 * EXTEND  KEYS: lock, holders, holders info[, a leader's record (as RENEW treats it)]
 * ARGV: token, ttl_ms (> 0, checked by the caller: PEXPIRE with ttl <= 0 deletes the key,
 * a silent release). 1 when extended, 0 when not ours (a shared lease that ran out too).
 */
static const char *const extend_lua[] = {
    PRELUDE_LUA, SHARED_LUA, RENEW_SHARED_LUA,
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and string.sub(v, 1, 32) == ARGV[1] then\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  if KEYS[4] then\n"
    "    redis.call('PEXPIRE', KEYS[4], ARGV[2])\n"
    "    redis.call('PUBLISH', KEYS[4], 'R ' .. ARGV[1] .. ' ' .. ARGV[2])\n"
    "  end\n"
    "  return 1\n"
    "end\n"
    "if v == 'shared' and renew_shared(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2]) then\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    NULL};

/*
 * FENCE  KEYS: lock, fence, holders   ARGV: token, fence, fence retention ms
 * Strict fence mode's second round: raise the counter to the fence the quorum handed
 * out, but only on a node that still holds our token (exclusive or shared). 1 when
 * done, 0 when not ours.
 */
static const char *const fence_lua[] = {
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or (string.sub(v, 1, 32) ~= ARGV[1] and\n"
    "             not (v == 'shared' and redis.call('ZSCORE', KEYS[3], ARGV[1]))) then\n"
    "  return 0\n"
    "end\n"
    "if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n"
    "  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])\n"
    "end\n"
    "return 1\n",
    NULL};

/*
 * RENEW  KEYS: lock 1..K, then the holders and holders info keys of the shared ones
 *        ARGV: token 1, ttl_ms 1, at 1, ..., token K, ttl_ms K, at K, where "at" is
 *              the index in KEYS of a shared lock's holders key ("0": exclusive),
 *              or minus that of an elected leader's record (elect.c)
 * The watchdog's batch: extend every lock that still holds its token; a leader's record
 * too, the renewal published on its channel ("R <token> <ttl_ms>": observers learn that
 * the leader lives without asking). Returns a
 * string of K characters, '1' extended, '0' not ours: one reply of K bytes, not an
 * array of K replies, whatever K. A key of the wrong type counts as not ours rather
 * than failing the whole batch.
 */
static const char *const renew_lua[] = {
    PRELUDE_LUA, SHARED_LUA, RENEW_SHARED_LUA,
    "local r = {}\n"
    "for i = 1, #ARGV / 3 do\n"
    "  local token, ttl, at = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])\n"
    "  local v = redis.pcall('GET', KEYS[i])\n"
    "  r[i] = '0'\n"
    "  if type(v) == 'string' and string.sub(v, 1, 32) == token then\n"
    "    redis.call('PEXPIRE', KEYS[i], ttl)\n"
    "    r[i] = '1'\n"
    "    if at < 0 then\n"
    "      redis.call('PEXPIRE', KEYS[-at], ttl)\n"
    "      redis.call('PUBLISH', KEYS[-at], 'R ' .. token .. ' ' .. ttl)\n"
    "    end\n"
    "  elseif v == 'shared' and at > 0 then\n"
    "    local ok, yes = pcall(renew_shared, KEYS[i], KEYS[at], KEYS[at + 1], token, ttl)\n"
    "    if ok and yes then r[i] = '1' end\n"
    "  end\n"
    "end\n"
    "return table.concat(r)\n",
    NULL};

/*
 * INSPECT  KEYS: lock, fence, holders, holders info   ARGV: token ("": none), most
 * -> {value or "", PTTL, fence or "0", our shared lease left in ms (-1: not a shared
 *     holder), shared holders, a list of at most `most` of them, longest lease first,
 *     each "<token> <ms left> <description length> <description>"}
 * Read-only: a lease that ran out is left for the next write to purge, and skipped.
 */
static const char *const inspect_lua[] = {
    "local v = redis.call('GET', KEYS[1]) or ''\n"
    "local mine, count, list = -1, 0, {}\n"
    "if v == 'shared' then\n"
    "  local t = redis.call('TIME')\n"
    "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "  local s = ARGV[1] ~= '' and redis.call('ZSCORE', KEYS[3], ARGV[1])\n"
    "  if s and tonumber(s) > now then mine = tonumber(s) - now end\n"
    "  count = redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')\n"
    "  local top = redis.call('ZREVRANGEBYSCORE', KEYS[3], '+inf', '(' .. now,\n"
    "                         'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))\n"
    "  for i = 1, #top, 2 do\n"
    "    local d = redis.call('HGET', KEYS[4], top[i]) or ''\n"
    "    list[#list + 1] = string.format('%s %d %d %s', top[i], tonumber(top[i + 1]) - now,\n"
    "                                    #d, d)\n"
    "  end\n"
    "end\n"
    "return {v, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0', mine, count,\n"
    "        table.concat(list)}\n",
    NULL};

/*
 * BREAK  KEYS: lock, fence, queue, holders, holders info, break, a leader's record
 *        ARGV: by, reason, fence retention ms, record ttl ms
 * An operator frees the name whoever holds it: the exclusive holder, or every shared
 * holder and permit. The fence is raised past every fence handed out, the break is
 * recorded (keys.c), and the queue is served as a release serves it. -> {0} when
 * nothing held the name; {1, the holder ("<token> <description>", or for shared
 * holders "<count> shared: <token> <description>; ..."), the fence, the server's time
 * in ms}.
 */
static const char *const break_lua[] = {
    PRELUDE_LUA,
    FENCE_LUA,
    SHARED_LUA,
    dlock__dispatch_lua,
    dlock__retire_lua,
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v then return {0} end\n"
    "local now, old = now_ms(), v\n"
    "if v == 'shared' then\n"
    "  purge(KEYS[4], KEYS[5], now)\n"
    "  local all, d = redis.call('ZRANGE', KEYS[4], 0, -1), {}\n"
    "  for i = 1, math.min(#all, 100) do\n"
    "    d[i] = all[i] .. ' ' .. (redis.call('HGET', KEYS[5], all[i]) or '')\n"
    "  end\n"
    "  old = #all .. ' shared: ' .. table.concat(d, '; ')\n"
    "  redis.call('DEL', KEYS[4], KEYS[5])\n"
    "else\n"
    "  retire(KEYS[7], string.sub(v, 1, 32))\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "local f = next_fence(KEYS[2], ARGV[3])\n"
    "redis.call('DEL', KEYS[6])\n"
    "redis.call('HSET', KEYS[6], 'at_ms', now, 'by', ARGV[1], 'reason', ARGV[2], 'holder', old,\n"
    "           'fence', string.format('%d', f))\n"
    "redis.call('PEXPIRE', KEYS[6], ARGV[4])\n"
    "dispatch(KEYS[1], KEYS[2], ARGV[3], KEYS[3], KEYS[4], KEYS[5], false)\n"
    "return {1, old, string.format('%d', f), now}\n",
    NULL};

/* BREAK_RECORD  KEYS: break -> the record's fields and values ({} when none). */
static const char *const break_record_lua[] = {"return redis.call('HGETALL', KEYS[1])\n", NULL};

/* Each script in parts (a C compiler need not accept a string literal over 4095
 * bytes), joined once into bodies. */
static const char *const *const parts[DLOCK_SCRIPT_COUNT] = {
    [DLOCK_SCRIPT_ACQUIRE] = acquire_lua,
    [DLOCK_SCRIPT_TRY] = try_lua,
    [DLOCK_SCRIPT_RELEASE] = release_lua,
    [DLOCK_SCRIPT_EXTEND] = extend_lua,
    [DLOCK_SCRIPT_INSPECT] = inspect_lua,
    [DLOCK_SCRIPT_FENCE] = fence_lua,
    [DLOCK_SCRIPT_FENCED_SET] = dlock__fenced_set_lua,
    [DLOCK_SCRIPT_LEAVE] = leave_lua,
    [DLOCK_SCRIPT_RENEW] = renew_lua,
    [DLOCK_SCRIPT_REFRESH] = dlock__refresh_lua,
    [DLOCK_SCRIPT_ACQUIRE_SHARED] = acquire_shared_lua,
    [DLOCK_SCRIPT_BREAK] = break_lua,
    [DLOCK_SCRIPT_BREAK_RECORD] = break_record_lua,
    [DLOCK_SCRIPT_FENCE_RAISE] = dlock__fence_raise_lua,
    [DLOCK_SCRIPT_SLOT_READ] = dlock__slot_read_lua,
    [DLOCK_SCRIPT_SLOT_CLAIM] = dlock__slot_claim_lua,
    [DLOCK_SCRIPT_PROCLAIM] = dlock__proclaim_lua,
    [DLOCK_SCRIPT_LEADER] = dlock__leader_lua,
    [DLOCK_SCRIPT_CONFIRM] = dlock__confirm_lua,
};

/* The stock's scripts come after the locks': stock_scripts.c keeps them beside the key
 * layout they name and the invariant they keep. */
static const char *const *const stock_parts[] = {dlock__stock_update_lua, dlock__stock_reserve_lua,
                                                 dlock__stock_end_lua};
_Static_assert(sizeof stock_parts / sizeof *stock_parts ==
                   DLOCK_SCRIPT_COUNT - DLOCK_SCRIPT_STOCK_UPDATE,
               "a list of parts for every stock script");

const char *const *dlock__script_parts(int i)
{
    return i >= DLOCK_SCRIPT_STOCK_UPDATE ? stock_parts[i - DLOCK_SCRIPT_STOCK_UPDATE] : parts[i];
}
