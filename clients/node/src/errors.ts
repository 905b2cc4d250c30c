// The package's errors: one class per kind of failure, whatever ioredis rejected with.
// Every one extends DlockError, so `err instanceof DlockError` catches them all.

/** The base of every error of this package. */
export class DlockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The lock (a permit, units of stock) was not acquired within the wait. */
export class NotAcquiredError extends DlockError {}

/** The state of a SKU, as STOCK SET, ADD and STATUS reply it. */
export interface StockState {
  stock: number;
  available: number;
  reserved: number;
  sold: number;
  reservations: number;
  waiters: number;
  [field: string]: number;
}

/**
 * `stock.reserve()` could not have the units within its wait. `soldOut` says whether
 * they are gone for good (more units asked than are not yet sold) or only reserved by
 * other buyers at the moment; `state` is the SKU's state when it was refused.
 */
export class OutOfStockError extends NotAcquiredError {
  readonly soldOut: boolean;
  readonly state: StockState;
  constructor(message: string, soldOut: boolean, state: StockState) {
    super(message);
    this.soldOut = soldOut;
    this.state = state;
  }
}

/**
 * A lock was lost while held: its lease ran out before renewal, an operator broke it,
 * another client released it with its token, or the connection that held it (a session
 * lock's) closed. The work done under it was not wholly under the lock.
 */
export class LockLostError extends DlockError {}

/**
 * dlockd or its lock servers could not be reached, did not answer in time, or are
 * shutting down (-SHUTDOWN): try later. A command that failed so may or may not have
 * been applied.
 */
export class UnavailableError extends DlockError {}

/** Too few of several lock servers answered to decide (dlockd's -NOQUORUM). */
export class NoQuorumError extends UnavailableError {}

/** No password, a wrong one, or a command this user may not run. */
export class AuthFailedError extends DlockError {}

/** dlockd refused the command (its -ERR); the message is dlockd's. */
export class CommandError extends DlockError {}

/** A reply that is not what the command calls for, or dlockd's -ERR Protocol error. */
export class ProtocolError extends DlockError {}

/** An argument out of range, refused before anything is sent. */
export class InvalidArgumentError extends DlockError {}

type ErrorClass = new (message: string, options?: { cause?: unknown }) => DlockError;

// dlockd's error code words, and the class each one is.
const CODES: Record<string, ErrorClass> = {
  ERR: CommandError,
  NOQUORUM: NoQuorumError,
  UNAVAILABLE: UnavailableError,
  // A draining dlockd takes no new lock: another dlockd, or a later try, will.
  SHUTDOWN: UnavailableError,
  LOADING: UnavailableError,
  LOST: LockLostError,
  NOAUTH: AuthFailedError,
  WRONGPASS: AuthFailedError,
  NOPERM: AuthFailedError,
  NOPROTO: ProtocolError,
};

/** What mapError() makes of a failure. */
export interface Failure {
  error: DlockError;
  /**
   * Whether the connection is still usable: true for an error reply read whole (the
   * connection is in step); false when it broke, timed out or will be closed by dlockd,
   * so that it must never carry another command, nor go back to a pool.
   */
  inStep: boolean;
  /**
   * dlockd answered -SHUTDOWN: it is draining, so none of its connections is worth
   * keeping for the next lock (the next one should find another dlockd, or a new one).
   */
  shutdown: boolean;
}

function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** The package's error for whatever ioredis (or the network) rejected with. */
export function mapError(e: unknown): Failure {
  if (e instanceof DlockError) {
    return { error: e, inStep: !(e instanceof UnavailableError || e instanceof LockLostError), shutdown: false };
  }
  const err = e as { name?: string; message?: string; code?: string };
  const msg = messageOf(e);
  if (err && err.name === 'ReplyError') {
    const word = msg.split(' ', 1)[0] ?? '';
    if (word === 'ERR' && msg.startsWith('ERR Protocol error')) {
      // dlockd closes the connection after it.
      return { error: new ProtocolError(`dlockd: ${msg}`, { cause: e }), inStep: false, shutdown: false };
    }
    const cls = CODES[word];
    if (cls !== undefined) {
      // dlockd closes the connection after -LOST; a draining dlockd (-SHUTDOWN) closes
      // every connection soon, so one that answered it is not kept either.
      const shutdown = word === 'SHUTDOWN';
      return { error: new cls(`dlockd: ${msg}`, { cause: e }), inStep: cls !== LockLostError && !shutdown, shutdown };
    }
    return { error: new CommandError(`dlockd: ${msg}`, { cause: e }), inStep: true, shutdown: false };
  }
  if (err && err.name === 'MaxRetriesPerRequestError') {
    return { error: new UnavailableError(`dlock: dlockd could not be reached (${msg})`, { cause: e }), inStep: false, shutdown: false };
  }
  if (err && (err.name === 'ParserError' || /Please report this/.test(msg))) {
    return { error: new ProtocolError(`dlock: unreadable reply from dlockd (${msg})`, { cause: e }), inStep: false, shutdown: false };
  }
  // "Connection is closed.", "Command timed out", "Stream isn't writeable ...", socket
  // errors (ECONNREFUSED, ECONNRESET, ETIMEDOUT), a connection aborted: all say that
  // dlockd could not be reached or did not answer.
  return { error: new UnavailableError(`dlock: dlockd could not be reached (${msg})`, { cause: e }), inStep: false, shutdown: false };
}
