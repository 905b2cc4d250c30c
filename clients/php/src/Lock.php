<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Connection;
use Dlock\Internal\Args;
use Dlock\Internal\Session;

/**
 * A lock (or a semaphore's permit) held from dlockd: what Client::lock() and
 * Semaphore::acquire() return.
 *
 * A session lock (the default) is renewed by dlockd for as long as the connection it
 * was taken on stays open, and released when the connection closes or the request ends
 * (Client's shutdown guard); a detached one is a lease of ttlMs that outlives both, and
 * ends with release() (from any connection: Client::adopt()) or its TTL.
 */
final class Lock
{
    /** The connection's generation when the lock was granted (Connection::generation). */
    private int $generation;
    private bool $released = false;

    /**
     * @param string $name       the lock's name
     * @param string $token      what proves this holder: 32 hex characters
     * @param int    $fence      greater than every earlier holder's of the name: hand it
     *                           to the resource the lock protects, so that it can refuse
     *                           a holder that lost the lock and does not know it yet
     * @param int    $validityMs the lease left when the lock was granted, in ms (a
     *                           session lock's is renewed while its connection lives)
     * @param bool   $detached   a plain lease, not tied to the connection
     */
    public function __construct(
        private Connection $conn,
        public readonly string $name,
        public readonly string $token,
        public readonly int $fence,
        public readonly int $validityMs,
        public readonly bool $detached = false,
    ) {
        $this->generation = $conn->generation();
        if (!$detached) {
            Session::add($this);
        }
    }

    /**
     * Releases the lock: true when it was held with this token and is now free, false
     * when it was no longer held (released already, its lease ran out, broken, or its
     * session ended with its connection). Throws Unavailable when dlockd or its lock
     * servers could not be asked (the lock may still be held: a session lock goes with
     * its connection, which is closed after a timeout; a detached one with its TTL).
     */
    public function release(): bool
    {
        if ($this->released || $this->sessionEnded()) {
            $this->forget();
            return false;
        }
        $held = Args::bool($this->conn->call(['UNLOCK', $this->name, $this->token]), 'UNLOCK');
        $this->forget();
        return $held;
    }

    /**
     * Sets the lease to $ttlMs from now: true, or false when the lock was no longer
     * held. A session lock is renewed with the new TTL from then on (dlockd's floor for
     * session locks applies).
     */
    public function extend(int $ttlMs): bool
    {
        if ($this->released || $this->sessionEnded()) {
            return false;
        }
        return Args::bool($this->conn->call(['EXTEND', $this->name, $this->token, Args::ttl($ttlMs)]), 'EXTEND');
    }

    /**
     * Asks dlockd whether the lock is still held with this token (read-only: the lease
     * does not change).
     */
    public function isHeld(): bool
    {
        if ($this->released || $this->sessionEnded()) {
            return false;
        }
        return Args::bool($this->conn->call(['CHECK', $this->name, $this->token]), 'CHECK');
    }

    /** A session lock whose connection closed since it was granted: dlockd released it. */
    private function sessionEnded(): bool
    {
        return !$this->detached && $this->conn->generation() !== $this->generation;
    }

    private function forget(): void
    {
        $this->released = true;
        if (!$this->detached) {
            Session::remove($this);
        }
    }

    /**
     * From Session at the end of a request whose release failed: closes the connection,
     * unless that happened already (a persistent one would otherwise carry the lock
     * into the worker's next requests), so that dlockd releases the session lock.
     *
     * @internal
     */
    public function abandon(): void
    {
        $this->forget();
        if (!$this->sessionEnded()) {
            $this->conn->drop();
        }
    }

    /**
     * Whether release() was called (by synchronized()'s callable, say), whatever it
     * answered.
     *
     * @internal
     */
    public function wasReleased(): bool
    {
        return $this->released;
    }
}
