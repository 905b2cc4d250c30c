'use strict';
/*
 * cycles.js: what the Node package (clients/node) costs a lock + unlock cycle, for
 * dlock-bench's W5/node-raw and W5/node-package.
 *
 * One process, and two ways of making the same cycle through ioredis to dlockd:
 *
 *   raw      LOCK name TTL 30000, then UNLOCK name token, each one
 *            `await redis.call(...)` on one ioredis Redis, with the least checking a
 *            caller would do;
 *   package  `await client.acquire(name, {ttl: 30000})`, then `await lock.release()`,
 *            with client = new Client(new Redis(...)): the package gives each session
 *            lock a connection of its own, a duplicate of that Redis, taken from its
 *            idle pool and given back at the release.
 *
 * Both send the same two commands and read the same two replies, each on one
 * connection that stays open, so the difference is the package's own JavaScript:
 * argument checks, reply checks, the Lock and its AbortController, its listeners on the
 * connection, the pool's take and give, the bound (a timer) on each command. The rounds
 * alternate (raw, package, raw, ...) so that a burst of other work on the machine falls
 * on both kinds alike.
 *
 * Every cycle uses the same name. Both kinds then do the same work on the same keys of
 * the servers, which never grow, and a cycle that left the lock held would make the next
 * LOCK come back nil, which fails the run.
 *
 * usage: node cycles.js ioredis DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP
 *   PACKAGE_DIR  the package built (clients/node: its dist/index.js, and ioredis from
 *                its node_modules)
 *   ROUNDS       rounds of each kind; CYCLES per round; WARMUP cycles of each kind
 *                first, not timed (module loading, the JIT, the first connections)
 *
 * It prints one line per round pair on stdout:
 *   round I raw_ns T package_ns U
 * with T and U the process.hrtime.bigint() time of each round's CYCLES cycles. Anything
 * that is not a granted LOCK and an UNLOCK of 1 (true) is one line on stderr and exit
 * status 1.
 */

const fs = require('fs');
const path = require('path');
const { createRequire } = require('module');

const TTL_MS = 30000;
const BUILD = 'cd clients/node && npm ci && npm run build';

function fail(msg) {
  process.stderr.write(`cycles.js: ${msg}\n`);
  process.exit(1);
}

async function main(argv) {
  if (argv.length !== 7) {
    fail('usage: cycles.js ioredis DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP');
  }
  const [client, port, pkg, name] = argv;
  const [rounds, cycles, warmup] = argv.slice(4).map(Number);
  if (client !== 'ioredis') fail(`unknown client '${client}'`);
  if (!(rounds >= 1 && cycles >= 1 && warmup >= 0)) {
    fail('ROUNDS and CYCLES must be at least 1, WARMUP at least 0');
  }
  // The package of PACKAGE_DIR as built, and the ioredis it was built with.
  const index = path.join(pkg, 'dist', 'index.js');
  if (!fs.existsSync(index)) {
    fail(`${index} is missing: the package is not built (${BUILD}; or set $DLOCK_BENCH_NODE_PACKAGE_DIR)`);
  }
  const pkgRequire = createRequire(path.join(path.resolve(pkg), 'package.json'));
  let Redis;
  try {
    Redis = pkgRequire('ioredis');
  } catch (e) {
    fail(`ioredis is missing from ${pkg}/node_modules: ${e.message} (${BUILD})`);
  }
  const { Client } = require(path.resolve(index));

  const connect = async () => {
    // Errors come from the awaited commands; no reconnect, so a lost dlockd fails.
    const r = new Redis({
      host: '127.0.0.1',
      port: Number(port),
      connectTimeout: 5000,
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    r.on('error', () => undefined);
    try {
      await r.connect();
      await r.ping();
    } catch (e) {
      fail(`cannot connect to dlockd on port ${port}: ${e.message}`);
    }
    return r;
  };

  const redis = await connect();
  // The raw cycle and the package's, each an async function: a call costs the same for
  // both kinds, so it stays out of the difference.
  const raw = async (n) => {
    const lk = await redis.call('LOCK', n, 'TTL', TTL_MS);
    if (!Array.isArray(lk)) fail(`raw LOCK not granted: ${JSON.stringify(lk)}`);
    const u = await redis.call('UNLOCK', n, lk[0]);
    if (u !== 1) fail(`raw UNLOCK replied ${JSON.stringify(u)}`);
  };

  const shared = await connect();
  const dl = new Client(shared);
  const pkgCycle = async (n) => {
    const lock = await dl.acquire(n, { ttl: TTL_MS });
    if ((await lock.release()) !== true) fail('package release() returned false');
  };

  const roundNs = async (cycle, n) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await cycle(name);
    return process.hrtime.bigint() - t0;
  };

  await roundNs(raw, warmup);
  await roundNs(pkgCycle, warmup);
  const out = [];
  for (let i = 1; i <= rounds; i++) {
    const rawNs = await roundNs(raw, cycles);
    const packageNs = await roundNs(pkgCycle, cycles);
    out.push(`round ${i} raw_ns ${rawNs} package_ns ${packageNs}\n`);
  }
  await dl.close();
  redis.disconnect();
  shared.disconnect();
  // Printed at the end, so that no write sits between the rounds.
  process.stdout.write(out.join(''));
}

main(process.argv.slice(2)).catch((e) => fail(`${e && e.name}: ${e && e.message}`));
