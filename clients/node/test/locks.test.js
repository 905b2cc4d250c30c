// Locks, using(), semaphores, stock and argument checks against one redis-server and
// one dlockd started for this file.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const dlock = require('..');

let server;
let d;
let shared;
let client;

before(async () => {
  server = await h.redisServer();
  d = await h.dlockd([server]);
  shared = h.redis(d.port);
  client = new dlock.Client(shared);
});

after(async () => {
  if (client) await client.close();
  await h.cleanup();
});

test('acquire, extend and release', async () => {
  const name = h.unique('basic');
  const lock = await client.acquire(name, { ttl: 5000 });
  assert.equal(lock.name, name);
  assert.match(lock.token, /^[0-9a-f]{32}$/);
  assert.equal(typeof lock.fence, 'number');
  assert.ok(Number.isSafeInteger(lock.fence) && lock.fence > 0);
  assert.ok(lock.validityMs > 0 && lock.validityMs <= 5000);
  assert.equal(lock.detached, false);
  const info = await client.info(name);
  assert.equal(info.state, 'held');
  assert.equal(info.fence, lock.fence);
  assert.ok(info.remaining_ms > 0);
  assert.equal(await lock.isHeld(), true);
  assert.equal(await lock.extend(8000), true);
  assert.ok((await client.info(name)).remaining_ms > 5000);
  assert.equal(await lock.release(), true);
  assert.equal(await lock.release(), false);
  assert.equal((await client.info(name)).state, 'free');
  // The next holder's fence is greater.
  const again = await client.acquire(name, { ttl: 5000 });
  assert.ok(again.fence > lock.fence);
  assert.equal(await again.release(), true);
});

test('a detached lock: a lease on the shared connection, released by token anywhere', async () => {
  const name = h.unique('detached');
  const before = client.connections;
  const lock = await client.acquire(name, { ttl: 5000, detached: true });
  assert.equal(lock.detached, true);
  assert.equal(client.connections, before, 'no dedicated connection for a detached lock without a wait');
  const other = client.adopt(name, lock.token, lock.fence);
  assert.equal(await other.extend(100), true);
  assert.equal(await other.release(), true);
  assert.equal(await lock.release(), false);
  const short = await client.acquire(name, { ttl: 50, detached: true });
  await h.sleep(150);
  assert.equal(await short.isHeld(), false);
  assert.equal(short.lost, true);
});

test('NotAcquiredError after the wait, and at once with wait 0', async () => {
  const name = h.unique('busy');
  const holder = await client.acquire(name, { ttl: 5000 });
  let t0 = Date.now();
  const e = await h.rejection(client.acquire(name, { ttl: 5000, wait: 300 }));
  let took = Date.now() - t0;
  assert.ok(e instanceof dlock.NotAcquiredError, String(e));
  assert.ok(e instanceof dlock.DlockError);
  assert.ok(took >= 250 && took < 300 + 1000 * h.SLACK, `waited ${took} ms`);
  t0 = Date.now();
  const e0 = await h.rejection(client.acquire(name, { ttl: 5000, wait: 0 }));
  took = Date.now() - t0;
  assert.ok(e0 instanceof dlock.NotAcquiredError);
  assert.ok(took < 500 * h.SLACK, `wait 0 took ${took} ms`);
  assert.equal(await client.tryAcquire(name, { ttl: 5000 }), null);
  assert.equal(await holder.release(), true);
});

test('a waiter is served at the release', async () => {
  const name = h.unique('handoff');
  const holder = await client.acquire(name, { ttl: 5000 });
  const waiting = client.acquire(name, { ttl: 5000, wait: 10000 });
  await h.sleep(200);
  const released = Date.now();
  assert.equal(await holder.release(), true);
  const lock = await h.within(10000, waiting, 'the waiter');
  const after = Date.now() - released;
  assert.ok(after < 1000 * h.SLACK, `served ${after} ms after the release`);
  assert.ok(lock.fence > holder.fence);
  assert.equal(await lock.release(), true);
});

