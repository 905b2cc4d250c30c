/*
 * stock_scripts.c: the stock's Lua scripts (stock.c has the calls that run them and
 * decode their replies), with the key layout they name and the invariant they keep:
 * what the server does to a SKU's counts, read in one place, since the invariant's
 * argument is in the scripts' bodies. scripts.c only registers them in its table, which
 * is what the SHA1s and the -NOSCRIPT resend index.
 *
 * Key layout, with prefix P and SKU s (all in the hash tag {s}, so one Cluster slot,
 * and all in the ":stock" family, apart from the lock keys of a lock named s, which
 * are P{s} and P{s}:<word> for words other than "stock"):
 *   P{s}:stock        hash: total (the stock set), sold, reserved (units), waiting
 *                     (waiting reserves), next (at most the earliest lease end),
 *                     trimmed (when committed ids were last trimmed), and r:<id> ->
 *                     units of each live reservation
 *                     (in the same hash, so that one HMGET reads a reservation with the
 *                     counts, and one HSET writes both)
 *   P{s}:stock:res    sorted set: live reservation id -> lease end (server ms)
 *   P{s}:stock:done   sorted set: committed id -> commit time (server ms), kept
 *                     DLOCK_STOCK_COMMIT_RETENTION_MS for repeated commits
 *   P{s}:stock:wait   sorted set: waiting reserve id -> ticket (arrival, server us)
 *   P{s}:stock:winfo  hash: waiting reserve id -> "<units> <deadline ms> <channel>"
 * The stock hash never expires (it is the data); the others empty themselves or
 * expire (done: a retention after the last commit; the waiters' keys:
 * DLOCK_QUEUE_TTL_MS after the last waiter's last word).
 *
 * The invariant, sold + reserved + available == total with available >= 0 (so sold
 * never exceeds total), holds because every change is one script on one server, which
 * checks it before it writes: a reserve takes units only if that many are available,
 * a set or add that would leave fewer than sold + reserved is refused, and each
 * transition of a reservation (granted, committed, canceled, run out) moves its units
 * between two of the counts in the same script that changes the reservation. A lease
 * that runs out is not an event on the server: every script first returns the units
 * of the reservations whose lease end (on the server's TIME) has passed, status
 * included, so no call ever sees units held by a lease that is over.
 */
#include "scripts.h"

/*
 * What every stock script does first, with the five keys above as KEYS in that order
 * and the reservation id its call is about as ARGV[1] ("" for none): read the
 * server's TIME (now, in ms); read the counts (total, sold, reserved), the waiter count
 * (waiting) and the units of the caller's reservation (mine: nil when it has none);
 * and return the units of the reservations whose lease ended (freed). The hash's
 * "next" is at most the earliest lease end (a grant or an extend lowers it, a commit
 * or a cancel leaves it): only once now reaches it can a lease have ended, and only
 * then does the script look for ended ones and set "next" again, exactly (NONE: no
 * reservation). Most calls of a sale therefore skip the look. st[5] is when the
 * committed ids were last trimmed (see STOCK_END). Numbers go to Redis
 * through int() (string.format %d): Lua's own conversion of a large number may use an
 * exponent. Counts stay below 2^53, where Lua's doubles are exact.
 * replicate_commands lets a Redis older than 5 write after TIME.
 */
