// Leader election: lead(), elect() and its Leadership, LEADER, observers, a leader
// deposed, and a leader process killed, against one redis-server and one dlockd
// started for this file.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const h = require('./helpers');
const dlock = require('..');

let server;
let d;
let shared;
let client;
const clients = [];

before(async () => {
  server = await h.redisServer();
  d = await h.dlockd([server]);
  shared = h.redis(d.port);
  client = new dlock.Client(shared);
  clients.push(client);
});

after(async () => {
  for (const c of clients) await c.close();
  await h.cleanup();
});

function another(opts = {}) {
  const c = new dlock.Client(h.redis(d.port), opts);
  clients.push(c);
  return c;
}

/** The next change an observer's iteration gives, within a few seconds. */
async function nextChange(it, what) {
  const r = await h.within(5000 * h.SLACK, it.next(), what);
  assert.equal(r.done, false, `${what}: the observation ended`);
  return r.value;
}

/** Resolves when `signal` aborts, with the time it took from `t0`. */
function aborted(signal, t0) {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(Date.now() - t0);
    signal.addEventListener('abort', () => resolve(Date.now() - t0), { once: true });
  });
}

test('lead(): the routine gets the term, LEADER shows it, the value passes through, then no one leads', async () => {
  const name = h.unique('lead');
  assert.equal(await client.leader(name), null);
  let term;
  const value = await client.lead(name, { value: '10.0.0.7:8080', ttl: 5000 }, async (signal, t, leadership) => {
    assert.ok(signal instanceof AbortSignal);
    assert.equal(signal.aborted, false);
    assert.equal(typeof t, 'number');
    assert.ok(Number.isSafeInteger(t) && t > 0, `term ${t}`);
    assert.equal(leadership.term, t);
    assert.equal(leadership.value, '10.0.0.7:8080');
    const who = await client.leader(name);
    assert.equal(who.value, '10.0.0.7:8080');
    assert.equal(who.term, t);
    assert.equal(typeof who.holder, 'string');
    assert.ok(who.remainingMs > 0 && who.remainingMs <= 5000, `remainingMs ${who.remainingMs}`);
    term = t;
    return { done: true };
  });
  assert.deepEqual(value, { done: true });
  assert.equal(await client.leader(name), null);
  // The next leader's term is larger; the options may be left out.
  assert.equal(await client.lead(name, (signal, t) => {
    assert.ok(t > term, `second term ${t} after ${term}`);
    return 7;
  }), 7);
});

test('lead(): a routine that throws resigns, and its error is passed on', async () => {
  const name = h.unique('throws');
  const boom = new Error('boom');
  const e = await h.rejection(client.lead(name, { ttl: 5000 }, async () => {
    assert.notEqual(await client.leader(name), null);
    throw boom;
  }));
  assert.equal(e, boom);
  assert.equal(await client.leader(name), null);
  assert.equal((await client.info(name)).state, 'free');
});

test('a second lead() with wait 0 while one leads: NotAcquiredError at once', async () => {
  const name = h.unique('busy');
  const other = another();
  await client.lead(name, { ttl: 5000 }, async () => {
    const t0 = Date.now();
    const e = await h.rejection(other.lead(name, { ttl: 5000, wait: 0 }, () => 'never'));
    assert.ok(e instanceof dlock.NotAcquiredError, String(e));
    assert.ok(Date.now() - t0 < 500 * h.SLACK);
    // The same client too: its campaigns are on connections of their own.
    const e2 = await h.rejection(client.lead(name, { ttl: 5000, wait: 200 }, () => 'never'));
    assert.ok(e2 instanceof dlock.NotAcquiredError, String(e2));
    assert.equal(await client.tryElect(name, { wait: 0 }), null);
  });
});

