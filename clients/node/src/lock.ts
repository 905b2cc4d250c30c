// A lock (or a semaphore's permit) held from dlockd: its token and fence, release,
// extend and check, and the AbortSignal that says when it was lost.

import type Redis from 'ioredis';
import * as args from './args';
import { LockLostError } from './errors';
import { Args, Pool, broken, timer } from './pool';

/**
 * What dlockd said last on a connection it closed. Its -LOST comes as nobody's reply (the
 * connection was idle), which ioredis reports wrapped in a queue error: the -LOST line
 * is what says why.
 */
function lastWords(message: string): string {
  const m = /Last error: (.*)$/s.exec(message);
  return m ? m[1] : message;
}

/**
 * Whether a Lock is a lock, a semaphore's permit or a leadership (an ELECT's session
 * lock, given up with RESIGN so that observers hear of it): for messages and release.
 */
export type LockKind = 'lock' | 'permit of semaphore' | 'leadership';

export class Lock {
  /** The name, as a string (a Buffer name decoded as UTF-8). */
  readonly name: string;
  /** The name as sent to dlockd: a string as given, or the bytes. */
  private readonly raw: string | Buffer;
  /** 32 hex characters: what UNLOCK, EXTEND and CHECK need, from anywhere. */
  readonly token: string;
  /**
   * Greater than every earlier holder's fence of the name: hand it to what the lock
   * protects, so that it can refuse a stale holder. A number: dlockd's fences are server
   * time in microseconds (about 1.8e15), exact in a double below 2^53 (about 9e15); a
   * reply past that is refused as a ProtocolError rather than rounded.
   */
  readonly fence: number;
  /** The lease left at the grant, in ms. */
  readonly validityMs: number;
  /** A plain lease (DETACHED), not renewed and not tied to a connection. */
  readonly detached: boolean;

  private conn: Redis | null;
  // Made when somebody asks for the signal: most locks are released without.
  private controller: AbortController | null = null;
  private lostWhy: LockLostError | null = null;
  private released = false;
  // A session lock's liveness check: PING on its connection every third of the TTL.
  private beatMs = 0;
  private stopBeat: (() => void) | null = null;
  // release(), extend() and isHeld() one at a time, so that release never gives the
  // connection back while another command of this lock is still on it.
  private queue: Promise<unknown> = Promise.resolve();
  private readonly onClose: () => void;
  private readonly onError: (e: unknown) => void;
  private lastError: unknown;

  /** @internal */
  constructor(
    private readonly pool: Pool,
    raw: string | Buffer,
    grant: args.Grant,
    detached: boolean,
    conn: Redis | null,
    private readonly kind: LockKind = 'lock',
    ttlMs = args.DEFAULT_TTL,
  ) {
    this.raw = raw;
    this.name = args.text(raw);
    this.token = grant.token;
    this.fence = grant.fence;
    this.validityMs = grant.validityMs;
    this.detached = detached;
    this.conn = conn;
    this.onError = (e) => {
      this.lastError = e;
    };
    this.onClose = () => {
      // The session's connection closed: dlockd released the lock (after -LOST, a
      // MAXHOLD, CLIENT KILL) or the network broke; either way it is not held any more.
      const why = this.lastError instanceof Error ? `: ${lastWords(this.lastError.message)}` : '';
      this.lose(`its connection to dlockd closed${why}`);
    };
    if (conn !== null) {
      conn.on('error', this.onError);
      conn.once('close', this.onClose);
      // Closed between the reply and now: lost already.
      if (conn.status !== 'ready') queueMicrotask(this.onClose);
      else this.beat(ttlMs);
    }
  }

  /** The name as sent to dlockd, as bytes. */
  get nameBytes(): Buffer {
    return args.bytes(this.raw);
  }

