// Taking a lock or a permit from dlockd, on the connection the command calls for.

import type Redis from 'ioredis';
import * as args from './args';
import { Lock, LockKind } from './lock';
import { Args, Pool, broken } from './pool';

/** The routine of using(): its signal aborts when the lock is lost. */
export type Routine<T> = (signal: AbortSignal, lock: Lock) => T | Promise<T>;

/**
 * How soon after sending a failure must come to be taken for a stale idle connection's
 * (closed by dlockd while idle, its close not yet read): such a connection fails its
 * first command at once, by a write error or the close already on its way. A failure
 * later than this came while the command was in dlockd's hands, and is not retried.
 */
const STALE_MS = 50;

/** A command that waits on a connection of its own. */
export interface Waiting {
  /** The command, with the wait it is to send (what is left of it on a retry). */
  build: (waitMs: number) => Args;
  /** The wait in ms; -1 without end. */
  waitMs: number;
  timeoutMs: number;
  signal?: AbortSignal;
  /** Whether a stale idle connection's failure may be retried on a new one. */
  retry: boolean;
  /** Gets a reply that came after the command was given up. */
  onLate?: (reply: unknown) => void;
}

/**
 * Sends a command on a dedicated connection and waits for its reply, all within one
 * deadline: the wait plus the timeout from the call, connecting included. An idle
 * connection found closed by its first command's immediate failure is replaced once,
 * with the wait that is left.
 *
 * @internal
 */
export async function onDedicated(pool: Pool, w: Waiting): Promise<{ conn: Redis; reply: unknown }> {
  const t0 = Date.now();
  const deadline = w.waitMs < 0 ? null : t0 + w.waitMs + w.timeoutMs;
  for (let attempt = 0; ; attempt++) {
    const connectMs = deadline === null ? w.timeoutMs : Math.max(1, Math.min(w.timeoutMs, deadline - Date.now()));
    const { conn, reused } = await pool.take(w.signal, connectMs);
    const waitMs = w.waitMs <= 0 ? w.waitMs : Math.max(0, t0 + w.waitMs - Date.now());
    const sent = Date.now();
    const bound = deadline === null ? null : Math.max(0, deadline - sent);
    try {
      return { conn, reply: await pool.exchange(conn, w.build(waitMs), bound, w.signal, w.onLate) };
    } catch (e) {
      if (reused && attempt === 0 && w.retry && broken(e) && Date.now() - sent <= STALE_MS && !w.signal?.aborted) {
        pool.destroy(conn);
        continue;
      }
      // An error reply leaves the connection in step and holding nothing new (give()
      // does nothing with one exchange() closed).
      pool.give(conn, true);
      throw e;
    }
  }
}

/** The UNLOCK of a grant nobody holds (given up, cancelled): better now than at its TTL. */
function giveBack(pool: Pool, name: string | Buffer): (reply: unknown) => void {
  return (reply) => {
    let g: args.Grant | null = null;
    try {
      g = args.grant(reply, 'LOCK');
    } catch {
      return;
    }
    if (g !== null) pool.call(['UNLOCK', name, g.token]).catch(() => undefined);
  };
}

/**
 * Takes a lock or a permit: the Lock, or null when not acquired within the wait.
 *
 * A detached LOCK without a wait is one round trip on the shared connection. Anything
 * else takes a dedicated connection: a session lock keeps it for as long as it is held,
 * and a waiting command blocks it until served. The wait is bounded here (wait +
 * timeout), not by ioredis's commandTimeout: past it, or when the signal aborts, the
 * connection is closed, which makes dlockd drop the waiter and release a session grant
 * that came meanwhile; a detached grant that comes after is released here.
 *
 * @internal
 */
export async function take(
  pool: Pool,
  cmd: args.AcquireCommand,
  name: string | Buffer,
  kind: LockKind,
  opts: { signal?: AbortSignal; timeout?: number },
): Promise<Lock | null> {
  const command = kind === 'lock' ? 'LOCK' : kind === 'leadership' ? 'ELECT' : 'SEM ACQUIRE';
  const signal = opts.signal;
  const timeout = opts.timeout ?? pool.timeoutMs;
  if (cmd.detached && cmd.waitMs === 0) {
    const release = giveBack(pool, name);
    const g = args.grant(await pool.call(cmd.args, 0, signal, release, timeout), command);
    if (g === null) return null;
    if (signal?.aborted) {
      // Cancelled as the grant came: nobody will hold it, so give it back now rather
      // than leave it to its lease.
      pool.call(['UNLOCK', name, g.token]).catch(() => undefined);
      throw signal.reason;
    }
    return new Lock(pool, name, g, true, null, kind, cmd.ttlMs);
  }
  const { conn, reply } = await onDedicated(pool, {
    build: (waitMs) => args.withWait(cmd, waitMs),
    waitMs: cmd.waitMs,
    timeoutMs: timeout,
    signal,
    // A detached grant outlives the connection: a LOCK that may have been run is not
    // sent twice.
    retry: !cmd.detached,
    onLate: cmd.detached ? giveBack(pool, name) : undefined,
  });
  let g: args.Grant | null;
  try {
    g = args.grant(reply, command);
  } catch (e) {
    pool.destroy(conn);
    throw e;
  }
  if (g === null || cmd.detached) {
    pool.give(conn, true);
    return g === null ? null : new Lock(pool, name, g, true, null, kind, cmd.ttlMs);
  }
  return new Lock(pool, name, g, false, conn, kind, cmd.ttlMs);
}
