// The client: locks from dlockd over an ioredis `Redis` connected to it.

import type Redis from 'ioredis';
import * as args from './args';
import { Routine, take } from './acquire';
import { InvalidArgumentError, NotAcquiredError } from './errors';
import { Lock, runHolding } from './lock';
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
   * Closes the client's own connections: the idle ones, and those of the session locks
   * still held (dlockd releases those locks, and their signals abort). The application's
   * ioredis client stays open.
   */
  async close(): Promise<void> {
    this.pool.close();
  }

  /** How many dedicated connections are open now (idle ones included). */
  get connections(): number {
    return this.pool.size;
  }
}