  /**
   * (Re)starts the liveness check of a session lock. dlockd renews the lock only while
   * it runs: one that hangs (stopped, its host gone) sends nothing, closes nothing, and
   * its lease runs out while the connection looks open. A PING not answered within a
   * third of the TTL closes the connection and reports the lock lost, while some of the
   * lease is still left. The timers do not keep the process alive.
   */
  private beat(ttlMs: number): void {
    this.beatMs = Math.max(1, Math.floor(ttlMs / 3));
    this.stopBeat?.();
    this.stopBeat = this.arm(this.beatMs, this.ping);
  }

  private arm(ms: number, fn: () => void): () => void {
    const t = setTimeout(fn, ms);
    t.unref();
    return () => clearTimeout(t);
  }

  private readonly ping = (): void => {
    const conn = this.conn;
    if (conn === null || this.lostWhy !== null) return;
    const ms = this.beatMs;
    let answered = false;
    const stop = this.arm(ms, () => {
      if (answered || this.conn !== conn) return;
      this.lose(`dlockd did not answer PING within ${ms} ms: renewal cannot be counted on`);
      this.stopBeat = null;
      this.detach();
      this.pool.destroy(conn);
    });
    this.stopBeat = stop;
    conn.call('PING').then(
      () => {
        answered = true;
        stop();
        if (this.conn === conn && this.stopBeat === stop) this.stopBeat = this.arm(this.beatMs, this.ping);
      },
      () => {
        // The connection failed: its close event reports the loss.
        answered = true;
        stop();
      },
    );
  };

  /**
   * Aborted when the lock is known to be lost: its connection closed (by dlockd after
   * -LOST or MAXHOLD, by an operator, by the network), or EXTEND or CHECK answered 0.
   * Its reason is a LockLostError.
   */
  get signal(): AbortSignal {
    if (this.controller === null) {
      this.controller = new AbortController();
      if (this.lostWhy !== null) this.controller.abort(this.lostWhy);
    }
    return this.controller.signal;
  }

  /** Whether the lock is known to be lost (`signal.aborted`). */
  get lost(): boolean {
    return this.lostWhy !== null;
  }

  /**
   * Whether the lock was released: a session lock's once release() was called (its
   * connection goes either way), a detached lock's once dlockd answered its UNLOCK.
   */
  get isReleased(): boolean {
    return this.released;
  }

