// The checks every argument gets before anything is sent, with dlockd's own limits, so
// that a bad one is an InvalidArgumentError naming it rather than a round trip and an
// -ERR; the commands built from them; and the checks of dlockd's replies. No I/O here.

import { InvalidArgumentError, ProtocolError, StockState } from './errors';

/** A wait without end (dlockd's WAIT -1). */
export const FOREVER = Infinity;
/** The lease of a lock, a permit or a reservation when none is given, in ms. */
export const DEFAULT_TTL = 30000;
/** dlockd's limit on a lock name, a semaphore's or a SKU, in bytes. */
export const NAME_MAX = 4096;
/** The longest TTL, WAIT and lease dlockd takes, in ms (2^31 - 1). */
export const MS_MAX = 2147483647;
/** The shortest lease dlockd gives a detached lock or a reservation, in ms. */
export const TTL_MIN_MS = 10;
/** The shortest TTL dlockd gives a session lock, in ms. */
export const SESSION_TTL_MIN_MS = 1000;
/** dlockd's limit on a quantity of stock. */
export const QTY_MAX = 1e12;
/** dlockd's limit on a LABEL, in bytes. */
export const LABEL_MAX = 256;

/** A lock name: a string (sent as UTF-8) or the bytes themselves. */
export type Name = string | Buffer | Uint8Array;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * A lock name, a semaphore's or a SKU as dlockd takes it: 1 to 4096 bytes, no NUL. A
 * string stays a string (ioredis sends it as UTF-8, and a command of strings is cheaper
 * to write than one with a Buffer); bytes become a Buffer.
 */
export function name(value: unknown, what = 'lock name'): string | Buffer {
  let size: number;
  let raw: string | Buffer;
  if (typeof value === 'string') {
    // A lone surrogate cannot be UTF-8: it would be sent as U+FFFD silently, and the
    // lock would be another name than the one asked for.
    if (LONE_SURROGATE.test(value)) {
      throw new InvalidArgumentError(`dlock: ${what} is not valid UTF-8 (a lone surrogate)`);
    }
    raw = value;
    size = Buffer.byteLength(value, 'utf8');
  } else if (value instanceof Uint8Array) {
    raw = Buffer.from(value);
    size = raw.length;
  } else {
    throw new InvalidArgumentError(`dlock: ${what} must be a string or a Buffer, not ${describe(value)}`);
  }
  if (size < 1 || size > NAME_MAX) {
    throw new InvalidArgumentError(`dlock: ${what} must be 1 to ${NAME_MAX} bytes, not ${size}`);
  }
  if (typeof raw === 'string' ? raw.includes('\0') : raw.includes(0)) {
    throw new InvalidArgumentError(`dlock: ${what} must not contain a NUL byte`);
  }
  return raw;
}

/** A name as the user reads it back: a string, whatever was given. */
export function text(raw: string | Buffer): string {
  return typeof raw === 'string' ? raw : raw.toString('utf8');
}

/** A name as bytes. */
export function bytes(raw: string | Buffer): Buffer {
  return typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, 40));
  if (typeof value === 'bigint') return `${value}n`; // a BigInt, which is no number here
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  return typeof value;
}

function integer(value: unknown, what: string, low: number, high: number, unit = ' ms'): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < low || value > high) {
    throw new InvalidArgumentError(`dlock: ${what} must be an integer from ${low} to ${high}${unit}, not ${describe(value)}`);
  }
  return value;
}

/**
 * A TTL or a lease in ms. A session lock's floor is dlockd's 1000 ms: refused here rather
 * than raised, since the caller plans around the lease it asked for.
 */
export function ttl(value: unknown, session: boolean, what = 'ttl'): number {
  return integer(value, session ? `${what} of a session lock` : what, session ? SESSION_TTL_MIN_MS : TTL_MIN_MS, MS_MAX);
}

/**
 * A duration in ms from 1 to 2^31 - 1. Not 0: a timeout of 0 would fail every call, and
 * dlockd reads a MAXHOLD of 0 as "no limit", which would turn off its operator's
 * --max-hold.
 */
export function duration(value: unknown, what: string): number {
  return integer(value, what, 1, MS_MAX);
}

/**
 * A wait in ms as dlockd's WAIT takes it: 0 tries once, up to 2^31 - 1 ms waits that
 * long, Infinity waits without end (sent as -1). A negative wait is refused, not read as
 * "forever" (which dlockd's -1 means) nor as "not at all". A fraction is rounded up, so
 * that a wait shorter than a ms still waits.
 */
