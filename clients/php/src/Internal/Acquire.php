<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Client;
use Dlock\Lock;
use Dlock\LockLost;
use Dlock\ProtocolError;

/**
 * What the grants share: LOCK's, SEM ACQUIRE's and ELECT's reply, and synchronized(),
 * which runs a callable under a lock or a semaphore's permit (the commands themselves:
 * the Acquires trait).
 *
 * @internal
 */
final class Acquire
{
    /**
     * A grant's reply (LOCK's, SEM ACQUIRE's, ELECT's) checked for its shape:
     * [token, fence, validity in ms].
     *
     * @return array{string, int, int}
     */
    public static function grant(mixed $reply, string $command): array
    {
        if (!is_array($reply) || count($reply) !== 3 || !is_string($reply[0])
            || !is_int($reply[1]) || !is_int($reply[2])) {
            throw new ProtocolError(sprintf(
                'dlockd: %s replied %s, not [token, fence, validity]',
                $command,
                Args::show($reply)
            ));
        }
        return [$reply[0], $reply[1], $reply[2]];
    }

    /**
     * Runs $fn holding $lock, releases it however $fn ends, and returns $fn's value;
     * LockLost when the release found the lock gone.
     */
    public static function holding(Lock $lock, callable $fn, string $what): mixed
    {
        try {
            $result = $fn($lock);
        } catch (\Throwable $e) {
            try {
                $lock->release();
            } catch (\Throwable) {
                // $fn's exception is the one to report; the lock goes with its session.
            }
            throw $e;
        }
        // A callable that released the lock itself ended the section on purpose.
        if (!$lock->wasReleased() && !$lock->release()) {
            throw new LockLost("dlock: $what was lost before the callable returned: its work was not wholly under the lock");
        }
        return $result;
    }

    public static function waitText(?int $waitMs): string
    {
        return $waitMs === null || $waitMs === Client::FOREVER ? 'an endless wait' : "$waitMs ms";
    }
}
