// Taking a lock or a permit from dlockd, on the connection the command calls for.

import * as args from './args';
import { Lock, LockKind } from './lock';
import { Pool, broken } from './pool';

/** The routine of using(): its signal aborts when the lock is lost. */
export type Routine<T> = (signal: AbortSignal, lock: Lock) => T | Promise<T>;

/**
 * Takes a lock or a permit: the Lock, or null when not acquired within the wait.
 *
 * A detached LOCK without a wait is one round trip on the shared connection. Anything
 * else takes a dedicated connection: a session lock keeps it for as long as it is held,
 * and a waiting command blocks it until served. The wait is bounded here (wait +
 * timeout), not by ioredis's commandTimeout: past it, or when the signal aborts, the
 * connection is closed, which makes dlockd drop the waiter and release a session grant
 * that came meanwhile.
 *
 * @internal
 */
export async function take(
  pool: Pool,
  cmd: args.AcquireCommand,
  name: Buffer,
  kind: LockKind,
  opts: args.AcquireOptions,
): Promise<Lock | null> {
  const command = kind === 'lock' ? 'LOCK' : 'SEM ACQUIRE';
  const signal = opts.signal;
  const timeout = opts.timeout ?? pool.timeoutMs;
  if (cmd.detached && cmd.waitMs === 0) {
    const g = args.grant(await pool.call(cmd.args, 0, signal), command);
    if (g === null) return null;
    if (signal?.aborted) {
      // Cancelled as the grant came: nobody will hold it, so give it back now rather
      // than leave it to its lease.
      pool.call(['UNLOCK', name, g.token]).catch(() => undefined);
      throw signal.reason;
    }
    return new Lock(pool, name, g, true, null, kind);
  }
  const bound = cmd.waitMs < 0 ? null : cmd.waitMs + timeout;
  for (let attempt = 0; ; attempt++) {
    const { conn, reused } = await pool.take(signal);
    let reply: unknown;
    try {
      reply = await pool.exchange(conn, cmd.args, bound, signal);
    } catch (e) {
      // An idle connection dlockd closed meanwhile (--timeout-idle, a restart) fails its
      // first command without running it; a session grant cannot outlive the closed
      // connection, so the LOCK is sent once more on a new one.
      if (reused && attempt === 0 && !cmd.detached && broken(e) && !signal?.aborted) {
        pool.destroy(conn);
        continue;
      }
      // An error reply leaves the connection in step and holding nothing new.
      pool.give(conn, true);
      throw e;
    }
    let g: args.Grant | null;
    try {
      g = args.grant(reply, command);
    } catch (e) {
      pool.destroy(conn);
      throw e;
    }
    if (g === null || cmd.detached) {
      pool.give(conn, true);
      return g === null ? null : new Lock(pool, name, g, true, null, kind);
    }
    return new Lock(pool, name, g, false, conn, kind);
  }
}

