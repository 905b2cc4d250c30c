// Failures: locks lost while held, dlockd down or killed mid-wait or hung, lock servers
// down, a wrong password, a holder process killed. Each test starts the servers it
// breaks.
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const h = require('./helpers');
const dlock = require('..');

const { client, setup } = h;

after(() => h.cleanup());

/** Resolves when `signal` aborts, with the time it took from `t0`. */
function aborted(signal, t0) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(Date.now() - t0);
    signal.addEventListener('abort', () => resolve(Date.now() - t0), { once: true });
  });
}

test('MAXHOLD: the signal aborts when dlockd drops the lock, and using() rejects with LockLostError', async () => {
  const { d } = await setup();
  const c = client(d.port);
  const name = h.unique('maxhold');
  const t0 = Date.now();
  let reason;
  const e = await h.rejection(
    c.using(name, { ttl: 1000, maxHold: 1200 }, async (signal) => {
      const took = await h.within(5000 * h.SLACK, aborted(signal, t0), 'the abort');
      assert.ok(took >= 1100, `aborted after ${took} ms`);
      reason = signal.reason;
      return 'done';
    }),
  );
  assert.ok(e instanceof dlock.LockLostError, String(e));
  assert.ok(reason instanceof dlock.LockLostError);
  assert.match(reason.message, /MAXHOLD/);
  await h.within(2000 * h.SLACK, h.freed(c, name), 'the release after MAXHOLD');
  // The next lock works (no lost connection came back from the pool).
  const again = await c.acquire(name, { ttl: 2000 });
  assert.equal(await again.release(), true);
});

test('a routine that throws after the loss rejects with its own error', async () => {
  const { d } = await setup(['--max-hold', '1000']);
  const c = client(d.port);
  const boom = new Error('mine');
  const e = await h.rejection(
    c.using(h.unique('own'), { ttl: 1000 }, async (signal) => {
      await h.within(5000 * h.SLACK, aborted(signal, Date.now()), 'the abort');
      throw boom;
    }),
  );
  assert.equal(e, boom);
});

test('CLIENT KILL of the lock connection and EXTEND answered 0 abort the signal', async () => {
  const admin = h.tempFile('admin.pass', 'admin-secret\n');
  const { d } = await setup(['--admin-pass-file', admin]);
  const c = client(d.port);
  const name = h.unique('killed');
  const lock = await c.acquire(name, { ttl: 2000 });
  const holder = (await c.info(name)).holder;
  const addr = /(\d+\.\d+\.\d+\.\d+:\d+)/.exec(holder)[1];
  const op = h.redis(d.port, { username: 'admin', password: 'admin-secret' });
  const open = c.connections;
  const t0 = Date.now();
  assert.equal(await op.call('CLIENT', 'KILL', 'ADDR', addr), 1);
  const took = await h.within(2000 * h.SLACK, aborted(lock.signal, t0), 'the abort after CLIENT KILL');
  assert.ok(took < 1000 * h.SLACK);
  assert.equal(lock.lost, true);
  assert.equal(await lock.release(), false);
  assert.equal(c.connections, open - 1, 'the killed connection was kept');
  // dlockd releases the killed connection's lock as it closes it: a round trip to the
  // lock server, which may end just after the client saw the close.
  await h.within(2000 * h.SLACK, h.freed(c, name), 'the release after CLIENT KILL');

  const name2 = h.unique('extend0');
  const l2 = await c.acquire(name2, { ttl: 2000 });
  assert.equal(await op.call('UNLOCK', name2, l2.token), 1);
  assert.equal(l2.signal.aborted, false);
  assert.equal(await l2.extend(2000), false);
  assert.equal(l2.signal.aborted, true);
  assert.ok(l2.signal.reason instanceof dlock.LockLostError);
  assert.equal(await l2.release(), false);
});

test('a lock server paused past the TTL: the lock is lost and the signal aborts', async () => {
  const { server, d } = await setup();
  const c = client(d.port);
  const name = h.unique('paused');
  const t0 = Date.now();
  const result = c.using(name, { ttl: 1000 }, async (signal) => {
    server.pause();
    try {
      return await h.within(10000 * h.SLACK, aborted(signal, t0), 'the abort');
    } finally {
      server.resume();
    }
  });
  const e = await h.rejection(result);
  assert.ok(e instanceof dlock.LockLostError, String(e));
});

test('dlockd down at connect: UnavailableError, never a hang', async () => {
  const port = await h.freePort();
  const c = client(port, { timeout: 1000 });
  let t0 = Date.now();
  const e = await h.within(5000, h.rejection(c.acquire('x', { ttl: 2000, wait: 1000 })), 'acquire');
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.ok(Date.now() - t0 < 2500 * h.SLACK);
  t0 = Date.now();
  const e2 = await h.within(5000, h.rejection(c.acquire('x', { ttl: 2000, detached: true })), 'detached acquire');
  assert.ok(e2 instanceof dlock.UnavailableError, String(e2));
  const e3 = await h.within(5000, h.rejection(c.info('x')), 'info');
  assert.ok(e3 instanceof dlock.UnavailableError, String(e3));
  assert.ok(Date.now() - t0 < 3000 * h.SLACK);
  // ioredis's own failures, each an UnavailableError: its retries per request run out,
  // and a client that gave up reconnecting says "Connection is closed.".
  assert.match(e3.message, /max retries per request/);
  const gaveUp = client(port, {}, { retryStrategy: () => null });
  await h.sleep(100);
  const e4 = await h.within(5000, h.rejection(gaveUp.info('x')), 'info on a closed client');
  assert.ok(e4 instanceof dlock.UnavailableError, String(e4));
  assert.match(e4.message, /Connection is closed/);
  // A server without dlockd's commands: dlockd's -ERR for an unknown command.
  const plain = await h.redisServer();
  const e5 = await h.rejection(client(plain.port).acquire('x', { ttl: 2000 }));
  assert.ok(e5 instanceof dlock.CommandError, String(e5));
});

