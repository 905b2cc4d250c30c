<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\Acquire;
use Dlock\Internal\Acquires;
use Dlock\Internal\Args;

/**
 * A semaphore of dlockd: at most $permits holders of the name at once (a permit is a
 * shared holder of the name; an exclusive lock of the name excludes them all). Every
 * user of a name passes the same number of permits: each acquire is admitted by its
 * own. More than one permit needs dlockd over one lock server.
 */
final class Semaphore
{
    use Acquires;

    /** @internal Client::semaphore() makes it */
    public function __construct(
        private Connection $conn,
        public readonly string $name,
        public readonly int $permits,
        private ?int $maxHoldMs = null,
        private ?string $label = null,
    ) {
        if ($permits < 1 || $permits > Args::MS_MAX) {
            throw new InvalidArgument(sprintf('dlock: permits must be 1 to %d, not %d', Args::MS_MAX, $permits));
        }
    }

    /**
     * Takes a permit: a Lock (release() gives it back), or null when none was free
     * within the wait. The parameters are Client::lock()'s.
     */
    public function acquire(
        int $ttlMs = Client::DEFAULT_TTL_MS,
        int $waitMs = 0,
        bool $fair = false,
        bool $detached = false,
        ?int $maxHoldMs = null,
        ?string $label = null,
    ): ?Lock {
        $head = ['SEM', 'ACQUIRE', $this->name, (string) $this->permits];
        return $this->acquireLock($this->name, $head, $ttlMs, $waitMs, false, $fair, $detached, $maxHoldMs, $label);
    }

    /**
     * Runs $fn holding a permit, gives it back however $fn ends, and returns $fn's
     * value; throws NotAcquired when no permit was free within the wait, LockLost when
     * the permit was lost meanwhile.
     */
    public function synchronized(
        callable $fn,
        int $ttlMs = Client::DEFAULT_TTL_MS,
        int $waitMs = 0,
        bool $fair = false,
        ?int $maxHoldMs = null,
        ?string $label = null,
    ): mixed {
        $permit = $this->acquire($ttlMs, $waitMs, $fair, false, $maxHoldMs, $label);
        if ($permit === null) {
            throw new NotAcquired(sprintf(
                "dlock: no permit of semaphore '%s' (%d permits) free within %s",
                $this->name,
                $this->permits,
                Acquire::waitText($waitMs)
            ));
        }
        return Acquire::holding($permit, $fn, "permit of semaphore '{$this->name}'");
    }
}
