'use strict';
/*
 * redlock.js: W5/peer-node-redlock, dlock-bench's flash sale with node-redlock (the
 * package's own defaults: retry every 200 ms with up to 200 ms of jitter, drift factor
 * 0.01), one node process of BUYERS buyers, each with its own ioredis connection and
 * its own Redlock on it, as W5/lock's buyers have a client each.
 *
 * A buyer's unit is W5/lock's: under the lock, GET the stock; if above 0, SET it one
 * lower and INCR the sold counter; release. It stops when it finds the stock at 0.
 *
 * usage: node redlock.js HOST PORT PASSWORD DB KEY_PREFIX BUYERS
 * Start and end as bench/php/buyer.php: INCRBY ready BUYERS once every buyer is
 * connected and warmed up, BLPOP go, then one line per buyer on stdout:
 *   bought N last_sale_ns T retries R max_wait_ns W
 * (R: refused attempts, which node-redlock does not count: 0). Exit 1 on any failure.
 */
const Redis = require('ioredis');
const { default: Redlock } = require('redlock');

function fail(msg) {
  process.stderr.write(`redlock.js: ${msg}\n`);
  process.exit(1);
}

async function main() {
  if (process.argv.length !== 8) {
    fail('usage: redlock.js HOST PORT PASSWORD DB KEY_PREFIX BUYERS');
  }
  const [host, port, password, db, prefix, nbuyers] = process.argv.slice(2);
  const options = { host, port: Number(port), db: Number(db), lazyConnect: true };
  if (password !== '') {
    options.password = password;
  }
  const stockKey = `${prefix}stock`;
  const soldKey = `${prefix}sold`;
  const lockKey = `${prefix}lock`;
  const buyers = [];
  for (let i = 0; i < Number(nbuyers); i++) {
    const redis = new Redis(options);
    await redis.connect();
    // Redlock's own defaults but for the count: a buyer waits until it is served.
    const redlock = new Redlock([redis], { retryCount: -1 });
    const warm = await redlock.acquire([`${lockKey}:warm:${i}`], 10000);
    await warm.release();
    buyers.push({ redis, redlock, bought: 0, last: 0n, maxWait: 0n });
  }
  const admin = new Redis(options);
  await admin.connect();
  await admin.incrby(`${prefix}ready`, buyers.length);
  if ((await admin.blpop(`${prefix}go`, 30)) === null) {
    fail('no start signal within 30 s');
  }
  await Promise.all(
    buyers.map(async (b) => {
      for (;;) {
        const t0 = process.hrtime.bigint();
        const lock = await b.redlock.acquire([lockKey], 10000);
        const waited = process.hrtime.bigint() - t0;
        if (waited > b.maxWait) {
          b.maxWait = waited;
        }
        const stock = Number(await b.redis.get(stockKey));
        if (stock > 0) {
          await b.redis.set(stockKey, String(stock - 1));
          await b.redis.incr(soldKey);
        }
        await lock.release();
        if (stock <= 0) {
          return;
        }
        b.bought++;
        b.last = process.hrtime.bigint();
      }
    })
  );
  const out = buyers
    .map((b) => `bought ${b.bought} last_sale_ns ${b.last} retries 0 max_wait_ns ${b.maxWait}\n`)
    .join('');
  process.stdout.write(out);
  for (const b of buyers) {
    b.redis.disconnect();
  }
  admin.disconnect();
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
