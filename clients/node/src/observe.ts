// Observing an election: SUBSCRIBE leader:NAME on a connection of the observer's own
// (a subscribed connection takes no other command), each message a change of leader or
// value. An Observer is both an async iterable of the changes and an EventEmitter.

import { EventEmitter } from 'node:events';
import type Redis from 'ioredis';
import * as args from './args';
import { InvalidArgumentError, UnavailableError, mapError } from './errors';
import { bounded, onAbort, timer } from './pool';

/** The options of observe(). */
export interface ObserveOptions {
  /** Ends the observation: an iteration throws the signal's reason. */
  signal?: AbortSignal;
  /** ms allowed for the first state to come, connecting included (default: the client's timeout). */
  timeout?: number;
}

const OBSERVE_OPTIONS: ReadonlySet<string> = new Set(['signal', 'timeout']);

// What the observer's connection overrides in the application's options. It is
// subscribed again here at each 'ready' rather than by ioredis, which would drop a
// refusal of the subscription (dlockd's -UNAVAILABLE when its lock servers cannot be
// read) and leave a connection that hears nothing. It reconnects as the application's
// client does: dlockd sends the state again with the new subscription.
const SUBSCRIBER = {
  lazyConnect: true,
  autoResubscribe: false,
  autoResendUnfulfilledCommands: false,
  commandTimeout: undefined,
  enableAutoPipelining: false,
  keepAlive: 10000,
  disableClientInfo: true,
} as const;

interface Pending {
  resolve: (r: IteratorResult<args.LeaderChange>) => void;
  reject: (e: unknown) => void;
}

/** The events of an Observer. */
export interface ObserverEvents {
  /** A change of leader or value; the first is the state at the start. */
  change: [args.LeaderChange];
  /** The observation ended with a failure (emitted only when somebody listens). */
  error: [Error];
  /** The observation ended, closed or failed. */
  close: [];
}

/**
 * Who leads an election, as it changes: `{ term, value }`, term 0 and value null when no
 * one leads. The first change is the state when the observation starts; then one per
 * change of leader or value, in term order: a leader's term is never smaller than an
 * earlier leader's (a state older than one already heard is dropped), and a state is
 * never given twice in a row. After a reconnection the changes missed are summed up by
 * the state dlockd sends again.
 *
 *   for await (const { term, value } of client.observe('scheduler')) { ... }
 *
 * Leaving the loop (break, return, a throw) closes the observer, as it does a stream.
 * As an EventEmitter: 'change', 'error' (only to listeners: an iteration gets the
 * error as its rejection), 'close'; close() ends it.
 */
export class Observer extends EventEmitter<ObserverEvents> implements AsyncIterableIterator<args.LeaderChange> {
  /** The election's name, as a string. */
  readonly name: string;
  private readonly channel: string | Buffer;
  private readonly channelBytes: Buffer;
  private readonly conn: Redis;
  private last: args.LeaderChange | undefined;
  private highest = 0;
  private iterating = false;
  private readonly queue: args.LeaderChange[] = [];
  private readonly pending: Pending[] = [];
  // null while observing; then what the iteration is still to throw (undefined: none).
  private ended: { error: unknown } | null = null;
  private closeEmitted = false;
  private closing: Promise<void> | null = null;
  private stopFirst: (() => void) | null = null;
  private stopSignal: (() => void) | null = null;
  private lastError: unknown;

  /** @internal */
  constructor(
    shared: Redis,
    raw: string | Buffer,
    opts: ObserveOptions,
    private readonly timeoutMs: number,
    private readonly onEnd: (o: Observer) => void,
  ) {
    super();
    this.name = args.text(raw);
    this.channel = typeof raw === 'string' ? `leader:${raw}` : Buffer.concat([Buffer.from('leader:'), raw]);
    this.channelBytes = args.bytes(this.channel);
    this.conn = shared.duplicate(SUBSCRIBER);
    const conn = this.conn;
    conn.on('messageBuffer', (ch: Buffer, payload: Buffer) => {
      if (this.channelBytes.equals(ch)) this.hear(payload);
    });
    conn.on('ready', () => this.subscribe());
    conn.on('error', (e: unknown) => {
      this.lastError = e;
    });
    conn.on('end', () => {
      // ioredis gave up reconnecting (the application's retryStrategy said so).
      const why = this.lastError instanceof Error ? ` (${this.lastError.message})` : '';
      this.fail(new UnavailableError(`dlock: the observer of '${this.name}' lost its connection to dlockd${why}`));
    });
    // The first state must come within the timeout: a dlockd that cannot be reached is
    // an error now rather than an iteration that waits for ever.
    this.stopFirst = timer(timeoutMs, () => {
      const why = this.lastError instanceof Error ? ` (${mapError(this.lastError).error.message})` : '';
      this.fail(new UnavailableError(`dlock: no state of election '${this.name}' from dlockd within ${timeoutMs} ms${why}`));
    });
    const signal = opts.signal;
    if (signal !== undefined) {
      if (signal.aborted) {
        queueMicrotask(() => this.fail(signal.reason));
      } else {
        this.stopSignal = onAbort(signal, () => this.fail(signal.reason));
      }
    }
    conn.connect().catch(() => undefined);
  }