test('elect(), proclaim(), isLeading(), resign(); after resign, proclaim rejects with LockLostError', async () => {
  const name = h.unique('elect');
  const l = await client.elect(name, { value: 'a', ttl: 5000 });
  assert.ok(l instanceof dlock.Leadership);
  assert.equal(l.name, name);
  assert.match(l.token, /^[0-9a-f]{32}$/);
  assert.ok(l.term > 0);
  assert.ok(l.validityMs > 0 && l.validityMs <= 5000);
  assert.equal(l.value, 'a');
  assert.equal(await l.isLeading(), true);
  await l.proclaim('b with spaces, and ✓');
  assert.equal(l.value, 'b with spaces, and ✓');
  let who = await client.leader(name);
  assert.equal(who.value, 'b with spaces, and ✓');
  assert.equal(who.term, l.term);
  await l.proclaim('');
  assert.equal((await client.leader(name)).value, '');
  // The term is the lock's fence.
  assert.equal((await client.info(name)).fence, l.term);
  assert.deepEqual(JSON.parse(JSON.stringify(l)), { name, term: l.term, token: l.token, value: '' });
  assert.equal(await l.resign(), true);
  assert.equal(l.resigned, true);
  assert.equal(l.lost, false, 'a resignation is not a loss');
  assert.equal(await l.resign(), false);
  assert.equal(await l.isLeading(), false);
  const e = await h.rejection(l.proclaim('late'));
  assert.ok(e instanceof dlock.LockLostError, String(e));
  assert.equal(await client.leader(name), null);
  who = await client.elect(name, { ttl: 5000 });
  assert.ok(who.term > l.term);
  assert.equal(who.value, '');
  assert.equal(await who.resign(), true);
});

test('a waiting candidate leads at the resignation, with a larger term', async () => {
  const name = h.unique('handoff');
  const first = await client.elect(name, { ttl: 5000 });
  const waiting = another().elect(name, { ttl: 5000, value: 'next' });
  await h.sleep(200);
  const t0 = Date.now();
  assert.equal(await first.resign(), true);
  const next = await h.within(5000 * h.SLACK, waiting, 'the waiting candidate');
  const took = Date.now() - t0;
  assert.ok(took < 1000 * h.SLACK, `led ${took} ms after the resignation`);
  assert.ok(next.term > first.term);
  assert.equal((await client.leader(name)).value, 'next');
  assert.equal(await next.resign(), true);
});

test('a leader deposed (its lock broken by token): the signal aborts, lead() rejects with LockLostError', async () => {
  const name = h.unique('deposed');
  const t0 = Date.now();
  let reason;
  const e = await h.rejection(client.lead(name, { ttl: 1500 }, async (signal, term, leadership) => {
    assert.equal(await shared.call('UNLOCK', name, leadership.token), 1);
    const took = await h.within(5000 * h.SLACK, aborted(signal, t0), 'the abort');
    assert.ok(took < 1500 * h.SLACK, `aborted after ${took} ms`);
    reason = signal.reason;
    assert.equal(leadership.lost, true);
    const pe = await h.rejection(leadership.proclaim('still me?'));
    assert.equal(pe, reason);
    return 'done';
  }));
  assert.ok(e instanceof dlock.LockLostError, String(e));
  assert.ok(reason instanceof dlock.LockLostError);
  assert.match(reason.message, /leadership/);
  // The next campaign works (no lost connection came back from the pool).
  const again = await client.elect(name, { ttl: 2000, wait: 5000 * h.SLACK });
  assert.equal(await again.resign(), true);
});

