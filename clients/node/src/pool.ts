// The connection layer. ioredis multiplexes every command of a `Redis` on one
// connection, while dlockd ties a session lock to the connection that took it and blocks
// a connection while its LOCK waits. So a session lock, and any command that waits, gets
// a connection of its own: a duplicate of the application's client, made without
// auto-reconnect (a reconnected connection would silently hold nothing), kept in a small
// idle pool for reuse. Everything else shares the application's connection.

import type Redis from 'ioredis';
import { CommandError, LockLostError, UnavailableError, mapError } from './errors';

/** A command as sent: the command word, then its arguments. */
export type Args = (string | Buffer)[];

// The options a dedicated connection overrides in the application's: no reconnect and no
// queue while offline (a command on a broken connection fails at once rather than being
// sent on a new connection that holds nothing), no resend after a reconnect, no command
// timeout (a waiting LOCK answers when served; this layer bounds the wait itself), no
// pipelining across callers (a connection serves one lock), and TCP keepalive, so that a
// host that vanished under a held lock is found out even while nothing is sent. No
// CLIENT SETINFO at connect: ioredis drops its error reply, and with it dlockd's reason
// for refusing a connection (max number of clients reached); INFO's is reported.
const DEDICATED = {
  lazyConnect: true,
  retryStrategy: () => null,
  reconnectOnError: () => false,
  enableOfflineQueue: false,
  autoResendUnfulfilledCommands: false,
  autoResubscribe: false,
  maxRetriesPerRequest: 0,
  commandTimeout: undefined,
  enableAutoPipelining: false,
  keepAlive: 10000,
  disableClientInfo: true,
} as const;

/** The longest delay a Node timer takes: a longer one fires at once. */
export const TIMER_MAX = 2147483647;

function noop(): void {}

// One 'abort' listener per signal, whatever the number of calls waiting on it: many
// concurrent calls sharing a signal would otherwise pass Node's listener limit.
const watchers = new WeakMap<AbortSignal, Set<() => void>>();

function fire(this: AbortSignal): void {
  const set = watchers.get(this);
  watchers.delete(this);
  if (set !== undefined) for (const fn of set) fn();
}

/** Runs `fn` when `signal` aborts; the function returned stops that. */
export function onAbort(signal: AbortSignal, fn: () => void): () => void {
  let set = watchers.get(signal);
  if (set === undefined) {
    set = new Set();
    watchers.set(signal, set);
    signal.addEventListener('abort', fire, { once: true });
  }
  set.add(fn);
  const s = set;
  return () => {
    s.delete(fn);
    if (s.size === 0 && watchers.get(signal) === s) {
      watchers.delete(signal);
      signal.removeEventListener('abort', fire);
    }
  };
}

/**
 * A timer for `ms` that also works past Node's limit (2^31 - 1 ms), by re-arming until
 * the deadline. Returns what cancels it.
 */
export function timer(ms: number, fn: () => void): () => void {
  if (ms <= TIMER_MAX) {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  }
  const deadline = Date.now() + ms;
  let t: NodeJS.Timeout;
  const arm = (): void => {
    const left = deadline - Date.now();
    t = left <= TIMER_MAX ? setTimeout(fn, Math.max(0, left)) : setTimeout(arm, TIMER_MAX);
  };
  arm();
  return () => clearTimeout(t);
}

/**
 * `p` (a command already sent), or a rejection when `ms` pass (null: never) or `signal`
 * aborts, whichever comes first. `onGiveUp` runs on the last two, before the rejection
 * (it closes a connection that would otherwise keep waiting); `onLate` gets a value `p`
 * resolves to after that, so that a grant nobody waits for any more can be given back.
 */
export function bounded<T>(
  p: Promise<T>,
  ms: number | null,
  expired: () => Error,
  signal: AbortSignal | undefined,
  onGiveUp: () => void,
  onLate?: (v: T) => void,
): Promise<T> {
  if (ms === null && signal === undefined) return p;
  return new Promise<T>((resolve, reject) => {
    let done = false;
    let stopTimer: (() => void) | undefined;
    let stopSignal: (() => void) | undefined;
    const giveUp = (err: () => unknown): void => {
      if (done) return;
      done = true;
      if (stopTimer !== undefined) stopTimer();
      if (stopSignal !== undefined) stopSignal();
      onGiveUp();
      reject(err());
    };
    p.then(
      (v) => {
        if (done) {
          if (onLate !== undefined) onLate(v);
          return;
        }
        done = true;
        if (stopTimer !== undefined) stopTimer();
        if (stopSignal !== undefined) stopSignal();
        resolve(v);
      },
      (e) => {
        if (done) return;
        done = true;
        if (stopTimer !== undefined) stopTimer();
        if (stopSignal !== undefined) stopSignal();
        reject(e);
      },
    );
    if (signal !== undefined) {
      if (signal.aborted) {
        giveUp(() => signal.reason);
        return;
      }
      stopSignal = onAbort(signal, () => giveUp(() => signal.reason));
    }
    if (ms !== null) stopTimer = timer(Math.max(0, ms), () => giveUp(expired));
  });
}