#define STOCK_PRELUDE_LUA                                                                          \
    "if redis.replicate_commands then redis.replicate_commands() end\n"                            \
    "local K, NONE = KEYS, 4503599627370496\n"                                                     \
    "local function int(x) return string.format('%d', x) end\n"                                    \
    "local t = redis.call('TIME')\n"                                                               \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                      \
    "local st = redis.call('HMGET', K[1], 'total', 'sold', 'reserved', 'waiting', 'trimmed',\n"    \
    "                      'next', 'r:' .. ARGV[1])\n"                                             \
    "local total, sold = tonumber(st[1]) or 0, tonumber(st[2]) or 0\n"                             \
    "local reserved, waiting = tonumber(st[3]) or 0, tonumber(st[4]) or 0\n"                       \
    "local mine, next_end, freed = tonumber(st[7]), tonumber(st[6]), 0\n"                          \
    "if st[1] and (not next_end or next_end <= now) then\n"                                        \
    "  while true do\n"                                                                            \
    "    local gone = redis.call('ZRANGEBYSCORE', K[2], '-inf', now, 'LIMIT', 0, 256)\n"           \
    "    if #gone == 0 then break end\n"                                                           \
    "    local f = {}\n"                                                                           \
    "    for i = 1, #gone do\n"                                                                    \
    "      f[i] = 'r:' .. gone[i]\n"                                                               \
    "      if gone[i] == ARGV[1] then mine = nil end\n"                                            \
    "    end\n"                                                                                    \
    "    for _, q in ipairs(redis.call('HMGET', K[1], unpack(f))) do\n"                            \
    "      freed = freed + (tonumber(q) or 0)\n"                                                   \
    "    end\n"                                                                                    \
    "    redis.call('ZREM', K[2], unpack(gone))\n"                                                 \
    "    redis.call('HDEL', K[1], unpack(f))\n"                                                    \
    "    if #gone < 256 then break end\n"                                                          \
    "  end\n"                                                                                      \
    "  next_end = tonumber(redis.call('ZRANGE', K[2], 0, 0, 'WITHSCORES')[2]) or NONE\n"           \
    "  reserved = reserved - freed\n"                                                              \
    "  redis.call('HSET', K[1], 'reserved', int(reserved), 'next', int(next_end))\n"               \
    "end\n"

/* The waiters: an entry is "<units> <deadline ms> <channel>"; waiters() lists them in
 * arrival order (only when the count says there are some: most calls of a sale find
 * none, and skip the look), and mends a count that their keys' expiry left behind;
 * drop() removes one. wake() publishes, in arrival order, the id of each waiter that
 * the available units serve after those before it, stopping at the first they do not;
 * a waiter that asks for more than is unsold is woken (its retry fails at once) and
 * not counted; a waiter past its deadline (it stopped retrying: it died) is dropped. */
#define STOCK_WAITERS_LUA                                                                          \
    "local function waiters()\n"                                                                   \
    "  if waiting <= 0 then return {} end\n"                                                       \
    "  local ids = redis.call('ZRANGE', K[4], 0, -1)\n"                                            \
    "  if #ids == 0 then\n"                                                                        \
    "    waiting = 0\n"                                                                            \
    "    redis.call('HSET', K[1], 'waiting', 0)\n"                                                 \
    "  end\n"                                                                                      \
    "  return ids\n"                                                                               \
    "end\n"                                                                                        \
    "local function waiter(id)\n"                                                                  \
    "  local v = redis.call('HGET', K[5], id)\n"                                                   \
    "  if not v then return nil end\n"                                                             \
    "  local q, d, ch = string.match(v, '^(%d+) (%d+) (.*)$')\n"                                   \
    "  return tonumber(q), tonumber(d), ch\n"                                                      \
    "end\n"                                                                                        \
    "local function drop(id)\n"                                                                    \
    "  if redis.call('ZREM', K[4], id) == 1 then\n"                                                \
    "    waiting = redis.call('HINCRBY', K[1], 'waiting', -1)\n"                                   \
    "  end\n"                                                                                      \
    "  redis.call('HDEL', K[5], id)\n"                                                             \
    "end\n"                                                                                        \
    "local function wake()\n"                                                                      \
    "  local avail, unsold, sum = total - sold - reserved, total - sold, 0\n"                      \
    "  for _, id in ipairs(waiters()) do\n"                                                        \
    "    local q, d, ch = waiter(id)\n"                                                            \
    "    if not q or d <= now then\n"                                                              \
    "      drop(id)\n"                                                                             \
    "    elseif q > unsold then\n"                                                                 \
    "      redis.call('PUBLISH', ch, id)\n"                                                        \
    "    else\n"                                                                                   \
    "      sum = sum + q\n"                                                                        \
    "      if sum > avail then return end\n"                                                       \
    "      redis.call('PUBLISH', ch, id)\n"                                                        \
    "    end\n"                                                                                    \
    "  end\n"                                                                                      \
    "end\n"

