/*
 * scripts_records.c: the scripts of the records kept apart from a lock's own keys: the
 * fenced register a resource writes through (fence.c), a scheduled job's slot record
 * (slot.c) and a leader's record (elect.c, observe.c). Their calls, and what their
 * replies mean, are in those files; the lock's own scripts are in scripts.c.
 */
#include "scripts.h"

/*
 * FENCED_SET  KEYS: register   ARGV: fence, value
 * Write {value, fence} unless a higher fence was accepted. 1 when written, 0 when
 * refused. Fences are compared as numbers (they fit a double exactly).
 */
const char *const dlock__fenced_set_lua[] = {
    "local last = tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0\n"
    "if tonumber(ARGV[1]) < last then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])\n"
    "return 1\n",
    NULL};

/*
 * FENCE_RAISE  KEYS: register   ARGV: fence
 * A register told of a fence without a write: its value stays, and writes with lower
 * fences are refused from now on. Always 1.
 */
const char *const dlock__fence_raise_lua[] = {
    "if (tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0) < tonumber(ARGV[1]) then\n"
    "  redis.call('HSET', KEYS[1], 'fence', ARGV[1])\n"
    "end\n"
    "return 1\n",
    NULL};

/*
 * SLOT_READ  KEYS: lock, slot   ARGV: token
 * -> {1 if the lock holds the token else 0, TIME's seconds, TIME's microseconds, the
 * record's slot_ms, at_ms and by ("" when there is none)}.
 */
const char *const dlock__slot_read_lua[] = {
    "local v = redis.call('GET', KEYS[1])\n"
    "local t = redis.call('TIME')\n"
    "local r = redis.call('HMGET', KEYS[2], 'slot_ms', 'at_ms', 'by')\n"
    "local held = 0\n"
    "if v and string.sub(v, 1, 32) == ARGV[1] then held = 1 end\n"
    "return {held, t[1], t[2], r[1] or '', r[2] or '', r[3] or ''}\n",
    NULL};

/*
 * SLOT_CLAIM  KEYS: lock, slot   ARGV: token, slot_ms, at_ms, by, keep ms
 * -> 1 when recorded; 0 when the lock does not hold the token; 2 when the record holds
 * this slot or a later one (a claim this server took that the read did not see). The
 * time of the claim is the caller's (the median clock), so that every server records
 * the same one.
 */
const char *const dlock__slot_claim_lua[] = {
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, 32) ~= ARGV[1] then return 0 end\n"
    "local last = tonumber(redis.call('HGET', KEYS[2], 'slot_ms'))\n"
    "if last and last >= tonumber(ARGV[2]) then return 2 end\n"
    "redis.call('HSET', KEYS[2], 'slot_ms', ARGV[2], 'at_ms', ARGV[3], 'by', ARGV[4])\n"
    "redis.call('PEXPIRE', KEYS[2], ARGV[5])\n"
    "return 1\n",
    NULL};

/*
 * PROCLAIM  KEYS: lock, record   ARGV: token, term, seq, value
 * -> 1 when recorded and published, 0 when the lock does not hold the token. The record
 * gets the lock's lease, which renewals extend together.
 */
const char *const dlock__proclaim_lua[] = {
    "local v = redis.call('GET', KEYS[1])\n"
    "if not v or string.sub(v, 1, 32) ~= ARGV[1] then return 0 end\n"
    "local pttl = redis.call('PTTL', KEYS[1])\n"
    "redis.call('DEL', KEYS[2])\n"
    "redis.call('HSET', KEYS[2], 'term', ARGV[2], 'seq', ARGV[3], 'token', ARGV[1],\n"
    "           'value', ARGV[4])\n"
    "if pttl > 0 then redis.call('PEXPIRE', KEYS[2], pttl) end\n"
    "redis.call('PUBLISH', KEYS[2], 'T ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. pttl ..\n"
    "           ' ' .. #v .. ' ' .. v .. ARGV[4])\n"
    "return 1\n",
    NULL};

/*
 * retire(record, token), a function of RELEASE and BREAK (scripts.c): when the lock
 * released or broken was a leader's, its record goes and "no one leads" is published,
 * its seq one past the last proclamation's. Every end of a leader's lock but a lease
 * that runs out tells its observers so.
 */
const char dlock__retire_lua[] =
    "local function retire(rec, token)\n"
    "  local r = redis.call('HMGET', rec, 'token', 'term', 'seq')\n"
    "  if r[1] == token then\n"
    "    redis.call('DEL', rec)\n"
    "    redis.call('PUBLISH', rec, 'N ' .. r[2] .. ' ' .. ((tonumber(r[3]) or 0) + 1))\n"
    "  end\n"
    "end\n";

/*
 * LEADER  KEYS: lock, record
 * -> {the lock's value or "", its PTTL, the record's term, seq, token and value ("" each
 * when there is none)}.
 */
const char *const dlock__leader_lua[] = {
    "local v = redis.call('GET', KEYS[1])\n"
    "if type(v) ~= 'string' then v = '' end\n"
    "local r = redis.call('HMGET', KEYS[2], 'term', 'seq', 'token', 'value')\n"
    "return {v, redis.call('PTTL', KEYS[1]), r[1] or '', r[2] or '', r[3] or '', r[4] or ''}\n",
    NULL};
