// The client: locks from dlockd over an ioredis `Redis` connected to it.

import type Redis from 'ioredis';
import * as args from './args';
import { Routine, take } from './acquire';
import { Leadership, LeadRoutine, runLeading } from './elect';
import { InvalidArgumentError, NotAcquiredError, UnavailableError } from './errors';
import { Lock, runHolding } from './lock';
import { ObserveOptions, Observer } from './observe';
import { Pool } from './pool';
import { Semaphore, SemaphoreOptions, Stock } from './prims';

export interface ClientOptions {
  /**
   * ms allowed for dlockd to answer beyond any wait, and to connect a lock's own
   * connection (default 5000). A reply that does not come in time is an
   * UnavailableError, and the connection that waited for it is closed.
   */
  timeout?: number;
  /** How many idle dedicated connections are kept for reuse (default 8). */
  maxIdle?: number;
  /** The MAXHOLD (ms) of every session lock whose options give none. */
  maxHold?: number;
  /** The LABEL of every lock whose options give none: who holds it, to operators. */
  label?: string;
}

const CLIENT_OPTIONS: ReadonlySet<string> = new Set(['timeout', 'maxIdle', 'maxHold', 'label']);

/** The default of ClientOptions.timeout, in ms. */
export const DEFAULT_TIMEOUT = 5000;

export class Client {
  /** The application's ioredis client, connected to dlockd. */
  readonly redis: Redis;
  /** @internal */
  readonly pool: Pool;
  /** @internal */
  readonly defaults: { maxHold?: number; label?: string };
  private readonly observers = new Set<Observer>();

  /**
   * `redis`: an ioredis `Redis` connected to dlockd (not to a lock server), with its
   * password if dlockd has one. It stays the application's: close() leaves it open.
   */
  constructor(redis: Redis, options: ClientOptions = {}) {
    const r = redis as unknown as { duplicate?: unknown; call?: unknown; isCluster?: boolean };
    if (r === null || typeof r !== 'object' || typeof r.duplicate !== 'function' || typeof r.call !== 'function' || r.isCluster) {
      throw new InvalidArgumentError('dlock: Client takes an ioredis Redis connected to dlockd');
    }
    if (options === null || typeof options !== 'object') {
      throw new InvalidArgumentError('dlock: the client options must be an object');
    }
    args.known(options, CLIENT_OPTIONS, 'the client');
    const timeout = args.duration(options.timeout ?? DEFAULT_TIMEOUT, 'timeout');
    const maxIdle = options.maxIdle ?? 8;
    if (!Number.isInteger(maxIdle) || maxIdle < 0) {
      throw new InvalidArgumentError('dlock: maxIdle must be an integer >= 0');
    }
    this.defaults = {};
    if (options.maxHold !== undefined) this.defaults.maxHold = args.duration(options.maxHold, 'maxHold');
    if (options.label !== undefined) {
      args.label(options.label);
      this.defaults.label = options.label;
    }
    this.redis = redis;
    this.pool = new Pool(redis, timeout, maxIdle);
  }

  /**
   * The lock `name`: resolves to a Lock, or rejects with NotAcquiredError when another
   * holder kept it through the wait. `ttl` and `wait` are ms (defaults 30000 and 0;
   * `wait: Infinity` waits without end).
   */
  async acquire(name: args.Name, opts: args.AcquireOptions = {}): Promise<Lock> {
    const lock = await this.tryAcquire(name, opts);
    if (lock === null) {
      throw new NotAcquiredError(
        `dlock: lock '${args.text(args.name(name))}' not acquired within ${args.waitText(args.wait(opts.wait ?? 0))}`,
      );
    }
    return lock;
  }

  /** As acquire(), but resolves to null when not acquired within the wait. */
  async tryAcquire(name: args.Name, opts: args.AcquireOptions = {}): Promise<Lock | null> {
    const raw = args.name(name);
    const cmd = args.acquireCommand(['LOCK', raw], opts, this.defaults);
    return take(this.pool, cmd, raw, 'lock', opts);
  }

  /**
   * Runs `routine(signal, lock)` holding the lock `name`, releases it however the
   * routine ends, and returns the routine's value. `signal` aborts when the lock is lost;
   * then using() rejects with LockLostError after the routine (unless the routine threw).
   * NotAcquiredError when not acquired within the wait.
   */
  using<T>(name: args.Name, routine: Routine<T>): Promise<T>;
  using<T>(name: args.Name, opts: args.AcquireOptions, routine: Routine<T>): Promise<T>;
  async using<T>(name: args.Name, a: args.AcquireOptions | Routine<T>, b?: Routine<T>): Promise<T> {
    const [opts, routine] = typeof a === 'function' ? [{}, a] : [a, b];
    if (typeof routine !== 'function') {
      throw new InvalidArgumentError('dlock: using() needs a routine: using(name, {ttl, wait}, async (signal) => ...)');
    }
    const lock = await this.acquire(name, opts);
    return runHolding(lock, routine);
  }