test('a leader process SIGKILLed: a waiting candidate leads within 1 s, with a larger term', async () => {
  const name = h.unique('failover');
  const script = `
    const Redis = require('ioredis');
    const { Client } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    const c = new Client(new Redis({ port: ${d.port} }));
    c.lead(${JSON.stringify(name)}, { ttl: 10000, value: 'child' }, async (signal, term) => {
      process.stdout.write('leading ' + term + '\\n');
      await new Promise(() => {});
    });
  `;
  const child = spawn(process.execPath, ['-e', script], {
    cwd: path.resolve(__dirname, '..'),
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  try {
    const childTerm = await h.within(10000 * h.SLACK, new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (b) => {
        out += b.toString();
        const m = /leading (\d+)\n/.exec(out);
        if (m) resolve(Number(m[1]));
      });
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before leading`)));
    }), 'the child leading');
    assert.equal((await client.leader(name)).value, 'child');
    const candidate = another();
    let t0;
    const led = candidate.lead(name, { ttl: 10000, value: 'parent' }, async (signal, term) => {
      return { term, took: Date.now() - t0, who: await candidate.leader(name) };
    });
    await h.sleep(200);
    t0 = Date.now();
    child.kill('SIGKILL');
    const r = await h.within(10000 * h.SLACK, led, 'the candidate leading');
    assert.ok(r.took < 1000 * h.SLACK, `the candidate led ${r.took} ms after the kill`);
    assert.ok(r.term > childTerm, `term ${r.term} after ${childTerm}`);
    assert.equal(r.who.value, 'parent');
    assert.equal(r.who.term, r.term);
  } finally {
    child.kill('SIGKILL');
  }
});

test('observe(): the state now, then each change in order, terms never decreasing', async () => {
  const name = h.unique('observe');
  const obs = client.observe(name);
  assert.ok(obs instanceof dlock.Observer);
  const it = obs[Symbol.asyncIterator]();
  const events = [];
  obs.on('change', (c) => events.push(c));
  assert.deepEqual(await nextChange(it, 'the state at the start'), { term: 0, value: null });
  assert.deepEqual(obs.current, { term: 0, value: null });
  const a = await client.elect(name, { value: 'a', ttl: 5000 });
  assert.deepEqual(await nextChange(it, 'a elected'), { term: a.term, value: 'a' });
  await a.proclaim('a2 with spaces');
  assert.deepEqual(await nextChange(it, 'a proclaiming'), { term: a.term, value: 'a2 with spaces' });
  assert.equal(await a.resign(), true);
  assert.deepEqual(await nextChange(it, 'a resigned'), { term: 0, value: null });
  const b = await client.elect(name, { value: 'b', ttl: 5000 });
  const cb = await nextChange(it, 'b elected');
  assert.deepEqual(cb, { term: b.term, value: 'b' });
  assert.ok(b.term > a.term);
  // The emitter heard the same changes, and the leaders' terms never went down.
  assert.deepEqual(events.map((c) => c.value), [null, 'a', 'a2 with spaces', null, 'b']);
  const terms = events.filter((c) => c.value !== null).map((c) => c.term);
  for (let i = 1; i < terms.length; i++) assert.ok(terms[i] >= terms[i - 1], `terms ${terms}`);
  // A second observer starts with the leader now.
  const again = client.observe(name);
  assert.deepEqual(await nextChange(again, 'the second observer'), { term: b.term, value: 'b' });
  await again.close();
  assert.equal(await b.resign(), true);
  assert.deepEqual(await nextChange(it, 'b resigned'), { term: 0, value: null });
  await obs.close();
  assert.equal(obs.closed, true);
  assert.deepEqual(await it.next(), { value: undefined, done: true });
});

test('observe(): for-await, break closes it; a signal ends it; client.close() ends the rest', async () => {
  const name = h.unique('loop');
  const c = another();
  const l = await client.elect(name, { value: 'x', ttl: 5000 });
  const seen = [];
  const obs = c.observe(name);
  let closed = false;
  obs.once('close', () => {
    closed = true;
  });
  for await (const change of obs) {
    seen.push(change);
    break;
  }
  assert.deepEqual(seen, [{ term: l.term, value: 'x' }]);
  assert.equal(closed, true);
  assert.equal(obs.closed, true);

  const ac = new AbortController();
  const watched = c.observe(name, { signal: ac.signal });
  const loop = (async () => {
    const got = [];
    for await (const change of watched) got.push(change);
    return got;
  })();
  await h.sleep(200);
  ac.abort();
  const e = await h.within(2000 * h.SLACK, h.rejection(loop), 'the aborted observation');
  assert.equal(e.name, 'AbortError');

  const left = c.observe(name);
  assert.equal((await nextChange(left, 'the state')).value, 'x');
  const pending = left.next();
  await c.close();
  assert.deepEqual(await h.within(2000, pending, 'the end at close()'), { value: undefined, done: true });
  assert.equal(left.closed, true);
  assert.equal(await l.resign(), true);
});

test('observe(): its connection killed, it reconnects and hears the state again', async () => {
  const admin = h.tempFile('admin.pass', 'admin-secret\n');
  const own = await h.dlockd([server], ['--admin-pass-file', admin]);
  const watcher = new dlock.Client(h.redis(own.port, { connectionName: 'watcher' }));
  const leaderClient = new dlock.Client(h.redis(own.port));
  clients.push(watcher, leaderClient);
  const op = h.redis(own.port, { username: 'admin', password: 'admin-secret' });
  const name = h.unique('reconnect');
  const l = await leaderClient.elect(name, { value: 'a', ttl: 5000 });
  const obs = watcher.observe(name);
  assert.deepEqual(await nextChange(obs, 'the state'), { term: l.term, value: 'a' });
  const ids = String(await op.call('CLIENT', 'LIST'))
    .split('\n')
    .filter((line) => / name=watcher /.test(line))
    .map((line) => /^id=(\d+)/.exec(line)[1]);
  assert.ok(ids.length >= 1, 'no connection named watcher');
  for (const id of ids) await op.call('CLIENT', 'KILL', 'ID', id);
  // A change while it reconnects (or just after): heard once subscribed again, and the
  // state it had already is not given twice.
  await l.proclaim('b');
  assert.deepEqual(await nextChange(obs, 'the change after the kill'), { term: l.term, value: 'b' });
  assert.equal(await l.resign(), true);
  assert.deepEqual(await nextChange(obs, 'the resignation'), { term: 0, value: null });
  await obs.close();
  await own.stop();
});

test('observe() without dlockd: UnavailableError within its timeout', async () => {
  const port = await h.freePort();
  const off = new dlock.Client(h.redis(port, { lazyConnect: true, retryStrategy: () => 100 }));
  clients.push(off);
  const obs = off.observe('nobody', { timeout: 300 });
  const errors = [];
  obs.on('error', (e) => errors.push(e));
  const t0 = Date.now();
  const e = await h.within(3000 * h.SLACK, h.rejection(obs.next()), 'the failed observation');
  assert.ok(e instanceof dlock.UnavailableError, String(e));
  assert.ok(Date.now() - t0 < 1500 * h.SLACK);
  assert.equal(errors.length, 1);
  assert.deepEqual(await obs.next(), { value: undefined, done: true });
});

test('argument checks: ttl below 1000, a long value, unknown options, no routine', async () => {
  const name = h.unique('args');
  const bad = [
    { ttl: 999 },
    { ttl: 1.5 },
    { value: 'v'.repeat(1025) },
    { value: 'a\0b' },
    { value: 42 },
    { wait: -1 },
    { maxHold: 5000 },
    { detached: true },
    { fair: 'yes' },
  ];
  for (const opts of bad) {
    const e = await h.rejection(client.elect(name, opts));
    assert.ok(e instanceof dlock.InvalidArgumentError, `${JSON.stringify(opts)}: ${e}`);
    const e2 = await h.rejection(client.lead(name, opts, () => 1));
    assert.ok(e2 instanceof dlock.InvalidArgumentError, `lead ${JSON.stringify(opts)}: ${e2}`);
  }
  assert.ok((await h.rejection(client.lead(name, { ttl: 5000 }))) instanceof dlock.InvalidArgumentError);
  assert.ok((await h.rejection(client.elect('', {}))) instanceof dlock.InvalidArgumentError);
  assert.ok((await h.rejection(client.leader('a\0b'))) instanceof dlock.InvalidArgumentError);
  assert.throws(() => client.observe(name, { timeout: 0 }), dlock.InvalidArgumentError);
  assert.throws(() => client.observe(name, { every: 1 }), dlock.InvalidArgumentError);
  const l = await client.elect(name, { ttl: 5000, value: 'v'.repeat(1024), fair: true, label: 'test' });
  await assert.rejects(l.proclaim('v'.repeat(1025)), dlock.InvalidArgumentError);
  assert.equal((await client.leader(name)).value.length, 1024);
  assert.equal(await l.resign(), true);
  assert.equal(client.connections <= 8, true);
});
