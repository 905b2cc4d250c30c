<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Client;
use Dlock\InvalidArgument;
use Dlock\Lock;
use Dlock\LockLost;
use Dlock\ProtocolError;

/**
 * What a lock and a semaphore's permit share: LOCK and SEM ACQUIRE take the same
 * options and give the same reply, and synchronized() runs a callable under either.
 *
 * @internal
 */
final class Acquire
{
    /**
     * Sends LOCK or SEM ACQUIRE with the options, and returns the reply as a Lock, or
     * null when not acquired within the wait.
     *
     * @param string       $name the lock's or the semaphore's name
     * @param list<string> $args the command and what comes before the options
     */
    public static function lock(
        Connection $conn,
        string $name,
        array $args,
        int $ttlMs,
        int $waitMs,
        bool $shared,
        bool $fair,
        bool $detached,
        ?int $maxHoldMs,
        ?string $label,
    ): ?Lock {
        array_push($args, 'TTL', Args::ttl($ttlMs));
        $wait = Args::wait($waitMs);
        if ($wait !== 0) {
            array_push($args, 'WAIT', (string) $wait);
        }
        foreach (['DETACHED' => $detached, 'FAIR' => $fair, 'SHARED' => $shared] as $flag => $on) {
            if ($on) {
                $args[] = $flag;
            }
        }
        if ($maxHoldMs !== null) {
            if ($detached) {
                throw new InvalidArgument('dlock: maxHoldMs is for session locks: a detached lock ends with its TTL');
            }
            array_push($args, 'MAXHOLD', Args::ms($maxHoldMs, 'maxHoldMs'));
        }
        if ($label !== null) {
            array_push($args, 'LABEL', Args::label($label));
        }
        $reply = $conn->call($args, $wait);
        if ($reply === null) {
            return null;
        }
        [$token, $fence, $validity] = self::grant($reply, $args[0]);
        return new Lock($conn, $name, $token, $fence, $validity, $detached);
    }

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
