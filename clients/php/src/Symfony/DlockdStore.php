<?php

declare(strict_types=1);

namespace Dlock\Symfony;

use Dlock\Client;
use Dlock\Lock;
use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockExpiredException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\SharedLockStoreInterface;

/**
 * Symfony Lock's store on dlockd: an application on LockFactory switches with one line,
 *
 *     $factory = new LockFactory(new DlockdStore($redis));   // $redis connected to dlockd
 *
 * and gets dlockd's waits without polling (acquire(true) and acquireRead(true) are one
 * LOCK ... WAIT each, answered when the holder releases) and its fences.
 *
 * The locks are DETACHED: leases of the Key's TTL, renewed by refresh() (EXTEND), not by
 * dlockd, and not tied to the connection. That is what Symfony's own RedisStore does
 * and what its Lock expects: several Lock objects, in one request or in several, may
 * share one connection, and a Key may be serialized and released elsewhere. A lock whose
 * process dies is free when its TTL ends.
 *
 * Changing a held Key's mode (acquire() after acquireRead(), or the reverse) releases
 * the old lock and takes the new one: another client may get the lock in between, and
 * the acquire then fails as a conflict (the Key takes its old mode back when it can).
 *
 * The fence of a Key's lock is in its state: `$key->getState(DlockdStore::class)
 * ['fence']`. One store per Key: dlockd gives the tokens, so a Key keeps one of them,
 * and Symfony's CombinedStore over several DlockdStores does not work; one dlockd over
 * several lock servers is the quorum instead (dlockd -s URL1,URL2,URL3).
 */
final class DlockdStore implements BlockingStoreInterface, SharedLockStoreInterface, BlockingSharedLockStoreInterface
{
    private Client $dlock;

    /**
     * @param \Redis|\Predis\Client|Client $redis      connected to dlockd
     * @param float                         $initialTtl the lease of a lock in seconds
     *                                                  until the Lock sets its own
     *                                                  (refresh)
     */
    public function __construct(object $redis, private float $initialTtl = 300.0)
    {
        self::ms($initialTtl);
        $this->dlock = $redis instanceof Client ? $redis : new Client($redis);
    }

    public function save(Key $key): void
    {
        $this->take($key, false, 0);
    }

    public function saveRead(Key $key): void
    {
        $this->take($key, true, 0);
    }

    public function waitAndSave(Key $key): void
    {
        $this->take($key, false, Client::FOREVER);
    }

    public function waitAndSaveRead(Key $key): void
    {
        $this->take($key, true, Client::FOREVER);
    }

    public function putOffExpiration(Key $key, float $ttl): void
    {
        // The lease runs from when dlockd gets the EXTEND: the Key's from before it is
        // sent, so that it never outlives the lease (as Symfony's own stores do).
        $key->reduceLifetime($ttl);
        $lock = $this->held($key);
        if ($lock === null || !$lock->extend(self::ms($ttl))) {
            $key->removeState(__CLASS__);
            throw new LockConflictedException();
        }
        self::checkNotExpired($key);
    }

    public function delete(Key $key): void
    {
        $lock = $this->held($key);
        if ($lock !== null) {
            $lock->release();
            $key->removeState(__CLASS__);
        }
    }

    public function exists(Key $key): bool
    {
        $lock = $this->held($key);
        return $lock !== null && $lock->isHeld();
    }

    /**
     * Takes the Key's lock in the mode asked (shared or not), waiting up to $waitMs;
     * a Key that holds it in that mode already gets a fresh lease instead. A Key that
     * holds it in the other mode gives that up first (dlockd has no atomic change of
     * mode) and, when the new mode is refused, takes the old one back if it still can.
     */
    private function take(Key $key, bool $shared, int $waitMs): void
    {
        $lock = $this->held($key);
        if ($lock !== null) {
            $was = $key->getState(__CLASS__)['shared'];
            $start = microtime(true);
            if ($was === $shared && $lock->extend(self::ms($this->initialTtl))) {
                // The lease runs from before the EXTEND went out, never from after.
                $key->reduceLifetime($this->initialTtl - (microtime(true) - $start));
                self::checkNotExpired($key);
                return;
            }
            $lock->release();
            $key->removeState(__CLASS__);
            if ($was !== $shared && !$this->grant($key, $shared, $waitMs)) {
                $this->grant($key, $was, 0);
                throw new LockConflictedException();
            }
            if ($was !== $shared) {
                return;
            }
        }
        if (!$this->grant($key, $shared, $waitMs)) {
            throw new LockConflictedException();
        }
    }

    /** A new lock for the Key, its state and its lifetime; false when not acquired. */
    private function grant(Key $key, bool $shared, int $waitMs): bool
    {
        $lock = $this->dlock->lock((string) $key, self::ms($this->initialTtl), $waitMs, shared: $shared, detached: true);
        if ($lock === null) {
            return false;
        }
        $key->setState(__CLASS__, ['token' => $lock->token, 'shared' => $shared, 'fence' => $lock->fence]);
        $key->reduceLifetime($lock->validityMs / 1000);
        self::checkNotExpired($key);
        return true;
    }

    /** The lock the Key holds from this store, by its token, or null. */
    private function held(Key $key): ?Lock
    {
        if (!$key->hasState(__CLASS__)) {
            return null;
        }
        return $this->dlock->adopt((string) $key, $key->getState(__CLASS__)['token']);
    }

    /** Seconds as dlockd's ms, rounded up: a lease is never shorter than asked. */
    private static function ms(float $seconds): int
    {
        // dlockd's range: a Key that outlived its lease would think itself held.
        if ($seconds < 0.01 || $seconds > 2147483.647) {
            throw new InvalidTtlException(sprintf('A dlockd lock TTL must be 0.01 to 2147483.647 seconds, not %s.', $seconds));
        }
        return (int) ceil($seconds * 1000);
    }

    private static function checkNotExpired(Key $key): void
    {
        if ($key->isExpired()) {
            throw new LockExpiredException(sprintf('Failed to store the "%s" lock.', $key));
        }
    }
}
