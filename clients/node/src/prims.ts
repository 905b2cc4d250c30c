// Semaphores (SEM ACQUIRE, a permit per holder) and a SKU's stock with leased
// reservations (STOCK ...), over the same connection rules as locks.

import * as args from './args';
import { Routine, onDedicated, take } from './acquire';
import type { Client } from './client';
import { InvalidArgumentError, NotAcquiredError, OutOfStockError, StockState } from './errors';
import { Lock, runHolding } from './lock';
import { Pool } from './pool';

/** A semaphore's defaults for its acquire() options. */
export type SemaphoreOptions = Omit<args.AcquireOptions, 'shared' | 'signal'>;

/**
 * The semaphore `name` of `permits` permits: at most that many holders at once. A
 * permit is a Lock (release, extend, isHeld, signal), a session permit unless detached.
 * K >= 2 needs dlockd in front of one lock server.
 */
export class Semaphore {
  readonly name: string;

  /** @internal */
  constructor(
    private readonly client: Client,
    private readonly nameBytes: string | Buffer,
    readonly permits: number,
    private readonly defaults: SemaphoreOptions,
  ) {
    this.name = args.text(nameBytes);
    // Checked now, so that a bad default fails here rather than at each acquire.
    args.acquireCommand(['SEM'], this.defaults, client.defaults);
  }

  private merged(opts: args.AcquireOptions): args.AcquireOptions {
    if (opts === null || typeof opts !== 'object') {
      throw new InvalidArgumentError('dlock: the options must be an object ({ttl, wait, ...})');
    }
    if (opts.shared !== undefined) {
      throw new InvalidArgumentError('dlock: a permit is a shared holder already: no shared option');
    }
    return { ...this.defaults, ...opts };
  }

  /** A permit, or null when none was free within the wait. */
  async tryAcquire(opts: args.AcquireOptions = {}): Promise<Lock | null> {
    const o = this.merged(opts);
    const head = ['SEM', 'ACQUIRE', this.nameBytes, String(this.permits)];
    const cmd = args.acquireCommand(head, o, this.client.defaults);
    return take(this.client.pool, cmd, this.nameBytes, 'permit of semaphore', o);
  }

  /** A permit, or NotAcquiredError when none was free within the wait. */
  async acquire(opts: args.AcquireOptions = {}): Promise<Lock> {
    const permit = await this.tryAcquire(opts);
    if (permit === null) {
      const w = args.waitText(args.wait(this.merged(opts).wait ?? 0));
      throw new NotAcquiredError(`dlock: no permit of semaphore '${this.name}' (${this.permits} permits) free within ${w}`);
    }
    return permit;
  }

  /** As Client.using(), with a permit. */
  using<T>(routine: Routine<T>): Promise<T>;
  using<T>(opts: args.AcquireOptions, routine: Routine<T>): Promise<T>;
  async using<T>(a: args.AcquireOptions | Routine<T>, b?: Routine<T>): Promise<T> {
    const [opts, routine] = typeof a === 'function' ? [{}, a] : [a, b];
    if (typeof routine !== 'function') {
      throw new InvalidArgumentError('dlock: using() needs a routine: using({ttl, wait}, async (signal) => ...)');
    }
    return runHolding(await this.acquire(opts), routine);
  }
}

/**
 * A reservation of units of a SKU, leased: commit() sells them, cancel() puts them back,
 * extend() renews the lease; one nobody settles gives its units back when it runs out.
 * Not tied to a connection: commit it from anywhere, with its id.
 */
export class Reservation {
  readonly sku: string;
  /** True once commit() or cancel() was called. */
  settled = false;

  /** @internal */
  constructor(
    private readonly pool: Pool,
    private readonly skuBytes: string | Buffer,
    /** 32 hex characters. */
    readonly id: string,
    /** The units reserved (null for one adopted by id). */
    readonly qty: number | null,
  ) {
    this.sku = args.text(skuBytes);
  }

  private async call(sub: string, ...extra: string[]): Promise<boolean> {
    const reply = await this.pool.call(['STOCK', sub, this.skuBytes, this.id, ...extra]);
    return args.bool(reply, `STOCK ${sub}`);
  }

  /** Sells the units: true (again true if repeated), false when the reservation was lost. */
  async commit(): Promise<boolean> {
    const ok = await this.call('COMMIT');
    this.settled = true;
    return ok;
  }

  /** Puts the units back: true, or false when it was lost (or settled) already. */
  async cancel(): Promise<boolean> {
    const ok = await this.call('CANCEL');
    this.settled = true;
    return ok;
  }

  /** Sets the lease to `lease` ms from now: true, or false when it was lost. */
  async extend(lease: number): Promise<boolean> {
    return this.call('EXTEND', String(args.ttl(lease, false, 'lease')));
  }
}