/** What a socket of ioredis's is, for ref() and unref(). */
interface Socketed {
  stream?: { ref?: () => void; unref?: () => void };
}

export class Pool {
  private readonly idle: Redis[] = [];
  private readonly live = new Set<Redis>();
  private readonly destroyed = new WeakSet<Redis>();
  private closed = false;

  constructor(
    readonly shared: Redis,
    /** ms allowed for a reply beyond any wait, and for connecting. */
    readonly timeoutMs: number,
    private readonly maxIdle: number,
  ) {}

  /** How many dedicated connections are open, idle ones included. */
  get size(): number {
    return this.live.size;
  }

  /** Whether close() was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  get idleCount(): number {
    return this.idle.length;
  }

  /**
   * A ready dedicated connection: an idle one, or a new duplicate of the shared client
   * (connected and authenticated within `timeoutMs`). `reused` says which: a reused
   * one may have been closed by dlockd meanwhile (--timeout-idle), which its first
   * command finds out.
   */
  async take(signal?: AbortSignal, timeoutMs = this.timeoutMs): Promise<{ conn: Redis; reused: boolean }> {
    if (this.closed) throw new UnavailableError('dlock: the client is closed');
    signal?.throwIfAborted();
    for (let c = this.idle.pop(); c !== undefined; c = this.idle.pop()) {
      if (c.status === 'ready') {
        // Idle, its socket did not keep the process alive; in use, it does.
        (c as unknown as Socketed).stream?.ref?.();
        return { conn: c, reused: true };
      }
      this.destroy(c);
    }
    const conn = this.shared.duplicate(DEDICATED);
    this.live.add(conn);
    // ioredis reports a refused AUTH, dlockd's refusal of a connection (max number of
    // clients reached) or a socket error as an 'error' event, and rejects connect() with
    // "Connection is closed." only: the first error says why.
    let first: unknown;
    conn.on('error', (e: unknown) => {
      if (first === undefined) first = e;
    });
    try {
      await bounded(
        conn.connect(),
        timeoutMs,
        () => new UnavailableError(`dlock: no connection to dlockd within ${timeoutMs} ms`),
        signal,
        () => this.destroy(conn),
      );
    } catch (e) {
      this.destroy(conn);
      if (signal?.aborted && e === signal.reason) throw e;
      const f = mapError(first ?? e).error;
      // An -ERR at connect is dlockd refusing the connection (too many clients): try later.
      throw f instanceof CommandError ? new UnavailableError(`dlock: dlockd refused the connection (${f.message})`, { cause: first }) : f;
    }
    if (this.closed) {
      this.destroy(conn);
      throw new UnavailableError('dlock: the client is closed');
    }
    return { conn, reused: false };
  }

  /**
   * Gives a dedicated connection back: to the idle pool when `clean` (in step, and no
   * session lock left on it) and still open, else closed, which makes dlockd release
   * whatever the connection still held.
   */
  give(conn: Redis, clean: boolean): void {
    if (this.destroyed.has(conn)) return;
    if (clean && !this.closed && conn.status === 'ready' && this.idle.length < this.maxIdle) {
      // An idle connection must not keep the process alive once the application is done.
      (conn as unknown as Socketed).stream?.unref?.();
      this.idle.push(conn);
      return;
    }
    this.destroy(conn);
  }

  /** Closes a dedicated connection at once (pending commands fail). */
  destroy(conn: Redis): void {
    if (this.destroyed.has(conn)) return;
    this.destroyed.add(conn);
    this.live.delete(conn);
    const i = this.idle.indexOf(conn);
    if (i >= 0) this.idle.splice(i, 1);
    conn.disconnect();
  }

  /** Closes the idle connections: they lead to a dlockd that is draining. */
  private dropIdle(): void {
    for (let c = this.idle.pop(); c !== undefined; c = this.idle.pop()) this.destroy(c);
  }

