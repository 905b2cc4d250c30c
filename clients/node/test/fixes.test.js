// What a client must not get wrong at the edges: grants that come after their call was
// given up, releases that failed, waits past their bound, a draining or hung dlockd,
// timers past Node's limit, options that are not what they seem, idle connections that
// keep a process alive.
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const h = require('./helpers');
const dlock = require('..');
const Redis = require('ioredis');

const { client, setup } = h;

after(() => h.cleanup());

test('a detached LOCK given up on a hung dlockd: its late grant is released, never left to its TTL', async () => {
  const { d } = await setup();
  const c = client(d.port, { timeout: 300 });
  const probe = client(d.port);
  await c.ping();
  const name = h.unique('late');
  d.pause();
  const e = await h.rejection(c.acquire(name, { ttl: 60000, detached: true }));
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  d.resume();
  // The grant came after the bound (a fence was issued), and was given back.
  await h.within(5000 * h.SLACK, (async () => {
    for (;;) {
      const i = await probe.info(name);
      if (i.fence > 0 && i.state === 'free') return;
      await h.sleep(20);
    }
  })(), 'the release of the late grant');
});

test('dlockd down: a detached LOCK is not left in the offline queue to be sent when it is back', async () => {
  const server = await h.redisServer();
  const port = await h.freePort();
  const app = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 });
  app.on('error', () => {});
  const c = h.closedAtEnd(new dlock.Client(app, { timeout: 300 }));
  const name = h.unique('queued');
  try {
    const e = await h.rejection(c.acquire(name, { ttl: 60000, detached: true }));
    assert.ok(e instanceof dlock.UnavailableError, String(e));
    const d = new h.Proc('dlockd', path.resolve(process.env.DLOCKD), ['-s', server.url, '-p', String(port), '--shutdown-timeout', '0'], {});
    await d.waitPort(port);
    // Once the application's client is connected again, whatever it had queued was sent.
    await h.within(5000 * h.SLACK, new Promise((r) => (app.status === 'ready' ? r() : app.once('ready', r))), 'the reconnect');
    await app.ping();
    assert.equal((await c.info(name)).fence, 0, 'the LOCK was sent after its caller gave up');
  } finally {
    app.disconnect();
  }
});

test('a detached release that failed can be tried again', async () => {
  const { server, d } = await setup(['--timeout', '200']);
  const c = client(d.port, { timeout: 2000 });
  const name = h.unique('retry-release');
  const lock = await c.acquire(name, { ttl: 60000, detached: true });
  server.pause();
  const e = await h.rejection(lock.release());
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  server.resume();
  assert.equal(lock.isReleased, false);
  assert.equal(await lock.release(), true);
  assert.equal((await c.info(name)).state, 'free');
});

test('a reused connection closed mid-wait: no second LOCK past wait + timeout', async () => {
  const admin = h.tempFile('admin.pass', 'adm\n');
  const { d } = await setup(['--admin-pass-file', admin]);
  const holder = client(d.port);
  const c = client(d.port, { timeout: 300 });
  const warm = await c.acquire(h.unique('warm'), { ttl: 5000 });
  await warm.release();
  const name = h.unique('killed-wait');
  await holder.acquire(name, { ttl: 30000, detached: true });
  const op = h.redis(d.port, { username: 'admin', password: 'adm' });
  const t0 = Date.now();
  const w = h.rejection(c.acquire(name, { ttl: 5000, wait: 1500 }));
  let id;
  while (id === undefined) {
    const line = (await op.call('CLIENT', 'LIST')).split('\n').find((l) => /flags=b/.test(l));
    if (line) id = /id=(\d+)/.exec(line)[1];
    else await h.sleep(10);
  }
  // Killed well into the wait: a second LOCK with the whole wait would end past the bound.
  await h.sleep(1000);
  await op.call('CLIENT', 'KILL', 'ID', id);
  const e = await w;
  const took = Date.now() - t0;
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.ok(took < 1800 * h.SLACK, `settled after ${took} ms, bound 1800`);
});

test('-SHUTDOWN: the connection is closed and the idle pool emptied', async () => {
  const server = await h.redisServer();
  const d = await h.dlockd([server], ['--shutdown-timeout', '5000']);
  const holder = client(d.port);
  const held = await holder.acquire(h.unique('held'), { ttl: 5000 });
  const c = client(d.port);
  const a = await c.acquire(h.unique('a'), { ttl: 5000 });
  const b = await c.acquire(h.unique('b'), { ttl: 5000 });
  await a.release();
  await b.release();
  assert.equal(c.pool.idleCount, 2);
  d.signal('SIGTERM');
  // Taken until the drain begins (the signal is delivered meanwhile).
  let e;
  while (!e) {
    try {
      const l = await c.acquire(h.unique('x'), { ttl: 5000 });
      await l.release();
      await h.sleep(10);
    } catch (err) {
      e = err;
    }
  }
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.match(e.message, /SHUTDOWN/);
  assert.equal(c.pool.idleCount, 0);
  assert.equal(c.connections, 0);
  await held.release();
});

