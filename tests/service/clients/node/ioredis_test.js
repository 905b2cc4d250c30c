// dlockd through ioredis (npm, the exact version in package.json and package-lock.json,
// installed by tools/ensure-deps.sh with `npm ci`), as a Node program would use it:
// call() for the lock commands, the client's own ready check (INFO, which must say
// loading:0) and CLIENT SETNAME on connect.
// Usage: node ioredis_test.js PORT. Exit 0 when every check held, 1 otherwise.
'use strict';

const assert = require('node:assert/strict');
const Redis = require('ioredis');

const port = Number(process.argv[2]);
const WAIT_MS = 8000;

function client(name) {
  return new Redis({
    host: '127.0.0.1',
    port,
    connectionName: name,
    // The ready check: ioredis sends INFO and waits for loading:0 before any command.
    enableReadyCheck: true,
    // A waiting LOCK answers only when served or WAIT runs out: the command timeout
    // must exceed WAIT, or the client gives up on a reply that is still coming.
    commandTimeout: WAIT_MS + 5000,
    // A failure here must fail the test, not be retried behind its back.
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
}

function ready(c) {
  if (c.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    c.once('ready', resolve);
    c.once('error', reject);
    c.once('end', () => reject(new Error('connection ended before ready')));
  });
}

function fields(pairs) {
  const m = {};
  for (let i = 0; i + 1 < pairs.length; i += 2) m[pairs[i]] = pairs[i + 1];
  return m;
}

function expectLock(r, ttl) {
  assert.ok(Array.isArray(r) && r.length === 3, `LOCK reply: ${JSON.stringify(r)}`);
  const [token, fence, validity] = r;
  assert.match(token, /^[0-9a-f]{32}$/);
  assert.ok(Number.isSafeInteger(fence) && fence >= 1, `fence ${fence}`);
  assert.ok(validity > 0 && validity <= ttl, `validity ${validity}`);
  return { token, fence };
}

async function main() {
  // The version package.json pins, not whatever an older install left behind.
  assert.equal(require('ioredis/package.json').version, require('./package.json').dependencies.ioredis);
  const a = client('ioredis-a');
  const b = client('ioredis-b');
  await Promise.all([ready(a), ready(b)]);
  assert.equal(a.status, 'ready');
  assert.equal(await a.ping(), 'PONG');
  assert.equal(await a.client('GETNAME'), 'ioredis-a');
  assert.match(await a.info(), /\r\nloading:0\r\n/);

  // LOCK, a second connection refused at once, LOCKINFO.
  const held = expectLock(await a.call('LOCK', 'node:name', 'TTL', '5000', 'LABEL', 'ioredis'), 5000);
  assert.equal(await b.call('LOCK', 'node:name'), null);
  const info = fields(await b.call('LOCKINFO', 'node:name'));
  assert.equal(info.state, 'held');
  // Who holds it: the LABEL, the client's address, and the dlockd.
  assert.match(info.holder, /^ioredis 127\.0\.0\.1:\d+ via dlockd \S+:\d+$/);
  assert.equal(info.fence, held.fence);
  assert.ok(info.remaining_ms > 0 && info.remaining_ms <= 5000, `remaining_ms ${info.remaining_ms}`);

  // A blocked LOCK on b, served by a's UNLOCK.
  let servedAt = 0;
  const waiting = b.call('LOCK', 'node:name', 'WAIT', String(WAIT_MS)).then((r) => {
    servedAt = performance.now();
    return r;
  });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(servedAt, 0, 'the waiter was served while the lock was held');
  const unlockedAt = performance.now();
  assert.equal(await a.call('UNLOCK', 'node:name', held.token), 1);
  const next = expectLock(await waiting, 30000);
  assert.ok(next.fence > held.fence, `fence ${next.fence} after ${held.fence}`);
  console.log(`FIG dlockd_ioredis_handoff_ms ${(servedAt - unlockedAt).toFixed(1)} ms`);
  assert.equal(await a.call('UNLOCK', 'node:name', held.token), 0);
  assert.equal(await b.call('UNLOCK', 'node:name', next.token), 1);
  assert.equal(fields(await a.call('LOCKINFO', 'node:name')).state, 'free');

  // Errors reject with the client's ReplyError.
  await assert.rejects(a.call('LOCK', 'node:name', 'TTL', '1'), (e) => {
    assert.equal(e.name, 'ReplyError');
    assert.match(e.message, /^ERR TTL must be/);
    return true;
  });

  // A session lock goes with its connection: a quits, b's wait is served.
  const session = expectLock(await a.call('LOCK', 'node:session'), 30000);
  let quitAt = 0;
  const waiting2 = b.call('LOCK', 'node:session', 'WAIT', String(WAIT_MS));
  await new Promise((r) => setTimeout(r, 200));
  quitAt = performance.now();
  assert.equal(await a.quit(), 'OK');
  const after = expectLock(await waiting2, 30000);
  const passedMs = performance.now() - quitAt;
  assert.ok(after.fence > session.fence);
  console.log(`FIG dlockd_ioredis_wait_after_quit_ms ${passedMs.toFixed(1)} ms`);
  assert.equal(await b.call('UNLOCK', 'node:session', after.token), 1);

  // A pipeline of lock commands: replies in order.
  const p = b.pipeline();
  for (let i = 0; i < 100; i++) p.call('LOCK', `node:p${i}`, 'DETACHED', 'TTL', '10000');
  const replies = await p.exec();
  assert.equal(replies.length, 100);
  const tokens = replies.map(([err, r], i) => {
    assert.equal(err, null, `pipelined LOCK ${i}: ${err}`);
    return expectLock(r, 10000).token;
  });
  const q = b.pipeline();
  tokens.forEach((t, i) => q.call('UNLOCK', `node:p${i}`, t));
  assert.deepEqual((await q.exec()).map(([, r]) => r), new Array(100).fill(1));
  b.disconnect();
  console.log('ioredis: all checks passed');
}

const deadline = setTimeout(() => {
  console.error('ioredis: FAILED: no result within 30 s');
  process.exit(1);
}, 30000);
main().then(
  () => {
    clearTimeout(deadline);
    process.exit(0);
  },
  (e) => {
    console.error(`ioredis: FAILED: ${e.stack || e}`);
    process.exit(1);
  },
);