  /** @internal Checks observe()'s options. */
  static options(opts: ObserveOptions): void {
    if (opts === null || typeof opts !== 'object') {
      throw new InvalidArgumentError('dlock: the options must be an object ({signal, timeout})');
    }
    args.known(opts, OBSERVE_OPTIONS, 'an observer');
    if (opts.timeout !== undefined) args.duration(opts.timeout, 'timeout');
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
      throw new InvalidArgumentError('dlock: signal must be an AbortSignal');
    }
  }

  /** The last state heard (undefined before the first). */
  get current(): args.LeaderChange | undefined {
    return this.last;
  }

  /** Whether the observation ended (closed, or failed). */
  get closed(): boolean {
    return this.ended !== null;
  }

  private subscribe(): void {
    if (this.ended !== null) return;
    this.conn.subscribe(this.channel).catch((e: unknown) => {
      // A refusal ends the observation; a connection that broke meanwhile is ioredis's
      // to reconnect, and subscribed again at its next 'ready'.
      if ((e as { name?: string }).name === 'ReplyError') this.fail(mapError(e).error);
    });
  }

  private hear(payload: Buffer): void {
    if (this.ended !== null) return;
    let c: args.LeaderChange;
    try {
      c = Object.freeze(args.leaderMessage(payload));
    } catch (e) {
      this.fail(e);
      return;
    }
    if (this.stopFirst !== null) {
      this.stopFirst();
      this.stopFirst = null;
    }
    if (c.term !== 0 && c.term < this.highest) return;
    const l = this.last;
    if (l !== undefined && l.term === c.term && l.value === c.value) return;
    this.highest = Math.max(this.highest, c.term);
    this.last = c;
    if (this.iterating) {
      const p = this.pending.shift();
      if (p !== undefined) p.resolve({ value: c, done: false });
      else this.queue.push(c);
    }
    this.emit('change', c);
  }

  /** Stops the timers and the signal's listener. */
  private quiet(): void {
    if (this.stopFirst !== null) this.stopFirst();
    if (this.stopSignal !== null) this.stopSignal();
    this.stopFirst = this.stopSignal = null;
  }

  private finish(): void {
    this.conn.disconnect();
    if (!this.closeEmitted) {
      this.closeEmitted = true;
      this.onEnd(this);
      this.emit('close');
    }
  }

  /** Ends the observation with `e`: the next (or a waiting) next() throws it. */
  private fail(e: unknown): void {
    if (this.ended !== null) return;
    this.ended = { error: e };
    this.quiet();
    const waiting = this.pending.splice(0);
    if (waiting.length > 0) {
      this.ended.error = undefined;
      waiting[0].reject(e);
      for (const p of waiting.slice(1)) p.resolve({ value: undefined, done: true });
    }
    if (this.listenerCount('error') > 0) this.emit('error', e instanceof Error ? e : new Error(String(e)));
    this.finish();
  }

  /** @internal Ends it at once, without UNSUBSCRIBE (the client is closing). */
  end(): void {
    if (this.ended === null) {
      this.ended = { error: undefined };
      this.quiet();
      for (const p of this.pending.splice(0)) p.resolve({ value: undefined, done: true });
    }
    this.finish();
  }

  /**
   * Ends the observation: UNSUBSCRIBE (within the timeout), then the connection is
   * closed. An iteration waiting ends (done).
   */
  close(): Promise<void> {
    if (this.closing === null) this.closing = this.leave();
    return this.closing;
  }

  private async leave(): Promise<void> {
    if (this.ended === null) {
      this.ended = { error: undefined };
      this.quiet();
      for (const p of this.pending.splice(0)) p.resolve({ value: undefined, done: true });
      if (this.conn.status === 'ready') {
        const noop = (): void => undefined;
        await bounded(this.conn.unsubscribe(this.channel), this.timeoutMs, () => new Error('unsubscribe'), undefined, noop).catch(noop);
      }
    }
    this.finish();
  }

  next(): Promise<IteratorResult<args.LeaderChange>> {
    if (!this.iterating) {
      // The iteration starts with the state known now, then every change after it.
      this.iterating = true;
      if (this.last !== undefined) this.queue.push(this.last);
    }
    const c = this.queue.shift();
    if (c !== undefined) return Promise.resolve({ value: c, done: false });
    if (this.ended !== null) {
      const e = this.ended.error;
      if (e === undefined) return Promise.resolve({ value: undefined, done: true });
      this.ended.error = undefined;
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => this.pending.push({ resolve, reject }));
  }

  /** Closes the observer: what leaving a for-await loop calls. */
  async return(): Promise<IteratorResult<args.LeaderChange>> {
    await this.close();
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
