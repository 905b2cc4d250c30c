// Leader election: a leadership is a session lock taken with ELECT, so it lives on a
// connection of its own, is renewed by dlockd while that connection is open, and is
// resigned by dlockd the moment it closes (a crashed leader is replaced in
// milliseconds). Its term is the lock's fence.

import * as args from './args';
import { LockLostError } from './errors';
import { Lock, runHolding } from './lock';

/**
 * The routine of lead(): runs while leading. `signal` aborts when the leadership is
 * lost; `term` is larger than every earlier leader's: hand it to what the leader
 * writes to, so that a deposed leader's late writes are refused.
 */
export type LeadRoutine<T> = (signal: AbortSignal, term: number, leadership: Leadership) => T | Promise<T>;

/** Leading an election: what elect() resolves to. */
export class Leadership {
  /** The election's name, as a string (a Buffer name decoded as UTF-8). */
  readonly name: string;
  /**
   * This leader's term: the leadership's fence, larger than every earlier leader's of
   * the name. A number, exact below 2^53 as a lock's fence is.
   */
  readonly term: number;
  /** 32 hex characters: what RESIGN, PROCLAIM and CHECK name it by. */
  readonly token: string;
  /** The lease left at the election, in ms (dlockd renews it while the connection is open). */
  readonly validityMs: number;
  private announced: string;

  /** @internal */
  constructor(
    /** @internal The session lock under it: its connection, heartbeat and loss signal. */
    readonly lock: Lock,
    private readonly raw: string | Buffer,
    value: string,
  ) {
    this.name = lock.name;
    this.term = lock.fence;
    this.token = lock.token;
    this.validityMs = lock.validityMs;
    this.announced = value;
  }

  /** What this leader announces now: the elect()'s value, then the last proclaim()'s. */
  get value(): string {
    return this.announced;
  }

  /**
   * Aborted when the leadership is known to be lost: its connection closed (by dlockd
   * when its renewal found the lock gone, by an operator, by the network), dlockd
   * stopped answering the heartbeat, or CHECK or PROCLAIM answered 0. Its reason is a
   * LockLostError. A resign() does not abort it.
   */
  get signal(): AbortSignal {
    return this.lock.signal;
  }

  /** Whether the leadership is known to be lost (`signal.aborted`). */
  get lost(): boolean {
    return this.lock.lost;
  }

  /** Whether resign() was called. */
  get resigned(): boolean {
    return this.lock.isReleased;
  }

  /**
   * Announces a new value in the same term (observers hear it, LEADER shows it).
   * Rejects with LockLostError when this candidate no longer leads: resigned, or lost,
   * which also aborts the signal; a leader that cannot announce should stop acting as
   * one rather than go on unheard.
   */
  async proclaim(value: string): Promise<void> {
    const v = args.leaderValue(value);
    if (await this.lock.onOwn(['PROCLAIM', this.raw, this.token, v], 'PROCLAIM')) {
      this.announced = v;
      return;
    }
    if (this.lock.lost) throw this.lock.signal.reason;
    throw new LockLostError(`dlock: leadership '${this.name}' was resigned: PROCLAIM is for the leader`);
  }

  /**
   * Asks dlockd whether this candidate still leads (CHECK: read-only, renews nothing).
   * False aborts the signal.
   */
  isLeading(): Promise<boolean> {
    return this.lock.isHeld();
  }

  /**
   * Gives up the leadership: observers hear that no one leads, then the next candidate
   * leads. True, or false when it was no longer held (lost, or resigned already). Its
   * connection goes back to the pool only when dlockd answered 1.
   */
  resign(): Promise<boolean> {
    return this.lock.release();
  }

  toJSON(): { name: string; term: number; token: string; value: string } {
    return { name: this.name, term: this.term, token: this.token, value: this.announced };
  }
}

/**
 * Runs `routine(signal, term, leadership)` while leading, resigns however it ends and
 * returns its value; LockLostError after the routine when the leadership was lost
 * meanwhile, unless the routine threw (its error is passed on), as using() does.
 */
export function runLeading<T>(leadership: Leadership, routine: LeadRoutine<T>): Promise<T> {
  return runHolding(leadership.lock, (signal) => routine(signal, leadership.term, leadership));
}