export function wait(value: unknown): number {
  if (value === Infinity) return -1;
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0 || value > MS_MAX) {
    throw new InvalidArgumentError(
      `dlock: wait must be 0 (try once) to ${MS_MAX} ms, or Infinity (no end); not ${describe(value)}`,
    );
  }
  return Math.ceil(value);
}

export function waitText(ms: number): string {
  return ms < 0 ? 'an endless wait' : `${ms} ms`;
}

export function permits(value: unknown): number {
  return integer(value, 'permits', 1, MS_MAX, '');
}

export function qty(value: unknown, what = 'qty', low = 1): number {
  return integer(value, what, low, QTY_MAX, '');
}

export function delta(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value === 0 || Math.abs(value) > QTY_MAX) {
    throw new InvalidArgumentError(`dlock: delta must be a nonzero integer, at most ${QTY_MAX} either way, not ${describe(value)}`);
  }
  return value;
}

export function label(value: unknown): string | Buffer {
  if (typeof value !== 'string' && !(value instanceof Uint8Array)) {
    throw new InvalidArgumentError(`dlock: label must be a string, not ${describe(value)}`);
  }
  if (typeof value === 'string' && LONE_SURROGATE.test(value)) {
    throw new InvalidArgumentError('dlock: label is not valid UTF-8 (a lone surrogate)');
  }
  const raw = typeof value === 'string' ? value : Buffer.from(value);
  const size = typeof raw === 'string' ? Buffer.byteLength(raw, 'utf8') : raw.length;
  if (size < 1 || size > LABEL_MAX || (typeof raw === 'string' ? raw.includes('\0') : raw.includes(0))) {
    throw new InvalidArgumentError(`dlock: label must be 1 to ${LABEL_MAX} bytes, without NUL`);
  }
  return raw;
}

/** A fence given to adopt(): what LOCK replies, an integer from 0 to 2^53 - 1. */
export function fence(value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(`dlock: fence must be an integer from 0 to ${Number.MAX_SAFE_INTEGER}, not ${describe(value)}`);
  }
  return value;
}

/** A flag: true, false or not given; anything else is a mistake, not "false". */
export function flag(value: unknown, what: string): boolean {
  if (value === undefined || value === false) return false;
  if (value === true) return true;
  throw new InvalidArgumentError(`dlock: ${what} must be true or false, not ${describe(value)}`);
}

/**
 * Refuses an option `allowed` does not have: a misspelt one ({ ttlMs: 5 }) would
 * otherwise be ignored, and the lock taken with the defaults.
 */
export function known(opts: object, allowed: ReadonlySet<string>, what: string): void {
  for (const k in opts) {
    if (!allowed.has(k)) {
      throw new InvalidArgumentError(`dlock: unknown option '${k}' of ${what} (known: ${[...allowed].join(', ')})`);
    }
  }
}

const HEX32 = /^[0-9a-f]{32}$/;

export function token(value: unknown, what = 'a token'): string {
  if (typeof value !== 'string' || !HEX32.test(value)) {
    throw new InvalidArgumentError(`dlock: ${what} is 32 lowercase hex characters`);
  }
  return value;
}

/** The options of a LOCK or a SEM ACQUIRE. */
export interface AcquireOptions {
  /** The lease in ms (default 30000). A session lock's is at least 1000. */
  ttl?: number;
  /** ms to wait for the holder: 0 (the default) tries once, Infinity waits without end. */
  wait?: number;
  /** A plain lease, not renewed, that outlives the connection. */
  detached?: boolean;
  /** First come, first served among the waiters of the name. */
  fair?: boolean;
  /** A shared (read) holder: overlaps other shared holders, excludes an exclusive one. */
  shared?: boolean;
  /** A session lock held this long (ms) is released by dlockd, however often renewed. */
  maxHold?: number;
  /** Who holds the lock, as operators see it (up to 256 bytes). */
  label?: string;
  /** Cancels the wait: the lock is not taken, and the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /** ms allowed beyond the wait for dlockd to answer (default: the client's timeout). */
  timeout?: number;
}

/** A LOCK or SEM ACQUIRE, checked and built. */
export interface AcquireCommand {
  args: (string | Buffer)[];
  /** The wait in ms; -1 without end. */
  waitMs: number;
  /** Where WAIT is in args (-1: not there). */
  waitAt: number;
  detached: boolean;
  /** The lease asked for, in ms. */
  ttlMs: number;
}

