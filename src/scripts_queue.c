/*
 * scripts_queue.c: the wait queue's Lua, in scripts.c's table: the functions join() and
 * dispatch() that the taking and releasing scripts run, a waiter's REFRESH, and the
 * CONFIRM of a waiter that started its section on its grant.
 *
 * The wait queue and the handoff (docs/waiting.md). Waiters of a name are members of
 * the sorted set P{name}:queue, scored by a ticket (the waiter's arrival time, the
 * same on every node). A member carries the value the waiter's lock will have
 * ("<token> <holder>"), the channel its client listens on, and how long a lease it is
 * handed before it confirms. A release does not free a lock that has waiters: it
 * hands it to the head of the queue (dispatch() below) and publishes the head's token
 * on the head's channel, with the grant's fence. The head already holds the lock when
 * its wake-up arrives: it starts its section on the message, and asks for its own lease
 * (CONFIRM, below) without waiting for the reply. The short handoff lease bounds what
 * a head that died costs: its lease runs out, and the waiters' next attempt finds the
 * lock free.
 * The queue key lives DLOCK_QUEUE_TTL_MS past the last waiter's last word (an attempt
 * or a refresh), so a name whose waiters all died leaves nothing behind.
 *
 * The functions are parts of scripts.c's scripts, defined in the body of each script
 * that runs them, after the helpers they call (scripts.c: next_fence, now_ms, purge,
 * sync).
 */
#include "scripts.h"

/* Take a place in the queue, or keep it, and keep the queue alive qttl ms more. */
const char dlock__join_lua[] = "local function join(queue, ticket, member, qttl)\n"
                               "  redis.call('ZADD', queue, 'NX', ticket, member)\n"
                               "  redis.call('PEXPIRE', queue, qttl)\n"
                               "end\n";

/*
 * Serve the queue (needs scripts.c's SHARED_LUA): while its head can be admitted, hand it what it
 * waits for, with its handoff lease, and publish its token on its client's channel:
 * an exclusive head takes a free lock, and no one after it is served; a shared head
 * joins the shared holders while fewer than its limit hold the name. A head that
 * cannot be admitted goes back with its ticket. held is the lock's value (false when
 * free), first the head if the caller popped it. True when anyone was served. A member
 * is "<handoff ms> <limit> <channel length> <channel><value>", limit 0 for an exclusive
 * waiter; value "<token> <holder>". An exclusive head is handed the lock with a fence
 * (FENCE_LUA's: fence is the counter's key, retention its ms), published with its token
 * as "<token> <fence>": the grant is whole when the message arrives, so the waiter may
 * start its section on it (docs/waiting.md, "Starting on the grant"). A head that is
 * heir (a waiter of the releasing client) gets its own lease, heir_ttl, and no
 * message: the result is 'heir', and the release takes its fence.
 */
const char dlock__dispatch_lua[] =
    "local function dispatch(lock, fence, retention, queue, holders, info, held, heir,\n"
    "                        heir_ttl, first)\n"
    "  local served = false\n"
    "  while true do\n"
    "    local e = first or redis.call('ZPOPMIN', queue)\n"
    "    first = nil\n"
    "    if not e[1] then return served end\n"
    "    local h, k, n, rest = string.match(e[1], '^(%d+) (%d+) (%d+) (.*)$')\n"
    "    if rest then\n"
    "      k, n = tonumber(k), tonumber(n)\n"
    "      local value = string.sub(rest, n + 1)\n"
    "      local token = string.sub(value, 1, 32)\n"
    "      if k == 0 then\n"
    "        if held then redis.call('ZADD', queue, e[2], e[1]) return served end\n"
    "        if e[1] == heir then\n"
    "          redis.call('SET', lock, value, 'PX', heir_ttl)\n"
    "          return 'heir'\n"
    "        end\n"
    "        redis.call('SET', lock, value, 'PX', h)\n"
    "        local f = string.format('%d', next_fence(fence, retention))\n"
    "        redis.call('PUBLISH', string.sub(rest, 1, n), token .. ' ' .. f)\n"
    "        return true\n"
    "      end\n"
    "      if held and held ~= 'shared' then\n"
    "        redis.call('ZADD', queue, e[2], e[1])\n"
    "        return served\n"
    "      end\n"
    "      local now = now_ms()\n"
    "      purge(holders, info, now)\n"
    "      if redis.call('ZCARD', holders) >= k then\n"
    "        redis.call('ZADD', queue, e[2], e[1])\n"
    "        return served\n"
    "      end\n"
    "      redis.call('ZADD', holders, now + tonumber(h), token)\n"
    "      redis.call('HSET', info, token, string.sub(value, 34), 'limit', k)\n"
    "      sync(lock, holders, info, now)\n"
    "      held, served = 'shared', true\n"
    "      redis.call('PUBLISH', string.sub(rest, 1, n), token)\n"
    "    end\n"
    "  end\n"
    "end\n";

/*
 * REFRESH  KEYS: lock, queue, holders   ARGV: queue ttl ms, shared ("1": the waiter
 *          would be a shared holder), the waiter's token
 * A waiter's heartbeat: keep the queue alive, and learn whether it is worth attempting
 * (a lease that ran out publishes nothing). The lock's PTTL, or -3 when the queue is
 * gone (a server restarted): the waiter then attempts, which queues it again. A shared
 * waiter may wait for a permit, which comes back when the first shared lease ends, not
 * the last: it gets that instead, -2 once it has ended. -2 also when the lock is the
 * waiter's own already: its heir's handoff, whose reply was lost (nothing published).
 */
const char *const dlock__refresh_lua[] = {
    "if redis.call('PEXPIRE', KEYS[2], ARGV[1]) == 0 then return -3 end\n"
    "if ARGV[2] ~= '1' and string.sub(redis.call('GET', KEYS[1]) or '', 1, 32) == ARGV[3] then\n"
    "  return -2\n"
    "end\n"
    "local p = redis.call('PTTL', KEYS[1])\n"
    "if ARGV[2] == '1' and p > 0 then\n"
    "  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')\n"
    "  if first[2] then\n"
    "    local t = redis.call('TIME')\n"
    "    local left = tonumber(first[2]) - (tonumber(t[1]) * 1000 + math.floor(t[2] / 1000))\n"
    "    if left <= 0 then return -2 end\n"
    "    if left < p then return left end\n"
    "  end\n"
    "end\n"
    "return p\n",
    NULL};

/*
 * CONFIRM  KEYS: lock   ARGV: token, ttl_ms (> 0)
 * A waiter that started its section on its grant's message asks for its own lease
 * (acquire.c, confirm.c). 1 when the lock is ours, its lease set; 0 when not. Short:
 * it is sent as EVAL, its reply read too late to resend it on -NOSCRIPT.
 */
const char *const dlock__confirm_lua[] = {"local v = redis.call('GET', KEYS[1])\n"
                                          "if v and string.sub(v, 1, 32) == ARGV[1] then\n"
                                          "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                          "  return 1\n"
                                          "end\n"
                                          "return 0\n",
                                          NULL};