/*
 * STOCK_UPDATE  ARGV: "", mode ("set", "add", "get"), value, DLOCK_STOCK_QTY_MAX
 * -> {code, total, sold, reserved, reservations, waiters}: code 1 done, 0 refused (the
 * new total would be below sold + reserved), -1 refused (above the maximum). "get" is
 * dlock_stock_status: it changes nothing but what the prelude returns to the stock.
 */
const char *const dlock__stock_update_lua[] = {
    STOCK_PRELUDE_LUA, STOCK_WAITERS_LUA,
    "local code, v = 1, tonumber(ARGV[3])\n"
    "if ARGV[2] ~= 'get' then\n"
    "  if ARGV[2] == 'add' then v = total + v end\n"
    "  if v < sold + reserved then code = 0\n"
    "  elseif v > tonumber(ARGV[4]) then code = -1\n"
    "  else\n"
    "    total = v\n"
    "    redis.call('HSET', K[1], 'total', int(total), 'sold', int(sold), 'reserved',\n"
    "               int(reserved))\n"
    "  end\n"
    "end\n"
    "if freed > 0 or (code == 1 and ARGV[2] ~= 'get') then wake() end\n"
    "return {code, total, sold, reserved, redis.call('ZCARD', K[2]),\n"
    "        redis.call('ZCARD', K[4])}\n",
    NULL};

/*
 * STOCK_RESERVE  ARGV: id, units, lease ms, queued ("1": a waiting reserve, which
 *                      joins or stays among the waiters when refused), channel,
 *                      waiter ttl ms
 * -> {1, available after}: granted (also when id already holds its reservation: an
 *    attempt retried after a lost reply must not take the units twice);
 *    {0, available, units wanted by the waiters before it, those waiters, ms until
 *    the earliest lease ends or -1, 1 when the waiters were counted only until they
 *    wanted more than is available}: not enough now;
 *    {-1, unsold, total}: more than is unsold; only a restock could serve it.
 * With no waiters and no lease ended, a grant costs TIME, HMGET, HSET and ZADD, a
 * waiting reserve's too: it leaves the waiters only if there are any (a count of 0 means
 * none: their keys expire together, and only a join counts one in). The
 * time until the earliest lease ends is "next", a lower bound: a waiter that wakes at a
 * "next" made stale by a commit finds nothing ended, and its retry sets it exactly.
 */
const char *const dlock__stock_reserve_lua[] = {
    STOCK_PRELUDE_LUA, STOCK_WAITERS_LUA,
    "local id, qty, queued = ARGV[1], tonumber(ARGV[2]), ARGV[4] == '1'\n"
    "local avail = total - sold - reserved\n"
    "if mine then\n"
    "  if queued and waiting > 0 then drop(id) end\n"
    "  return {1, avail}\n"
    "end\n"
    "if qty > total - sold then\n"
    "  if queued and waiting > 0 then drop(id) end\n"
    "  if freed > 0 then wake() end\n"
    "  return {-1, total - sold, total}\n"
    "end\n"
    "local before, n, more = 0, 0, 0\n"
    "for _, w in ipairs(waiters()) do\n"
    "  if w == id then break end\n"
    "  if before + qty > avail then\n"
    "    more = 1\n"
    "    break\n"
    "  end\n"
    "  local q, d = waiter(w)\n"
    "  if not q or d <= now then\n"
    "    drop(w)\n"
    "  elseif q <= total - sold then\n"
    "    before, n = before + q, n + 1\n"
    "  end\n"
    "end\n"
    "if before + qty <= avail then\n"
    "  local e = now + tonumber(ARGV[3])\n"
    "  reserved, next_end = reserved + qty, math.min(next_end or e, e)\n"
    "  redis.call('HSET', K[1], 'reserved', int(reserved), 'r:' .. id, ARGV[2], 'next',\n"
    "             int(next_end))\n"
    "  redis.call('ZADD', K[2], int(e), id)\n"
    "  if queued and waiting > 0 then drop(id) end\n"
    "  if freed > 0 then wake() end\n"
    "  return {1, avail - qty}\n"
    "end\n"
    "if queued then\n"
    "  local ticket = int(tonumber(t[1]) * 1000000 + tonumber(t[2]))\n"
    "  if redis.call('ZADD', K[4], 'NX', ticket, id) == 1 then\n"
    "    waiting = redis.call('HINCRBY', K[1], 'waiting', 1)\n"
    "  end\n"
    "  redis.call('HSET', K[5], id, ARGV[2] .. ' ' .. int(now + tonumber(ARGV[6])) .. ' ' ..\n"
    "             ARGV[5])\n"
    "  redis.call('PEXPIRE', K[4], ARGV[6])\n"
    "  redis.call('PEXPIRE', K[5], ARGV[6])\n"
    "end\n"
    "if freed > 0 then wake() end\n"
    "local next_ms = -1\n"
    "if next_end and next_end < NONE then next_ms = math.max(next_end - now, 0) end\n"
    "return {0, avail, before, n, next_ms, more}\n",
    NULL};

