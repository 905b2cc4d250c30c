<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Lock;

/**
 * The session locks this process holds, released by one shutdown function when the
 * request ends, however it ends.
 *
 * PHP runs shutdown functions after the script returns, after an uncaught exception,
 * after exit() and after a fatal error proper (memory_limit, max_execution_time), which
 * skip `finally` blocks. On a persistent connection (phpredis pconnect, predis
 * `persistent`) a session lock lives as long as the PHP-FPM worker's connection, not
 * the request: without this, a request that died inside its critical section would
 * leave its lock held, renewed by dlockd, for as long as the worker lives. Only a
 * worker killed outright skips shutdown functions, and then its connection closes with
 * it, which releases the lock.
 *
 * One function for the process, registered at the first session lock, and a list that
 * holds only the locks held now: a long-running worker that takes millions of locks
 * keeps neither closures nor entries for them.
 *
 * @internal
 */
final class Session
{
    /**
     * Each held lock with the process that took it: a child forked since (pcntl_fork)
     * inherits the list and the parent's connections, and its exit must leave the
     * parent's locks alone.
     *
     * @var array<int, array{Lock, int}>
     */
    private static array $held = [];
    private static bool $registered = false;

    public static function add(Lock $lock): void
    {
        if (!self::$registered) {
            register_shutdown_function([self::class, 'releaseAll']);
            self::$registered = true;
        }
        self::$held[spl_object_id($lock)] = [$lock, getmypid()];
    }

    public static function remove(Lock $lock): void
    {
        unset(self::$held[spl_object_id($lock)]);
    }

    public static function count(): int
    {
        return count(self::$held);
    }

    /**
     * Releases every session lock still held. An error cannot be reported here (an
     * exception in a shutdown function is one more fatal error); a lock whose UNLOCK
     * failed is abandoned instead: its persistent connection is closed, and dlockd
     * releases a session lock when its connection closes.
     */
    public static function releaseAll(): void
    {
        $pid = getmypid();
        foreach (self::$held as [$lock, $owner]) {
            if ($owner !== $pid) {
                continue;
            }
            try {
                $lock->release();
            } catch (\Throwable) {
                $lock->abandon();
            }
        }
        self::$held = [];
    }
}