const ACQUIRE_OPTIONS: ReadonlySet<string> = new Set([
  'ttl', 'wait', 'detached', 'fair', 'shared', 'maxHold', 'label', 'signal', 'timeout',
]);

/** The command with another wait (what is left of it, on a retry): 0 tries once. */
export function withWait(cmd: AcquireCommand, waitMs: number): (string | Buffer)[] {
  if (cmd.waitAt < 0 || waitMs === cmd.waitMs) return cmd.args;
  const out = cmd.args.slice();
  if (waitMs === 0) out.splice(cmd.waitAt, 2);
  else out[cmd.waitAt + 1] = String(waitMs);
  return out;
}

/** LOCK or SEM ACQUIRE (`head`: the command and what precedes the options). */
export function acquireCommand(
  head: (string | Buffer)[],
  opts: AcquireOptions,
  defaults: { maxHold?: number; label?: string },
): AcquireCommand {
  if (opts === null || typeof opts !== 'object') {
    throw new InvalidArgumentError('dlock: the options must be an object ({ttl, wait, ...})');
  }
  known(opts, ACQUIRE_OPTIONS, 'a lock');
  const detached = flag(opts.detached, 'detached');
  const ttlMs = ttl(opts.ttl ?? DEFAULT_TTL, !detached);
  const args = [...head, 'TTL', String(ttlMs)];
  const waitMs = wait(opts.wait ?? 0);
  let waitAt = -1;
  if (waitMs !== 0) {
    waitAt = args.length;
    args.push('WAIT', String(waitMs));
  }
  if (detached) args.push('DETACHED');
  if (flag(opts.fair, 'fair')) args.push('FAIR');
  if (flag(opts.shared, 'shared')) args.push('SHARED');
  if (opts.maxHold !== undefined) {
    if (detached) {
      throw new InvalidArgumentError('dlock: maxHold is for session locks: a detached lock ends with its ttl');
    }
    args.push('MAXHOLD', String(duration(opts.maxHold, 'maxHold')));
  } else if (!detached && defaults.maxHold !== undefined) {
    args.push('MAXHOLD', String(defaults.maxHold));
  }
  const lbl = opts.label ?? defaults.label;
  if (lbl !== undefined) args.push('LABEL', label(lbl));
  if (opts.timeout !== undefined) duration(opts.timeout, 'timeout');
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('dlock: signal must be an AbortSignal');
  }
  return { args, waitMs, waitAt, detached, ttlMs };
}

// Leader election ----------------------------------------------------------------------

/** dlockd's limit on a leader's value, in bytes. */
export const LEADER_VALUE_MAX = 1024;

/**
 * A leader's value: a string of up to 1024 bytes as UTF-8, empty allowed, no NUL. Only
 * strings, since observers and LEADER give it back as one: bytes that are not UTF-8
 * would come back changed.
 */
export function leaderValue(value: unknown): string {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(`dlock: a leader's value must be a string, not ${describe(value)}`);
  }
  if (LONE_SURROGATE.test(value)) {
    throw new InvalidArgumentError("dlock: a leader's value is not valid UTF-8 (a lone surrogate)");
  }
  const size = Buffer.byteLength(value, 'utf8');
  if (size > LEADER_VALUE_MAX || value.includes('\0')) {
    throw new InvalidArgumentError(`dlock: a leader's value must be 0 to ${LEADER_VALUE_MAX} bytes, without NUL, not ${size}`);
  }
  return value;
}

/** The options of an ELECT: a campaign to lead an election. */
export interface ElectOptions {
  /** What the leader announces to observers (say its address): up to 1024 bytes, default ''. */
  value?: string;
  /**
   * The leadership's lease in ms (default 30000, at least 1000). dlockd renews it while
   * the leader's connection is open, so it only bounds how long a dlockd that dies with
   * the connection keeps the other candidates waiting.
   */
  ttl?: number;
  /**
   * ms to campaign before giving up. Unlike a lock's, the default is Infinity: a
   * candidate usually stands by until it leads. 0 tries once.
   */
  wait?: number;
  /** First come, first served among the candidates waiting. */
  fair?: boolean;
  /** Who leads, as operators see it (up to 256 bytes). */
  label?: string;
  /** Cancels the campaign: the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /** ms allowed beyond the wait for dlockd to answer (default: the client's timeout). */
  timeout?: number;
}