  /**
   * Campaigns to lead the election `name`: resolves to a Leadership (its term, token,
   * value; proclaim(), isLeading(), resign()), or rejects with NotAcquiredError when
   * another led through the wait. The wait defaults to Infinity (a candidate stands by
   * until it leads). The leadership is a session lock on a connection of its own:
   * resigned by dlockd the moment that connection closes, so resign() it, or use lead().
   */
  async elect(name: args.Name, opts: args.ElectOptions = {}): Promise<Leadership> {
    const l = await this.tryElect(name, opts);
    if (l === null) {
      throw new NotAcquiredError(
        `dlock: not elected leader of '${args.text(args.name(name, 'election name'))}' within ${args.waitText(args.wait(opts.wait ?? Infinity))}`,
      );
    }
    return l;
  }

  /** As elect(), but resolves to null when another led through the wait. */
  async tryElect(name: args.Name, opts: args.ElectOptions = {}): Promise<Leadership | null> {
    const raw = args.name(name, 'election name');
    const cmd = args.electCommand(raw, opts, this.defaults);
    const lock = await take(this.pool, cmd, raw, 'leadership', opts);
    return lock === null ? null : new Leadership(lock, raw, opts.value ?? '');
  }

  /**
   * Campaigns for `name`, runs `routine(signal, term, leadership)` while leading,
   * resigns however the routine ends, and returns the routine's value. `signal` aborts
   * when the leadership is lost; then lead() rejects with LockLostError after the
   * routine (unless the routine threw). NotAcquiredError when not elected within the
   * wait (default: none).
   */
  lead<T>(name: args.Name, routine: LeadRoutine<T>): Promise<T>;
  lead<T>(name: args.Name, opts: args.ElectOptions, routine: LeadRoutine<T>): Promise<T>;
  async lead<T>(name: args.Name, a: args.ElectOptions | LeadRoutine<T>, b?: LeadRoutine<T>): Promise<T> {
    const [opts, routine] = typeof a === 'function' ? [{}, a] : [a, b];
    if (typeof routine !== 'function') {
      throw new InvalidArgumentError('dlock: lead() needs a routine: lead(name, {value, ttl}, async (signal, term) => ...)');
    }
    return runLeading(await this.elect(name, opts), routine);
  }

  /** Who leads the election `name` now (LEADER), or null when no one does. */
  async leader(name: args.Name): Promise<args.LeaderInfo | null> {
    return args.leaderInfo(await this.pool.call(['LEADER', args.name(name, 'election name')]));
  }

  /**
   * Observes the election `name`: an async iterable (and EventEmitter) of its changes,
   * `{ term, value }` (term 0 and value null when no one leads), starting with the
   * state now. It subscribes on a connection of its own (a duplicate of the client's);
   * leaving a for-await loop over it, or close(), unsubscribes and closes it.
   */
  observe(name: args.Name, opts: ObserveOptions = {}): Observer {
    const raw = args.name(name, 'election name');
    Observer.options(opts);
    if (this.pool.isClosed) throw new UnavailableError('dlock: the client is closed');
    const o = new Observer(this.redis, raw, opts, opts.timeout ?? this.pool.timeoutMs, (x) => this.observers.delete(x));
    this.observers.add(o);
    return o;
  }

  /** The semaphore `name` of `permits` permits (every user of the name should agree). */
  semaphore(name: args.Name, permits: number, defaults: SemaphoreOptions = {}): Semaphore {
    return new Semaphore(this, args.name(name, 'semaphore name'), args.permits(permits), defaults);
  }

  /** The stock of a SKU, with leased reservations. */
  stock(sku: args.Name): Stock {
    return new Stock(this.pool, args.name(sku, 'SKU'));
  }

  /** LOCKINFO: who holds `name`, the lease left, the last fence. */
  async info(name: args.Name): Promise<args.LockInfo> {
    return args.info(await this.pool.call(['LOCKINFO', args.name(name)]));
  }

  /**
   * A detached lock (or permit) taken elsewhere, from its token, to release, extend or
   * check it here.
   */
  adopt(name: args.Name, token: string, fence = 0): Lock {
    const grant = { token: args.token(token), fence: args.fence(fence), validityMs: 0 };
    return new Lock(this.pool, args.name(name), grant, true, null, 'lock');
  }

  /** Sends PING on the shared connection: UnavailableError or AuthFailedError now. */
  async ping(): Promise<void> {
    await this.pool.call(['PING']);
  }

  /**
   * Closes the client's own connections: the idle ones, those of the session locks and
   * leaderships still held (dlockd releases them, and their signals abort), and the
   * observers'. The application's ioredis client stays open.
   */
  async close(): Promise<void> {
    this.pool.close();
    for (const o of [...this.observers]) o.end();
  }

  /** How many dedicated connections are open now (idle ones included). */
  get connections(): number {
    return this.pool.size;
  }
}