  private lose(why: string): void {
    if (this.lostWhy !== null) return;
    this.lostWhy = new LockLostError(`dlock: ${this.kind} '${this.name}' was lost: ${why}`);
    this.controller?.abort(this.lostWhy);
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Takes the connection away from this lock: no more loss reports from it. */
  private detach(): Redis | null {
    const conn = this.conn;
    this.conn = null;
    if (this.stopBeat !== null) {
      this.stopBeat();
      this.stopBeat = null;
    }
    if (conn !== null) {
      conn.removeListener('close', this.onClose);
      conn.removeListener('error', this.onError);
    }
    return conn;
  }

  /** A command of this session lock on its own connection: 1 or 0. */
  private async onSession(cmd: Args, command: string): Promise<boolean> {
    const conn = this.conn;
    if (conn === null || this.lost || conn.status !== 'ready') return false;
    try {
      return args.bool(await this.pool.exchange(conn, cmd, this.pool.timeoutMs), command);
    } catch (e) {
      if (broken(e)) {
        this.lose(`${command} found its connection closed`);
        return false;
      }
      throw e;
    }
  }

  /**
   * Releases the lock: true, or false when it was not held any more (lost, expired,
   * released already). A session lock's connection goes back to the pool only when the
   * release succeeded; otherwise it is closed, which makes dlockd drop what is left.
   */
  release(): Promise<boolean> {
    return this.serial(async () => {
      if (this.released) return false;
      const word = this.kind === 'leadership' ? 'RESIGN' : 'UNLOCK';
      const cmd = [word, this.raw, this.token];
      if (this.detached) {
        // Released once dlockd says so: an UNLOCK that failed may be tried again.
        const held = args.bool(await this.pool.call(cmd), 'UNLOCK');
        this.released = true;
        if (!held) this.lose('UNLOCK found it no longer held');
        return held;
      }
      this.released = true;
      let held = false;
      try {
        held = await this.onSession(cmd, word);
        if (!held) this.lose(`${word} found it no longer held`);
        return held;
      } catch (e) {
        // The connection is closed below: whatever the UNLOCK did, dlockd lets go then.
        this.lose(`${word} failed (${(e as Error).message}); its connection is closed`);
        throw e;
      } finally {
        const conn = this.detach();
        if (conn !== null) this.pool.give(conn, held);
      }
    });
  }

  /**
   * Sets the lease to `ttl` ms from now (a session lock: renewal goes on with it; at
   * least 1000 ms). True, or false when the lock was no longer held, which aborts the
   * signal.
   */
  async extend(ttl: number): Promise<boolean> {
    const ms = args.ttl(ttl, !this.detached);
    return this.serial(async () => {
      if (this.released || this.lost) return false;
      const cmd = ['EXTEND', this.raw, this.token, String(ms)];
      const held = this.detached
        ? args.bool(await this.pool.call(cmd), 'EXTEND')
        : await this.onSession(cmd, 'EXTEND');
      if (!held) this.lose('EXTEND found it no longer held');
      else if (this.stopBeat !== null) this.beat(ms);
      return held;
    });
  }

  /**
   * Asks dlockd whether the lock is held with this token on a quorum of the lock
   * servers (CHECK: read-only, renews nothing). False aborts the signal.
   */
  isHeld(): Promise<boolean> {
    return this.serial(async () => {
      if (this.released || this.lost) return false;
      const cmd = ['CHECK', this.raw, this.token];
      const held = this.detached
        ? args.bool(await this.pool.call(cmd), 'CHECK')
        : await this.onSession(cmd, 'CHECK');
      if (!held) this.lose('CHECK found it no longer held');
      return held;
    });
  }

  /**
   * @internal A command of a session lock's own (PROCLAIM), in turn with release() and
   * the others: true when dlockd answered 1; false, without sending it, when the lock
   * was released or lost, or when dlockd answered 0, which marks it lost.
   */
  onOwn(cmd: Args, command: string): Promise<boolean> {
    return this.serial(async () => {
      if (this.released || this.lost || this.detached) return false;
      const held = await this.onSession(cmd, command);
      if (!held) this.lose(`${command} found it no longer held`);
      return held;
    });
  }

  /** @internal Closes a session lock's connection without UNLOCK (dlockd releases it). */
  abandon(): void {
    this.released = true;
    const conn = this.detach();
    if (conn !== null) this.pool.destroy(conn);
  }

  toJSON(): { name: string; token: string; fence: number; detached: boolean } {
    return { name: this.name, token: this.token, fence: this.fence, detached: this.detached };
  }
}

/**
 * Runs `routine(signal, lock)` holding `lock`, releases it however the routine ends, and
 * returns the routine's value. When the lock was lost meanwhile (the signal aborted, or
 * the release found it gone), rejects with LockLostError after the routine, unless the
 * routine itself threw: its error is the one that says what went wrong.
 */
export async function runHolding<T>(
  lock: Lock,
  routine: (signal: AbortSignal, lock: Lock) => T | Promise<T>,
): Promise<T> {
  let value: T;
  const signal = lock.signal;
  try {
    value = await routine(signal, lock);
  } catch (e) {
    try {
      await lock.release();
    } catch {
      // The routine's error says more; an unreachable dlockd releases the session lock
      // when the connection closes, or the lease ends.
      lock.abandon();
    }
    throw e;
  }
  // The routine released the lock itself: its release said whether it was still held.
  if (lock.isReleased) {
    if (lock.lost) throw signal.reason;
    return value;
  }
  let held: boolean;
  try {
    held = await lock.release();
  } catch (e) {
    // Unreachable: closing the connection makes dlockd release it when it can.
    lock.abandon();
    throw e;
  }
  if (!held || lock.lost) {
    const reason = signal.reason;
    throw reason instanceof LockLostError
      ? reason
      : new LockLostError(`dlock: '${lock.name}' was lost before the routine ended: its work was not wholly under the lock`);
  }
  return value;
}