test('a wait of Infinity is served too', async () => {
  const name = h.unique('forever');
  const holder = await client.acquire(name, { ttl: 5000 });
  const waiting = client.acquire(name, { ttl: 5000, wait: Infinity });
  setTimeout(() => holder.release(), 200);
  const lock = await h.within(5000 * h.SLACK, waiting, 'the endless waiter');
  assert.equal(await lock.release(), true);
});

test('20 concurrent jobs on one shared ioredis: no overlap, no "already holds"', async () => {
  const name = h.unique('many');
  let inside = 0;
  let max = 0;
  let runs = 0;
  const job = () =>
    client.using(name, { ttl: 5000, wait: 30000 }, async () => {
      inside += 1;
      max = Math.max(max, inside);
      await h.sleep(5);
      inside -= 1;
      runs += 1;
    });
  await h.within(30000 * h.SLACK, Promise.all(Array.from({ length: 20 }, job)), '20 jobs');
  assert.equal(runs, 20);
  assert.equal(max, 1, 'two jobs were inside at once');
  assert.equal((await client.info(name)).state, 'free');
  assert.ok(client.connections <= 8 + 1, `${client.connections} dedicated connections left open`);
});

test('session locks of one client on several names at once', async () => {
  const names = [h.unique('multi'), h.unique('multi'), h.unique('multi')];
  const locks = await Promise.all(names.map((n) => client.acquire(n, { ttl: 5000 })));
  for (const n of names) assert.equal((await client.info(n)).state, 'held');
  assert.deepEqual(await Promise.all(locks.map((l) => l.release())), [true, true, true]);
});

test('using() returns the routine value and releases the lock', async () => {
  const name = h.unique('using');
  const value = await client.using(name, { ttl: 5000 }, async (signal, lock) => {
    assert.ok(signal instanceof AbortSignal);
    assert.equal(signal.aborted, false);
    assert.equal((await client.info(name)).state, 'held');
    return { fence: lock.fence };
  });
  assert.ok(value.fence > 0);
  assert.equal((await client.info(name)).state, 'free');
  // The options may be left out.
  assert.equal(await client.using(name, () => 7), 7);
});

test('using() releases the lock when the routine throws, and passes the error on', async () => {
  const name = h.unique('throws');
  const boom = new Error('boom');
  const e = await h.rejection(client.using(name, { ttl: 5000 }, async () => {
    throw boom;
  }));
  assert.equal(e, boom);
  assert.equal((await client.info(name)).state, 'free');
  const busy = await client.acquire(name, { ttl: 5000 });
  const ne = await h.rejection(client.using(name, { ttl: 5000, wait: 100 }, () => 1));
  assert.ok(ne instanceof dlock.NotAcquiredError);
  await busy.release();
});

test('a cancelled wait (signal) holds nothing and leaves no waiter', async () => {
  const name = h.unique('cancel');
  const holder = await client.acquire(name, { ttl: 5000 });
  const ac = new AbortController();
  const waiting = client.acquire(name, { ttl: 5000, wait: 10000, signal: ac.signal });
  await h.sleep(200);
  const t0 = Date.now();
  ac.abort();
  const e = await h.within(2000 * h.SLACK, h.rejection(waiting), 'the cancelled wait');
  assert.equal(e.name, 'AbortError', `the cancelled wait rejected with ${e}`);
  const settled = Date.now() - t0;
  assert.ok(settled < 500 * h.SLACK, `the cancelled wait took ${settled} ms to reject`);
  assert.equal(await holder.release(), true, 'the holder\'s release');
  // Nobody holds it: dlockd dropped the waiter with its connection (or, had the release
  // come first, released the grant as the connection closed).
  const t1 = Date.now();
  try {
    await h.within(1000 * h.SLACK, h.freed(client, name), 'the name free after the cancelled wait');
  } catch (err) {
    const info = await client.info(name);
    throw new Error(`${err.message}: ${Date.now() - t1} ms after the release, LOCKINFO says ${JSON.stringify(info)}; dlockd's log:\n${d.log}`);
  }
  assert.equal((await client.info(name)).state, 'free');
});

