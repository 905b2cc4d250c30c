// The connection layer. ioredis multiplexes every command of a `Redis` on one
// connection, while dlockd ties a session lock to the connection that took it and blocks
// a connection while its LOCK waits. So a session lock, and any command that waits, gets
// a connection of its own: a duplicate of the application's client, made without
// auto-reconnect (a reconnected connection would silently hold nothing), kept in a small
// idle pool for reuse. Everything else shares the application's connection.

import type Redis from 'ioredis';
import { LockLostError, UnavailableError, mapError } from './errors';

/** A command as sent: the command word, then its arguments. */
export type Args = (string | Buffer)[];

// The options a dedicated connection overrides in the application's: no reconnect and no
// queue while offline (a command on a broken connection fails at once rather than being
// sent on a new connection that holds nothing), no resend after a reconnect, no command
// timeout (a waiting LOCK answers when served; this layer bounds the wait itself), and
// no pipelining across callers (a connection serves one lock).
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
} as const;

function noop(): void {}

/**
 * A promise settled by `start`'s outcome, or rejected when `ms` pass (null: never) or
 * `signal` aborts, whichever comes first; `onGiveUp` runs on the last two, before the
 * rejection (it closes the connection that would otherwise keep waiting).
 */
export function race<T>(
  start: () => Promise<T>,
  ms: number | null,
  expired: () => Error,
  signal: AbortSignal | undefined,
  onGiveUp: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal?.aborted) {
      onGiveUp();
      reject(signal.reason);
      return;
    }
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const settle = (fn: () => void): void => {
      if (done) return;
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      fn();
    };
    const onAbort = (): void =>
      settle(() => {
        onGiveUp();
        reject(signal?.reason);
      });
    if (ms !== null) {
      timer = setTimeout(
        () =>
          settle(() => {
            onGiveUp();
            reject(expired());
          }),
        ms,
      );
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    start().then(
      (v) => settle(() => resolve(v)),
      (e) => settle(() => reject(e)),
    );
  });
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

  get idleCount(): number {
    return this.idle.length;
  }

  /**
   * A ready dedicated connection: an idle one, or a new duplicate of the shared client
   * (connected and authenticated within the timeout). `reused` says which: a reused
   * one may have been closed by dlockd meanwhile (--timeout-idle), which its first
   * command finds out.
   */
  async take(signal?: AbortSignal): Promise<{ conn: Redis; reused: boolean }> {
    if (this.closed) throw new UnavailableError('dlock: the client is closed');
    signal?.throwIfAborted();
    for (let c = this.idle.pop(); c !== undefined; c = this.idle.pop()) {
      if (c.status === 'ready') return { conn: c, reused: true };
      this.destroy(c);
    }
    const conn = this.shared.duplicate(DEDICATED);
    this.live.add(conn);
    // ioredis reports a refused AUTH, or a socket error, as an 'error' event; the
    // connect() promise only says the connection closed. Keep the first for the error.
    let first: unknown;
    conn.on('error', (e: unknown) => {
      if (first === undefined) first = e;
    });
    try {
      await race(
        () => conn.connect(),
        this.timeoutMs,
        () => new UnavailableError(`dlock: no connection to dlockd within ${this.timeoutMs} ms`),
        signal,
        () => this.destroy(conn),
      );
    } catch (e) {
      this.destroy(conn);
      if (signal?.aborted && e === signal.reason) throw e;
      throw mapError(first ?? e).error;
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

  isDestroyed(conn: Redis): boolean {
    return this.destroyed.has(conn);
  }

  /**
   * One command on a dedicated connection, bounded by `boundMs` (null: no bound) and
   * `signal`; the connection is closed when either ends it, and when it fails in a way
   * that leaves it out of step.
   */
  async exchange(conn: Redis, args: Args, boundMs: number | null, signal?: AbortSignal): Promise<unknown> {
    try {
      return await race(
        () => conn.call(args[0] as string, ...args.slice(1)),
        boundMs,
        () => new UnavailableError(`dlock: no reply from dlockd within ${boundMs} ms (${String(args[0])})`),
        signal,
        () => this.destroy(conn),
      );
    } catch (e) {
      if (signal?.aborted && e === signal.reason) throw e;
      const f = mapError(e);
      if (!f.inStep) this.destroy(conn);
      throw f.error;
    }
  }

  /**
   * One command on the shared connection, bounded by the wait and the timeout. A late
   * reply after the bound is dropped (the shared connection is the application's: it is
   * never closed here). A -LOST reply means dlockd closed that connection over a session
   * lock of the application's own: the command was not run, so it is sent once more.
   */
  async call(args: Args, waitMs = 0, signal?: AbortSignal): Promise<unknown> {
    const bound = waitMs < 0 ? null : waitMs + this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await race(
          () => this.shared.call(args[0] as string, ...args.slice(1)),
          bound,
          () => new UnavailableError(`dlock: no reply from dlockd within ${bound} ms (${String(args[0])})`),
          signal,
          noop,
        );
      } catch (e) {
        if (signal?.aborted && e === signal.reason) throw e;
        const err = mapError(e).error;
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
