/*
 * scripts_list.c: the listing's script (LIST), which dlock_list (list.c) sends whole
 * by EVAL, not through scripts.c's table of EVALSHA calls, to every server or every
 * master of a cluster, one page of SCAN at a time.
 */
#include "scripts.h"

/*
 * LIST  no KEYS (it reads the keys SCAN finds, on the node it runs on)
 *       ARGV: cursor, match, count, skip, budget, most holders, value max, desc max,
 *             key max, the page's signature when skipping
 * -> {next cursor, skip, records, signature}: when the budget ran out, the same cursor
 * and the number of its keys taken (the next call skips them), else SCAN's next cursor
 * and 0. The signature is the SHA1 of the page's keys: a page that changed between the
 * two calls (a key taken or freed meanwhile) is taken whole again rather than skipped
 * by position, which could pass over a key held all along; a name met twice is kept
 * once (list.c). Each record is a run of fields, each "<length>:<bytes>": key, value,
 * PTTL, fence, queue entries, the limit of shared holders ("" for an exclusive lock),
 * shared holders, then how many are listed and for each its token, ms left and
 * description. Keys longer than a lock name's key can be are not read: another tool's,
 * they would only outgrow the reply.
 */
const char dlock__list_lua[] =
    "local cursor, skip, budget, most = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5]),\n"
    "  tonumber(ARGV[6])\n"
    "local vmax, dmax, kmax = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local page = redis.call('SCAN', cursor, 'MATCH', ARGV[2], 'COUNT', ARGV[3])\n"
    "local sig = redis.sha1hex(table.concat(page[2], '\\n'))\n"
    "if skip > 0 and sig ~= ARGV[10] then skip = 0 end\n"
    "local out, size = {}, 0\n"
    "local function put(s)\n"
    "  s = tostring(s)\n"
    "  out[#out + 1] = #s .. ':' .. s\n"
    "  size = size + #s + 8\n"
    "end\n"
    "local function num(r)\n"
    "  if type(r) == 'number' then return r end\n"
    "  return 0\n"
    "end\n"
    "for i = skip + 1, #page[2] do\n"
    "  if size > budget then return {cursor, i - 1, table.concat(out), sig} end\n"
    "  local key = page[2][i]\n"
    "  local v = #key <= kmax and redis.pcall('GET', key)\n"
    "  if type(v) == 'string' then\n"
    "    put(key)\n"
    "    put(string.sub(v, 1, vmax))\n"
    "    put(num(redis.pcall('PTTL', key)))\n"
    "    local f = redis.pcall('GET', key .. ':fence')\n"
    "    if type(f) ~= 'string' or not string.match(f, '^%d+$') then f = '0' end\n"
    "    put(f)\n"
    "    put(num(redis.pcall('ZCARD', key .. ':queue')))\n"
    "    local holders, info = key .. ':holders', key .. ':holders:info'\n"
    "    if v == 'shared' then\n"
    "      local limit = redis.pcall('HGET', info, 'limit')\n"
    "      if type(limit) ~= 'string' then limit = '0' end\n"
    "      put(limit)\n"
    "      put(num(redis.pcall('ZCOUNT', holders, '(' .. now, '+inf')))\n"
    "      local top = redis.pcall('ZREVRANGEBYSCORE', holders, '+inf', '(' .. now,\n"
    "                              'WITHSCORES', 'LIMIT', 0, most)\n"
    "      if type(top) ~= 'table' or top.err then top = {} end\n"
    "      put(#top / 2)\n"
    "      for j = 1, #top, 2 do\n"
    "        local d = redis.pcall('HGET', info, top[j])\n"
    "        if type(d) ~= 'string' then d = '' end\n"
    "        put(top[j])\n"
    "        put(math.floor(tonumber(top[j + 1]) - now))\n"
    "        put(string.sub(d, 1, dmax))\n"
    "      end\n"
    "    else\n"
    "      put('')\n"
    "      put(0)\n"
    "      put(0)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return {page[1], 0, table.concat(out), sig}\n";