test('names: a 64 KB name is refused, one with CR LF is held; bad arguments', async () => {
  const big = 'x'.repeat(65536);
  for (const bad of [big, '', 'a\0b', Buffer.alloc(4097, 0x61), 42, null]) {
    const e = await h.rejection(client.acquire(bad, { ttl: 5000 }));
    assert.ok(e instanceof dlock.InvalidArgumentError, `${typeof bad}: ${e}`);
  }
  const crlf = `line\r\nbreak ${h.unique('crlf')}`;
  const lock = await client.acquire(crlf, { ttl: 5000 });
  assert.equal(lock.name, crlf);
  assert.equal((await client.info(crlf)).state, 'held');
  assert.equal((await client.info(Buffer.from(crlf))).state, 'held');
  assert.equal(await lock.release(), true);
  const max = await client.acquire('n'.repeat(4096), { ttl: 5000 });
  assert.equal(await max.release(), true);
  const utf = await client.acquire(`zürich ✓ ${h.unique('utf')}`, { ttl: 5000 });
  assert.equal(await utf.release(), true);
});

test('wait and ttl checks: negative wait, NaN, TTL out of range', async () => {
  const name = h.unique('args');
  const cases = [
    { wait: -1 }, { wait: -0.5 }, { wait: NaN }, { wait: '10' }, { wait: 2 ** 31 },
    { ttl: 999 }, { ttl: 0 }, { ttl: 1.5e3 + 0.5 }, { ttl: 2 ** 31 }, { ttl: 5, detached: true },
    { maxHold: -1 }, { detached: true, maxHold: 1000 }, { label: '' }, { label: 'x'.repeat(257) },
  ];
  for (const opts of cases) {
    const e = await h.rejection(client.acquire(name, opts));
    assert.ok(e instanceof dlock.InvalidArgumentError, `${JSON.stringify(opts)}: ${e}`);
  }
  // A BigInt is no number here, and the message shows it as one (10000n, not 10000).
  const big = await h.rejection(client.acquire(name, { ttl: 10000n }));
  assert.match(big.message, /not 10000n$/);
  const held = await client.acquire(name, { ttl: 5000 });
  const e = await h.rejection(held.extend(10));
  assert.ok(e instanceof dlock.InvalidArgumentError);
  await held.release();
  // The ttl floor of a detached lock is dlockd's 10 ms.
  const d10 = await client.acquire(name, { ttl: 10, detached: true });
  assert.ok(d10.validityMs <= 10);
  assert.throws(() => new dlock.Client({}), dlock.InvalidArgumentError);
});

test('a shared holder overlaps shared ones and excludes an exclusive one', async () => {
  const name = h.unique('shared');
  const a = await client.acquire(name, { ttl: 5000, shared: true });
  const b = await client.acquire(name, { ttl: 5000, shared: true });
  const info = await client.info(name);
  assert.equal(info.shared, 2);
  assert.ok(Array.isArray(info.holder));
  assert.equal(await client.tryAcquire(name, { ttl: 5000 }), null);
  await a.release();
  await b.release();
  const x = await client.acquire(name, { ttl: 5000, label: 'the-writer' });
  assert.match((await client.info(name)).holder, /the-writer/);
  await x.release();
});

test('a semaphore of 2 permits', async () => {
  const sem = client.semaphore(h.unique('sem'), 2);
  assert.equal(sem.permits, 2);
  const p1 = await sem.acquire({ ttl: 5000 });
  const p2 = await sem.acquire({ ttl: 5000 });
  const e = await h.rejection(sem.acquire({ ttl: 5000, wait: 100 }));
  assert.ok(e instanceof dlock.NotAcquiredError);
  assert.equal(await sem.tryAcquire({ ttl: 5000 }), null);
  const waiting = sem.acquire({ ttl: 5000, wait: 10000 });
  await h.sleep(100);
  assert.equal(await p1.release(), true);
  const p3 = await h.within(5000, waiting, 'the permit waiter');
  assert.ok(p3.fence > 0);
  let inside = 0;
  let max = 0;
  await Promise.all(
    Array.from({ length: 6 }, () =>
      sem.using({ ttl: 5000, wait: 20000 }, async () => {
        inside += 1;
        max = Math.max(max, inside);
        await h.sleep(20);
        inside -= 1;
      }),
    ).concat([h.sleep(50).then(() => Promise.all([p2.release(), p3.release()]))]),
  );
  assert.equal(max, 2);
  assert.throws(() => client.semaphore('s', 0), dlock.InvalidArgumentError);
  const se = await h.rejection(sem.acquire({ shared: true }));
  assert.ok(se instanceof dlock.InvalidArgumentError);
});