/** The options of Stock.reserve(). */
export interface ReserveOptions {
  /** The reservation's lease in ms (default 30000). */
  lease?: number;
  /** ms to wait for units (default 0: answer at once; Infinity: no end). */
  wait?: number;
  /** Cancels the wait: a reservation granted as it closes is canceled. */
  signal?: AbortSignal;
  /** ms allowed beyond the wait for dlockd to answer (default: the client's timeout). */
  timeout?: number;
}

const RESERVE_OPTIONS: ReadonlySet<string> = new Set(['lease', 'wait', 'signal', 'timeout']);

/** A SKU's counted stock: set, add, status, and reservations. */
export class Stock {
  readonly sku: string;

  /** @internal */
  constructor(
    private readonly pool: Pool,
    private readonly skuBytes: string | Buffer,
  ) {
    this.sku = args.text(skuBytes);
  }

  /** STOCK CANCEL of a reservation nobody will have (its call was given up). */
  private cancelLate(): (reply: unknown) => void {
    return (reply) => {
      if (typeof reply !== 'string' || !/^[0-9a-f]{32}$/.test(reply)) return;
      this.pool.call(['STOCK', 'CANCEL', this.skuBytes, reply]).catch(() => undefined);
    };
  }

  private async state(sub: string, ...extra: string[]): Promise<StockState> {
    const reply = await this.pool.call(['STOCK', sub, this.skuBytes, ...extra]);
    return args.stockState(reply, `STOCK ${sub}`);
  }

  /** Sets the stock to `qty` units, sold and reserved ones included. */
  async set(qty: number): Promise<StockState> {
    return this.state('SET', String(args.qty(qty, 'qty', 0)));
  }

  /** Adds `delta` units (negative takes available units away). */
  async add(delta: number): Promise<StockState> {
    return this.state('ADD', String(args.delta(delta)));
  }

  /** The SKU's state (all zeros for one never set). */
  async status(): Promise<StockState> {
    return this.state('STATUS');
  }

  /**
   * Reserves `qty` units, all or none: a Reservation, or OutOfStockError when they could
   * not be had within the wait (whose `soldOut` says whether they ever could).
   */
  async reserve(qty: number, opts: ReserveOptions = {}): Promise<Reservation> {
    if (opts === null || typeof opts !== 'object') {
      throw new InvalidArgumentError('dlock: the options must be an object ({lease, wait})');
    }
    args.known(opts, RESERVE_OPTIONS, 'reserve()');
    const n = args.qty(qty);
    const cmd = ['STOCK', 'RESERVE', this.skuBytes, String(n), 'TTL', String(args.ttl(opts.lease ?? args.DEFAULT_TTL, false, 'lease'))];
    const waitMs = args.wait(opts.wait ?? 0);
    const timeoutMs = opts.timeout === undefined ? this.pool.timeoutMs : args.duration(opts.timeout, 'timeout');
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
      throw new InvalidArgumentError('dlock: signal must be an AbortSignal');
    }
    let reply: unknown;
    if (waitMs === 0) {
      reply = await this.pool.call(cmd, 0, opts.signal, this.cancelLate(), timeoutMs);
      if (opts.signal?.aborted) {
        // Cancelled as the reservation came: nobody will have it.
        this.cancelLate()(reply);
        throw opts.signal.reason;
      }
    } else {
      // A waiting RESERVE blocks its connection: one of its own, as a waiting LOCK. A
      // reservation is not tied to the connection, which goes back clean either way.
      const got = await onDedicated(this.pool, {
        build: (w) => (w === 0 ? cmd : [...cmd, 'WAIT', String(w)]),
        waitMs,
        timeoutMs,
        signal: opts.signal,
        retry: true,
        onLate: this.cancelLate(),
      });
      this.pool.give(got.conn, true);
      reply = got.reply;
    }
    const id = args.reservationId(reply);
    if (id !== null) return new Reservation(this.pool, this.skuBytes, id, n);
    const state = await this.status();
    const unsold = state.stock - state.sold;
    if (n > unsold) {
      throw new OutOfStockError(`dlock: SKU '${this.sku}' is sold out: ${n} unit(s) asked, ${unsold} of ${state.stock} not sold`, true, state);
    }
    throw new OutOfStockError(
      `dlock: SKU '${this.sku}': ${n} unit(s) asked, ${state.available} available, ${state.reserved} reserved by other buyers at the moment`,
      false,
      state,
    );
  }

  /** A reservation made elsewhere, from its id, to commit, cancel or extend here. */
  reservation(id: string): Reservation {
    return new Reservation(this.pool, this.skuBytes, args.token(id, 'a reservation id'), null);
  }
}