test('dlockd SIGKILLed mid-wait: UnavailableError within the wait', async () => {
  const { d } = await setup();
  const holderClient = client(d.port);
  const c = client(d.port);
  const name = h.unique('midwait');
  await holderClient.acquire(name, { ttl: 5000 });
  const waiting = c.acquire(name, { ttl: 5000, wait: 10000 });
  await h.sleep(300);
  const t0 = Date.now();
  d.signal('SIGKILL');
  const e = await h.within(3000 * h.SLACK, h.rejection(waiting), 'the wait');
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.ok(Date.now() - t0 < 1000 * h.SLACK);
});

test('dlockd hung mid-wait: the wait ends at wait + timeout', async () => {
  const { d } = await setup();
  const c = client(d.port, { timeout: 500 });
  const name = h.unique('hung');
  const holder = await c.acquire(name, { ttl: 5000 });
  assert.ok(holder);
  const t0 = Date.now();
  const waiting = c.acquire(name, { ttl: 5000, wait: 500 });
  await h.sleep(100);
  d.pause();
  try {
    const e = await h.within(4000 * h.SLACK, h.rejection(waiting), 'the hung wait');
    const took = Date.now() - t0;
    assert.ok(e instanceof dlock.UnavailableError, String(e));
    assert.ok(took >= 900 && took < 2000 * h.SLACK, `gave up after ${took} ms`);
  } finally {
    d.resume();
  }
});

test('the lock server down: UnavailableError', async () => {
  const { server, d } = await setup();
  const c = client(d.port);
  await server.stop();
  const calls = [
    () => c.acquire('down', { ttl: 2000 }),
    () => c.acquire('down', { ttl: 2000, detached: true }),
    () => c.acquire('down', { ttl: 2000, wait: 500 }),
    () => c.info('down'),
  ];
  for (const call of calls) {
    const e = await h.within(5000 * h.SLACK, h.rejection(call()), 'the call');
    assert.ok(e instanceof dlock.UnavailableError, String(e));
    assert.ok(!(e instanceof dlock.NoQuorumError));
    assert.match(e.message, /UNAVAILABLE/);
  }
  // dlockd itself answers, and the pool is not left with a half-made session.
  await c.ping();
});

test('two of three lock servers down: NoQuorumError', async () => {
  const servers = await Promise.all([h.redisServer(), h.redisServer(), h.redisServer()]);
  const d = await h.dlockd(servers);
  const c = client(d.port);
  const ok = await c.acquire(h.unique('quorum'), { ttl: 2000 });
  assert.equal(await ok.release(), true);
  await servers[0].stop();
  await servers[1].stop();
  const e = await h.within(5000 * h.SLACK, h.rejection(c.acquire(h.unique('quorum'), { ttl: 2000 })), 'acquire');
  assert.ok(e instanceof dlock.NoQuorumError, String(e));
  assert.ok(e instanceof dlock.UnavailableError);
});

test('a wrong password: AuthFailedError; the right one works', async () => {
  const { d } = await setup([], { DLOCKD_REQUIREPASS: 'right-one' });
  const bad = client(d.port, {}, { password: 'wrong-one', retryStrategy: () => null });
  const e = await h.within(5000, h.rejection(bad.acquire('p', { ttl: 2000 })), 'acquire');
  assert.ok(e instanceof dlock.AuthFailedError, String(e));
  const none = client(d.port, {}, { retryStrategy: () => null, enableReadyCheck: false });
  const e2 = await h.within(5000, h.rejection(none.info('p')), 'info');
  assert.ok(e2 instanceof dlock.AuthFailedError, String(e2));
  const good = client(d.port, {}, { password: 'right-one' });
  const lock = await good.acquire(h.unique('auth'), { ttl: 2000 });
  assert.equal(await lock.release(), true);
});

test('a child process killed inside using(): the lock passes on within 1 s', async () => {
  const { d } = await setup();
  const name = h.unique('child');
  const script = `
    const Redis = require('ioredis');
    const { Client } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const c = new Client(new Redis({ port: ${d.port} }));
    c.using(${JSON.stringify(name)}, { ttl: 30000 }, async () => {
      process.stdout.write('inside\\n');
      await new Promise(() => {});
    });
  `;
  const child = spawn(process.execPath, ['-e', script], {
    cwd: path.resolve(__dirname, '..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    await h.within(10000, new Promise((resolve, reject) => {
      child.stdout.on('data', (b) => b.toString().includes('inside') && resolve());
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before taking the lock`)));
    }), 'the child taking the lock');
    const c = client(d.port);
    const waiting = c.acquire(name, { ttl: 5000, wait: 30000 });
    await h.sleep(100);
    const t0 = Date.now();
    child.kill('SIGKILL');
    const lock = await h.within(30000, waiting, 'the lock passing on');
    const took = Date.now() - t0;
    assert.ok(took < 1000 * h.SLACK, `the lock passed on after ${took} ms`);
    await lock.release();
  } finally {
    child.kill('SIGKILL');
  }
});