  isDestroyed(conn: Redis): boolean {
    return this.destroyed.has(conn);
  }

  /** The package's error for a failure; a -SHUTDOWN empties the idle pool. */
  private failure(e: unknown): { error: Error; inStep: boolean } {
    const f = mapError(e);
    if (f.shutdown) this.dropIdle();
    return f;
  }

  /**
   * One command on a dedicated connection, bounded by `boundMs` (null: no bound) and
   * `signal`; the connection is closed when either ends it, and when it fails in a way
   * that leaves it out of step. `onLate` gets a reply that came after it was given up.
   */
  async exchange(
    conn: Redis,
    args: Args,
    boundMs: number | null,
    signal?: AbortSignal,
    onLate?: (reply: unknown) => void,
  ): Promise<unknown> {
    try {
      return await bounded(
        conn.call(args[0] as string, ...args.slice(1)),
        boundMs,
        () => new UnavailableError(`dlock: no reply from dlockd within ${boundMs} ms (${String(args[0])})`),
        signal,
        () => this.destroy(conn),
        onLate,
      );
    } catch (e) {
      if (signal?.aborted && e === signal.reason) throw e;
      const f = this.failure(e);
      if (!f.inStep) this.destroy(conn);
      throw f.error;
    }
  }

  /**
   * Waits until the shared connection is ready (connecting it when it is lazy), within
   * `ms` and `signal`. A command that takes something (a detached LOCK, a reservation)
   * is never left in ioredis's offline queue: sent after its caller gave up, it would
   * take what nobody holds.
   */
  private async ready(ms: number | null, signal?: AbortSignal): Promise<void> {
    const s = this.shared;
    if (s.status === 'wait') s.connect().catch(noop);
    while (s.status !== 'ready') {
      if (s.status === 'end') throw new UnavailableError('dlock: the ioredis client of dlockd is closed');
      let off = noop;
      await bounded(
        new Promise<void>((resolve) => {
          const on = (): void => resolve();
          s.once('ready', on);
          s.once('end', on);
          off = () => {
            s.removeListener('ready', on);
            s.removeListener('end', on);
          };
        }).finally(() => off()),
        ms,
        () => new UnavailableError(`dlock: the connection to dlockd was not ready within ${ms} ms (${s.status})`),
        signal,
        () => off(),
      );
    }
  }

  /**
   * One command on the shared connection, bounded by the wait and the timeout. A late
   * reply after the bound is given to `onLate` (the shared connection is the
   * application's: it is never closed here); a command given one takes something, and is
   * sent only on a ready connection. A -LOST reply means dlockd closed that connection
   * over a session lock of the application's own: the command was not run, so it is sent
   * once more.
   */
  async call(
    args: Args,
    waitMs = 0,
    signal?: AbortSignal,
    onLate?: (reply: unknown) => void,
    timeoutMs = this.timeoutMs,
  ): Promise<unknown> {
    const bound = waitMs < 0 ? null : waitMs + timeoutMs;
    const deadline = bound === null ? 0 : Date.now() + bound;
    for (let attempt = 0; ; attempt++) {
      try {
        signal?.throwIfAborted();
        if (onLate !== undefined && this.shared.status !== 'ready') {
          await this.ready(bound === null ? null : deadline - Date.now(), signal);
        }
        const left = bound === null ? null : Math.max(0, deadline - Date.now());
        return await bounded(
          this.shared.call(args[0] as string, ...args.slice(1)),
          left,
          () => new UnavailableError(`dlock: no reply from dlockd within ${bound} ms (${String(args[0])})`),
          signal,
          noop,
          onLate,
        );
      } catch (e) {
        if (signal?.aborted && e === signal.reason) throw e;
        const err = this.failure(e).error;
        if (err instanceof LockLostError && attempt === 0) continue;
        throw err;
      }
    }
  }

  /** Closes every dedicated connection, idle or holding a lock. */
  close(): void {
    this.closed = true;
    for (const c of [...this.live]) this.destroy(c);
  }
}

/**
 * Whether a failure means the connection broke under the command (closed, reset):
 * a session lock on it is gone with it. Not an error reply, and not a reply that did
 * not come in time (whose outcome is unknown).
 */
export function broken(e: unknown): boolean {
  if (e instanceof LockLostError) return true;
  if (!(e instanceof UnavailableError)) return false;
  const cause = (e as { cause?: { name?: string } }).cause;
  return cause !== undefined && cause.name !== 'ReplyError';
}
