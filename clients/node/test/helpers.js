// The processes the tests run against: redis-server (from PATH) and dlockd ($DLOCKD), each
// on a free port, started by the test and killed at its end, and the clients the tests
// connect to them, closed first. A missing program fails the test with its name; nothing
// is skipped.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');
const { Client } = require('..');

/** Times in the tests are multiplied by this on slow machines (DLOCK_TEST_SLACK). */
const SLACK = Number(process.env.DLOCK_TEST_SLACK || '1');
if (!(SLACK > 0)) throw new Error(`DLOCK_TEST_SLACK must be a positive number, not ${process.env.DLOCK_TEST_SLACK}`);

function dlockdPath() {
  const p = process.env.DLOCKD;
  if (!p) throw new Error('$DLOCKD is not set: the dlockd binary to test against (build/dlockd)');
  if (!fs.existsSync(p)) throw new Error(`$DLOCKD (${p}) does not exist: build dlockd first`);
  return path.resolve(p);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** One process the test started. */
class Proc {
  constructor(what, cmd, args, env) {
    this.what = what;
    this.log = '';
    this.exited = false;
    this.child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.spawnError = null;
    this.child.once('error', (e) => {
      this.spawnError = e;
    });
    const keep = (b) => {
      this.log = (this.log + b.toString()).slice(-8000);
    };
    this.child.stdout.on('data', keep);
    this.child.stderr.on('data', keep);
    this.exit = new Promise((resolve) => this.child.once('exit', (code, sig) => {
      this.exited = true;
      resolve({ code, sig });
    }));
    Proc.all.add(this);
  }

  async waitPort(port) {
    const deadline = Date.now() + 10000 * SLACK;
    while (Date.now() < deadline) {
      if (this.spawnError) {
        throw new Error(`${this.what} could not be started: ${this.spawnError.message}` +
          (this.spawnError.code === 'ENOENT' ? ' (is it installed and on PATH?)' : ''));
      }
      if (this.exited) throw new Error(`${this.what} exited at start:\n${this.log}`);
      if (await canConnect(port)) return;
      await sleep(20);
    }
    throw new Error(`${this.what} did not listen on ${port} within 10 s:\n${this.log}`);
  }

  signal(sig) {
    if (!this.exited) this.child.kill(sig);
  }

  pause() {
    this.signal('SIGSTOP');
  }

  resume() {
    this.signal('SIGCONT');
  }

  async stop() {
    if (this.exited) return;
    this.signal('SIGCONT');
    this.signal('SIGKILL');
    await this.exit;
    Proc.all.delete(this);
  }
}
Proc.all = new Set();
// A test process that ends without its cleanup (an uncaught error, a runner's timeout)
// still leaves no server behind.
function killAll() {
  for (const p of Proc.all) {
    try {
      process.kill(p.child.pid, 'SIGCONT');
      process.kill(p.child.pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(sig, () => {
    killAll();
    process.exit(1);
  });
}

async function redisServer() {
  const port = await freePort();
  const p = new Proc('redis-server', 'redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no',
  ], {});
  p.port = port;
  p.url = `redis://127.0.0.1:${port}`;
  await p.waitPort(port);
  return p;
}

/** dlockd in front of `servers` (Proc or URL strings), with extra options and env. */
async function dlockd(servers, extra = [], env = {}) {
  const port = await freePort();
  const urls = servers.map((s) => (typeof s === 'string' ? s : s.url)).join(',');
  const p = new Proc('dlockd', dlockdPath(), ['-s', urls, '-p', String(port), '--shutdown-timeout', '0', ...extra], env);
  p.port = port;
  await p.waitPort(port);
  return p;
}

/** A file in a temporary directory of this test process (for passwords). */
function tempFile(name, content) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-node-'));
  const f = path.join(dir, name);
  fs.writeFileSync(f, content, { mode: 0o600 });
  Proc.tempDirs.push(dir);
  return f;
}
Proc.tempDirs = [];

const clients = new Set();

/** An ioredis client of dlockd, closed at the end of the test process. */
function redis(port, opts = {}) {
  const r = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, ...opts });
  // A failure under test is asserted on the command; keep ioredis from logging it.
  r.on('error', () => {});
  clients.add(r);
  return r;
}

const dlockClients = [];

/** `c`, a dlock Client, closed at the end of the test process (before its servers stop). */
function closedAtEnd(c) {
  dlockClients.push(c);
  return c;
}

/** A dlock Client of the dlockd at `port`, over redis(port, redisOpts), closed at the end. */
function client(port, opts = {}, redisOpts = {}) {
  return closedAtEnd(new Client(redis(port, redisOpts), opts));
}

/** A redis-server and a dlockd in front of it (with extra options and env): { server, d }. */
async function setup(extra = [], env = {}) {
  const server = await redisServer();
  const d = await dlockd([server], extra, env);
  return { server, d };
}

/** Stops everything this test process started. */
async function cleanup() {
  for (const c of dlockClients.splice(0)) await c.close();
  for (const r of clients) r.disconnect();
  clients.clear();
  await Promise.all([...Proc.all].map((p) => p.stop()));
  for (const d of Proc.tempDirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

/** Rejects when `p` takes longer than `ms`: a hang fails the test, never blocks it. */
function within(ms, p, what) {
  let t;
  const limit = new Promise((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(t));
}

/** The rejection of `p` (fails when it resolves). */
async function rejection(p) {
  let v;
  try {
    v = await p;
  } catch (e) {
    return e;
  }
  throw new Error(`expected a rejection, got ${String(v)}`);
}

/** Resolves once the lock `name` is free, as `client` (a dlock Client) asks dlockd. */
async function freed(client, name) {
  while ((await client.info(name)).state !== 'free') await sleep(20);
}

let seq = 0;
/** A lock name no other test uses. */
function unique(base) {
  seq += 1;
  return `${base}:${process.pid}:${seq}`;
}

module.exports = {
  SLACK, sleep, freed, freePort, redisServer, dlockd, setup, redis, client, closedAtEnd, cleanup, within, rejection, unique,
  tempFile, Proc,
};