test('bounds past 2^31 - 1 ms do not fire at once; timeout and maxHold of 0 are refused', async () => {
  const { d } = await setup();
  const holder = client(d.port);
  const name = h.unique('long');
  await holder.acquire(name, { ttl: 30000 });
  const c = client(d.port, { timeout: 2147483647 });
  const ac = new AbortController();
  let settled = false;
  const p = c.acquire(name, { ttl: 5000, wait: 2147483647, signal: ac.signal }).finally(() => {
    settled = true;
  });
  p.catch(() => {});
  // Not settled while the lock is held (the old timer fired after 1 ms).
  await h.within(5000 * h.SLACK, (async () => {
    for (;;) {
      const i = await holder.redis.call('INFO', 'clients');
      if (/blocked_clients:1/.test(i)) return;
      await h.sleep(10);
    }
  })(), 'the wait');
  await h.sleep(100);
  assert.equal(settled, false);
  assert.equal((await c.info(name)).state, 'held');
  ac.abort();
  await h.rejection(p);
  assert.throws(() => new dlock.Client(h.redis(d.port), { timeout: 0 }), dlock.InvalidArgumentError);
  await assert.rejects(c.acquire(h.unique('t0'), { timeout: 0 }), dlock.InvalidArgumentError);
  await assert.rejects(c.acquire(h.unique('m0'), { maxHold: 0 }), dlock.InvalidArgumentError);
});

test('using(): a routine that released the lock itself gets its value', async () => {
  const { d } = await setup();
  const c = client(d.port);
  const v = await c.using(h.unique('own-release'), { ttl: 5000 }, async (signal, lock) => {
    assert.equal(await lock.release(), true);
    return 'v';
  });
  assert.equal(v, 'v');
});

test('options: non-booleans, unknown keys, a bad fence and lone surrogates are refused', async () => {
  const { d } = await setup();
  const c = client(d.port);
  for (const o of [{ detached: 'yes' }, { shared: 1 }, { fair: 'no' }, { ttlMs: 5 }, { waitMs: 100 }]) {
    await assert.rejects(c.acquire(h.unique('opt'), o), dlock.InvalidArgumentError, JSON.stringify(o));
  }
  await assert.rejects(c.stock('sku').reserve(1, { leaseMs: 5 }), dlock.InvalidArgumentError);
  assert.throws(() => new dlock.Client(h.redis(d.port), { timeOut: 5 }), dlock.InvalidArgumentError);
  const token = '0123456789abcdef0123456789abcdef';
  for (const f of [-1, 1.5, '7', 2 ** 53]) assert.throws(() => c.adopt('x', token, f), dlock.InvalidArgumentError, String(f));
  await assert.rejects(c.acquire(h.unique('lbl'), { label: 'a\uD800b' }), dlock.InvalidArgumentError);
  assert.equal(c.connections, 0);
});

test('a hung dlockd under a session lock: the PING goes unanswered and the signal aborts', async () => {
  const { d } = await setup();
  const c = client(d.port);
  const lock = await c.acquire(h.unique('hung'), { ttl: 1000 });
  const lost = new Promise((r) => lock.signal.addEventListener('abort', r, { once: true }));
  d.pause();
  await h.within(3000 * h.SLACK, lost, 'the abort');
  assert.ok(lock.signal.reason instanceof dlock.LockLostError);
  assert.match(lock.signal.reason.message, /PING/);
  d.resume();
  assert.equal(await lock.release(), false);
});

test('idle pooled connections do not keep the process alive', async () => {
  const { d } = await setup();
  const child = `
    const Redis = require('ioredis');
    const { Client } = require(${JSON.stringify(require.resolve('..'))});
    (async () => {
      const r = new Redis({ port: ${d.port} });
      const c = new Client(r);
      const lock = await c.acquire('idle-exit', { ttl: 5000 });
      await lock.release();
      await r.quit();
    })();`;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['-e', child], { cwd: __dirname, timeout: 3000 * h.SLACK, encoding: 'utf8' });
  assert.equal(r.signal, null, `the child did not exit within ${Date.now() - t0} ms: ${r.stderr}`);
  assert.equal(r.status, 0, r.stderr);
});

test('a session release that fails marks the lock lost', async () => {
  const { d } = await setup();
  const c = client(d.port, { timeout: 300 });
  const lock = await c.acquire(h.unique('rel-timeout'), { ttl: 5000 });
  d.pause();
  await assert.rejects(lock.release(), dlock.UnavailableError);
  d.resume();
  assert.equal(lock.lost, true);
});

test('many waits sharing one signal: no listener warning', async () => {
  const { d } = await setup();
  const c = client(d.port);
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  const name = h.unique('many');
  const holder = await c.acquire(name, { ttl: 5000 });
  const ac = new AbortController();
  const waits = [];
  for (let i = 0; i < 15; i++) waits.push(h.rejection(c.acquire(name, { ttl: 5000, wait: 10000, signal: ac.signal })));
  ac.abort();
  await Promise.all(waits);
  await holder.release();
  await new Promise((r) => setImmediate(r));
  process.removeListener('warning', onWarning);
  assert.deepEqual(warnings.map((w) => w.name), []);
});

test("dlockd's reason for refusing a connection is kept: max number of clients reached", async () => {
  const { d } = await setup(['--maxclients', '2']);
  const c = client(d.port);
  await c.ping();
  const lock = await c.acquire(h.unique('one'), { ttl: 5000 });
  const e = await h.rejection(c.acquire(h.unique('two'), { ttl: 5000 }));
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.match(e.message, /max number of clients/);
  assert.equal(await lock.release(), true);
});