const ELECT_OPTIONS: ReadonlySet<string> = new Set(['value', 'ttl', 'wait', 'fair', 'label', 'signal', 'timeout']);

/**
 * ELECT, as acquireCommand() builds a LOCK, so that it is sent, retried and bounded as
 * a session lock is. dlockd's ELECT takes no MAXHOLD: the client's maxHold does not
 * apply (dlockd's --max-hold does).
 */
export function electCommand(raw: string | Buffer, opts: ElectOptions, defaults: { label?: string }): AcquireCommand {
  if (opts === null || typeof opts !== 'object') {
    throw new InvalidArgumentError('dlock: the options must be an object ({value, ttl, wait, ...})');
  }
  known(opts, ELECT_OPTIONS, 'an election');
  const ttlMs = integer(opts.ttl ?? DEFAULT_TTL, 'ttl of a leadership', SESSION_TTL_MIN_MS, MS_MAX);
  const args: (string | Buffer)[] = ['ELECT', raw, 'TTL', String(ttlMs)];
  const waitMs = wait(opts.wait ?? Infinity);
  let waitAt = -1;
  if (waitMs !== 0) {
    waitAt = args.length;
    args.push('WAIT', String(waitMs));
  }
  if (opts.value !== undefined) args.push('VALUE', leaderValue(opts.value));
  if (flag(opts.fair, 'fair')) args.push('FAIR');
  const lbl = opts.label ?? defaults.label;
  if (lbl !== undefined) args.push('LABEL', label(lbl));
  if (opts.timeout !== undefined) duration(opts.timeout, 'timeout');
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('dlock: signal must be an AbortSignal');
  }
  return { args, waitMs, waitAt, detached: false, ttlMs };
}

// Replies ----------------------------------------------------------------------------

function show(reply: unknown): string {
  let s: string;
  try {
    s = JSON.stringify(reply) ?? String(reply);
  } catch {
    s = String(reply);
  }
  return s.slice(0, 200);
}

/**
 * An integer reply as a number, or undefined when it is not one. An ioredis client made
 * with `stringNumbers` reads integers as strings: those are taken too, when exact.
 */
function int(v: unknown): number | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? v : undefined;
  if (typeof v === 'string' && /^-?[0-9]{1,16}$/.test(v)) {
    const n = Number(v);
    return Number.isSafeInteger(n) ? n : undefined;
  }
  return undefined;
}

/** LOCK's and SEM ACQUIRE's grant. */
export interface Grant {
  token: string;
  fence: number;
  validityMs: number;
}

/**
 * LOCK's and SEM ACQUIRE's reply: the grant, or null (nil: not acquired). A fence is
 * server time in microseconds (about 1.8e15 today), exact in a double up to 2^53 (about
 * 9e15, the year 2255); one past that would not be exact, and is refused.
 */
export function grant(reply: unknown, command: string): Grant | null {
  if (reply === null) return null;
  if (
    !Array.isArray(reply) ||
    reply.length !== 3 ||
    typeof reply[0] !== 'string' ||
    !HEX32.test(reply[0]) ||
    int(reply[1]) === undefined ||
    int(reply[2]) === undefined
  ) {
    throw new ProtocolError(`dlockd: ${command} replied ${show(reply)}, not [token, fence, validity]`);
  }
  return { token: reply[0], fence: int(reply[1]) as number, validityMs: int(reply[2]) as number };
}

/** A 1 or 0 reply as a boolean. */
export function bool(reply: unknown, command: string): boolean {
  const n = int(reply);
  if (n !== 0 && n !== 1) {
    throw new ProtocolError(`dlockd: ${command} replied ${show(reply)}, not 1 or 0`);
  }
  return n === 1;
}

/** A flat array of field/value pairs (LOCKINFO, STOCK's state) as an object. */
export function mapping(reply: unknown, command: string): Record<string, unknown> {
  if (!Array.isArray(reply) || reply.length % 2 !== 0) {
    throw new ProtocolError(`dlockd: ${command} replied ${show(reply)}, not field/value pairs`);
  }
  const out: Record<string, unknown> = {};
  for (let i = 0; i < reply.length; i += 2) out[String(reply[i])] = reply[i + 1];
  return out;
}

