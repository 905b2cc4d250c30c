<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Leadership;
use Dlock\Lock;

/**
 * The session locks and leaderships this process holds, released (resigned) by one
 * shutdown function when the request ends, however it ends.
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
 * A Lock is listed as itself, so that a lock the application dropped without release()
 * is still released here. A Leadership is listed by a weak reference: it resigns when
 * the application drops it (its destructor), so the list must not keep it alive.
 *
 * @internal
 */
final class Session
{
    /**
     * Each held lock or leadership with the process that took it: a child forked since
     * (pcntl_fork) inherits the list and the parent's connections, and its exit must
     * leave the parent's locks alone.
     *
     * @var array<int, array{Lock|\WeakReference, int}>
     */
    private static array $held = [];
    private static bool $registered = false;

    public static function add(Lock|Leadership $held): void
    {
        if (!self::$registered) {
            register_shutdown_function([self::class, 'releaseAll']);
            self::$registered = true;
        }
        self::$held[spl_object_id($held)] = [
            $held instanceof Leadership ? \WeakReference::create($held) : $held,
            getmypid(),
        ];
    }

    public static function remove(Lock|Leadership $held): void
    {
        unset(self::$held[spl_object_id($held)]);
    }

    public static function count(): int
    {
        return count(self::$held);
    }

    /**
     * Releases every session lock still held, and resigns every leadership. An error
     * cannot be reported here (an exception in a shutdown function is one more fatal
     * error); a lock whose UNLOCK (or RESIGN) failed is abandoned instead: its
     * persistent connection is closed, and dlockd releases a session lock when its
     * connection closes.
     */
    public static function releaseAll(): void
    {
        $pid = getmypid();
        foreach (self::$held as [$entry, $owner]) {
            $held = $entry instanceof \WeakReference ? $entry->get() : $entry;
            if ($owner !== $pid || $held === null) {
                continue;
            }
            try {
                $held instanceof Leadership ? $held->resign() : $held->release();
            } catch (\Throwable) {
                $held->abandon();
            }
        }
        self::$held = [];
    }
}
