<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\InvalidArgument;
use Dlock\Lock;

/**
 * What Client and Semaphore share: LOCK and SEM ACQUIRE take the same options and give
 * the same reply, and both are sent with the client's defaults (MAXHOLD for session
 * locks, the label) for the options not given. The class that uses it has $conn (the
 * client's Connection), $maxHoldMs and $label (the client's defaults).
 *
 * @internal
 */
trait Acquires
{
    /**
     * Sends LOCK or SEM ACQUIRE with the options, and returns the reply as a Lock, or
     * null when not acquired within the wait.
     *
     * @param string       $name the lock's or the semaphore's name
     * @param list<string> $args the command and what comes before the options
     */
    private function acquireLock(
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
        $maxHoldMs ??= $detached ? null : $this->maxHoldMs;
        $label ??= $this->label;
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
        $reply = $this->conn->call($args, $wait);
        if ($reply === null) {
            return null;
        }
        [$token, $fence, $validity] = Acquire::grant($reply, $args[0]);
        return new Lock($this->conn, $name, $token, $fence, $validity, $detached);
    }
}