/** What `client.info(name)` resolves to: LOCKINFO's fields, named as dlockd names them. */
export interface LockInfo {
  state: 'held' | 'free';
  /** The exclusive holder's description; for shared holders, each one's; null when free. */
  holder: string | string[] | null;
  /** The lease left, ms (0 when free). */
  remaining_ms: number;
  /** The last fence issued for the name (0: none yet). */
  fence: number;
  /** Present only when shared holders hold it: how many. */
  shared?: number;
}

export function info(reply: unknown): LockInfo {
  const m = mapping(reply, 'LOCKINFO');
  const { state, holder } = m;
  const remaining = int(m.remaining_ms);
  const fence = int(m.fence);
  const shared = m.shared === undefined ? undefined : int(m.shared);
  const holderOk =
    holder === null || typeof holder === 'string' || (Array.isArray(holder) && holder.every((h) => typeof h === 'string'));
  if (
    (state !== 'held' && state !== 'free') ||
    !holderOk ||
    remaining === undefined ||
    fence === undefined ||
    (m.shared !== undefined && shared === undefined)
  ) {
    throw new ProtocolError(`dlockd: LOCKINFO replied ${show(reply)}`);
  }
  const out: LockInfo = {
    state,
    holder: holder as string | string[] | null,
    remaining_ms: remaining,
    fence,
  };
  if (shared !== undefined) out.shared = shared;
  return out;
}

const STOCK_FIELDS = ['stock', 'available', 'reserved', 'sold', 'reservations', 'waiters'];

export function stockState(reply: unknown, command: string): StockState {
  const m = mapping(reply, command);
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(m)) {
    const n = int(v);
    if (n !== undefined) out[k] = n;
  }
  for (const f of STOCK_FIELDS) {
    if (out[f] === undefined) throw new ProtocolError(`dlockd: ${command} replied without '${f}'`);
  }
  return out as StockState;
}

export function reservationId(reply: unknown): string | null {
  if (reply === null) return null;
  if (typeof reply !== 'string' || !HEX32.test(reply)) {
    throw new ProtocolError(`dlockd: STOCK RESERVE replied ${show(reply)}, not an id or nil`);
  }
  return reply;
}

/** Who leads an election, as `client.leader(name)` resolves. */
export interface LeaderInfo {
  /** What the leader announced ('' when nothing). */
  value: string;
  /** The leader's description (its address, through which dlockd), as LOCKINFO shows a holder. */
  holder: string;
  /** The leader's term: larger than every earlier leader's of the name. */
  term: number;
  /** The lease left, in ms. */
  remainingMs: number;
}

/** LEADER's reply: [value, holder, term, remaining_ms], or nil when no one leads. */
export function leaderInfo(reply: unknown): LeaderInfo | null {
  if (reply === null) return null;
  if (!Array.isArray(reply) || reply.length !== 4 || typeof reply[0] !== 'string' || typeof reply[1] !== 'string') {
    throw new ProtocolError(`dlockd: LEADER replied ${show(reply)}, not [value, holder, term, remaining_ms]`);
  }
  const term = int(reply[2]);
  const remainingMs = int(reply[3]);
  if (term === undefined || term <= 0 || remainingMs === undefined) {
    throw new ProtocolError(`dlockd: LEADER replied ${show(reply)}, not [value, holder, term, remaining_ms]`);
  }
  return { value: reply[0], holder: reply[1], term, remainingMs };
}

/** A change an observer of an election hears: term 0 and value null when no one leads. */
export interface LeaderChange {
  term: number;
  value: string | null;
}

/**
 * A message of a leader:NAME channel: "TERM VALUE" (split at the first space: the value
 * may hold spaces, and is empty when the leader announced nothing), or "0" when no one
 * leads. A term past 2^53 would not be exact, and is refused as a fence is.
 */
export function leaderMessage(payload: Buffer): LeaderChange {
  const s = payload.toString('utf8');
  if (s === '0') return { term: 0, value: null };
  const sp = s.indexOf(' ');
  const head = sp < 0 ? s : s.slice(0, sp);
  const term = /^[1-9][0-9]{0,15}$/.test(head) ? Number(head) : NaN;
  if (!Number.isSafeInteger(term)) {
    throw new ProtocolError(`dlockd: leader message ${show(s)} is not 'TERM VALUE' or '0'`);
  }
  return { term, value: sp < 0 ? '' : s.slice(sp + 1) };
}