/*
 * STOCK_END  ARGV: id, mode ("commit", "cancel", "extend", "leave"), ms (commit: the
 *                  retention; extend: the lease)
 * -> 1 done; 2 a repeated commit (done before: nothing counted); 0 no such live
 *    reservation; -1 it was committed (it cannot be canceled or extended).
 * "leave" is a reserve that gives up: out of the waiters, and a reservation it may
 * have been granted unseen (its reply was lost) goes back; always 1.
 * A commit costs TIME, HMGET, HDEL, HSET, ZREM and ZADD. Committed ids
 * older than the retention are trimmed, and the set's expiry renewed, at most once a
 * second (st[5] says when last): the expiry is the retention plus that second, so
 * every id stays at least the retention, and a busy sale does not pay two more
 * commands per unit.
 */
const char *const dlock__stock_end_lua[] = {
    STOCK_PRELUDE_LUA, STOCK_WAITERS_LUA,
    "local id, mode = ARGV[1], ARGV[2]\n"
    "if mode == 'leave' then\n"
    "  drop(id)\n"
    "  mode = 'cancel'\n"
    "  if not mine then\n"
    "    wake()\n"
    "    return 1\n"
    "  end\n"
    "end\n"
    "if not mine then\n"
    "  if freed > 0 then wake() end\n"
    "  if redis.call('ZSCORE', K[3], id) then\n"
    "    if mode == 'commit' then return 2 end\n"
    "    return -1\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "if mode == 'extend' then\n"
    "  local e = now + tonumber(ARGV[3])\n"
    "  redis.call('ZADD', K[2], 'XX', int(e), id)\n"
    "  if not next_end or e < next_end then redis.call('HSET', K[1], 'next', int(e)) end\n"
    "  if freed > 0 then wake() end\n"
    "  return 1\n"
    "end\n"
    "redis.call('HDEL', K[1], 'r:' .. id)\n"
    "reserved = reserved - mine\n"
    "local trim = mode == 'commit' and now - (tonumber(st[5]) or 0) >= 1000\n"
    "if trim then\n"
    "  sold = sold + mine\n"
    "  redis.call('HSET', K[1], 'sold', int(sold), 'reserved', int(reserved), 'trimmed',\n"
    "             int(now))\n"
    "elseif mode == 'commit' then\n"
    "  sold = sold + mine\n"
    "  redis.call('HSET', K[1], 'sold', int(sold), 'reserved', int(reserved))\n"
    "else\n"
    "  redis.call('HSET', K[1], 'reserved', int(reserved))\n"
    "end\n"
    "redis.call('ZREM', K[2], id)\n"
    "if mode == 'commit' then redis.call('ZADD', K[3], int(now), id) end\n"
    "if trim then\n"
    "  redis.call('ZREMRANGEBYSCORE', K[3], '-inf', int(now - tonumber(ARGV[3])))\n"
    "  redis.call('PEXPIRE', K[3], int(tonumber(ARGV[3]) + 1000))\n"
    "end\n"
    "wake()\n"
    "return 1\n",
    NULL};