test('stock: set, add, reserve, commit, cancel, extend, sold out', async () => {
  const st = client.stock(h.unique('sku'));
  let s = await st.set(10);
  assert.deepEqual([s.stock, s.available, s.sold], [10, 10, 0]);
  s = await st.add(-2);
  assert.equal(s.stock, 8);
  const r1 = await st.reserve(3, { lease: 5000 });
  assert.match(r1.id, /^[0-9a-f]{32}$/);
  assert.equal(r1.qty, 3);
  assert.equal(await r1.extend(8000), true);
  assert.equal(await st.reservation(r1.id).commit(), true);
  const r2 = await st.reserve(5);
  const soldOut = await h.rejection(st.reserve(6));
  assert.ok(soldOut instanceof dlock.OutOfStockError && soldOut instanceof dlock.NotAcquiredError);
  assert.equal(soldOut.soldOut, true);
  const busy = await h.rejection(st.reserve(1));
  assert.equal(busy.soldOut, false);
  assert.equal(busy.state.reserved, 5);
  const waiting = st.reserve(2, { wait: 10000 });
  await h.sleep(100);
  assert.equal(await r2.cancel(), true);
  const r3 = await h.within(5000, waiting, 'the waiting reserve');
  assert.equal(await r3.commit(), true);
  s = await st.status();
  assert.deepEqual([s.stock, s.sold, s.reserved, s.available], [8, 5, 0, 3]);
  assert.equal(await r2.cancel(), false);
  await assert.rejects(st.set(-1), dlock.InvalidArgumentError);
  await assert.rejects(st.add(0), dlock.InvalidArgumentError);
  assert.throws(() => st.reservation('nope'), dlock.InvalidArgumentError);
});

test('dlockd refusals are CommandError', async () => {
  // More units taken away than are available: dlockd's -ERR, with the counts.
  const ce = await h.rejection(client.stock(h.unique('sku')).add(-5));
  assert.ok(ce instanceof dlock.CommandError, String(ce));
  assert.match(ce.message, /^dlockd: ERR /);
});

test('an ioredis client with stringNumbers: fences and replies read the same', async () => {
  const c = new dlock.Client(h.redis(d.port, { stringNumbers: true }));
  const name = h.unique('strnum');
  const lock = await c.acquire(name, { ttl: 5000, detached: true });
  assert.equal(typeof lock.fence, 'number');
  assert.equal((await c.info(name)).fence, lock.fence);
  assert.equal(await lock.release(), true);
  assert.equal((await c.stock(h.unique('sku')).set(3)).available, 3);
  await c.close();
});

test('a detached lock with a wait takes a dedicated connection for the wait alone', async () => {
  const name = h.unique('dwait');
  const holder = await client.acquire(name, { ttl: 5000 });
  const waiting = client.acquire(name, { ttl: 5000, wait: 5000, detached: true });
  await h.sleep(100);
  await holder.release();
  const lock = await h.within(5000, waiting, 'the detached waiter');
  assert.equal(lock.detached, true);
  // Its connection went back to the idle pool: the session lock that comes next reuses
  // it rather than opening one more.
  const open = client.connections;
  const next = await client.acquire(h.unique('dwait'), { ttl: 5000 });
  assert.equal(client.connections, open);
  await next.release();
  assert.equal(await lock.release(), true);
});
