<?php

declare(strict_types=1);

namespace Dlock;

use Dlock\Internal\Args;
use Dlock\Internal\Connection;
use Dlock\Internal\Session;

/**
 * The leadership of an election, won by Client::elect() (or held for the callable of
 * Client::lead()).
 *
 * A session leadership: dlockd renews it for as long as the connection it was won on
 * stays open, and resigns it the moment that connection closes, so a leader whose
 * process dies (a crash, SIGKILL, the OOM killer) is followed by the next candidate at
 * once rather than at the end of its lease. It also ends with resign(), with the request
 * (the package's shutdown guard, as for session locks: a PHP-FPM worker's persistent
 * connection does not carry it into the next request), and when the object is dropped:
 * keep it in a variable for as long as the process means to lead.
 *
 * The term is the leadership's fence: larger than every earlier leader's of the name.
 * Hand it to what the leader writes to, so that a deposed leader that does not know it
 * yet is refused.
 */
final class Leadership
{
    /** The connection's generation when the leadership was won (Connection::generation). */
    private int $generation;
    /** The process that won it: a child forked since must not resign its parent's. */
    private int $pid;
    /** Resigned, or found lost: nothing more is sent for it. */
    private bool $over = false;

    /** @internal Client::elect() makes it */
    public function __construct(
        private Connection $conn,
        private string $name,
        private string $token,
        private int $term,
        private string $value,
    ) {
        $this->generation = $conn->generation();
        $this->pid = getmypid();
        Session::add($this);
    }

    /** The election's name. */
    public function name(): string
    {
        return $this->name;
    }

    /**
     * The term: larger than every earlier leader's of the name (the leadership's fence).
     * Pass it to the resource the leader acts on, which refuses a smaller one.
     */
    public function term(): int
    {
        return $this->term;
    }

    /** What proves this leader to dlockd: 32 hex characters. */
    public function token(): string
    {
        return $this->token;
    }

    /** The value this leader announced last (at its election or by proclaim()). */
    public function value(): string
    {
        return $this->value;
    }

    /**
     * Announces a new value in the same term: Client::leader() answers it from now on,
     * and observers hear of it. Throws LockLost when this process no longer leads
     * (resigned, deposed, or its connection closed), Unavailable when dlockd could not
     * be asked, InvalidArgument for a value over 1024 bytes.
     */
    public function proclaim(string $value): void
    {
        Args::value($value);
        if ($this->over || $this->sessionEnded()) {
            $this->forget();
            throw $this->lost('proclaim');
        }
        $led = Args::bool($this->conn->call(['PROCLAIM', $this->name, $this->token, $value]), 'PROCLAIM');
        if (!$led) {
            $this->forget();
            throw $this->lost('proclaim');
        }
        $this->value = $value;
    }

    /**
     * Asks dlockd whether this process still leads (CHECK: read-only, the lease does not
     * change). A leadership found gone is over: resign() answers false without asking.
     */
    public function isLeading(): bool
    {
        if ($this->over || $this->sessionEnded()) {
            $this->forget();
            return false;
        }
        $leading = Args::bool($this->conn->call(['CHECK', $this->name, $this->token]), 'CHECK');
        if (!$leading) {
            $this->forget();
        }
        return $leading;
    }

    /**
     * Gives the leadership up: observers are told that no one leads, then the next
     * candidate leads. True when this process led until now; false when it no longer
     * did (resigned already, deposed, or its connection closed). Once it answered,
     * later calls answer false without asking dlockd. Throws Unavailable when dlockd
     * could not be asked (the connection is then closed, which resigns it in dlockd).
     */
    public function resign(): bool
    {
        if ($this->over || $this->sessionEnded()) {
            $this->forget();
            return false;
        }
        try {
            return Args::bool($this->conn->call(['RESIGN', $this->name, $this->token]), 'RESIGN');
        } finally {
            $this->forget();
        }
    }

    /**
     * A leadership dropped while held resigns, so that a forgotten object does not lead
     * for as long as its connection lives (a persistent one outlives the request). A
     * failure cannot be reported from here: the connection is closed instead, which
     * resigns it in dlockd.
     */
    public function __destruct()
    {
        if ($this->over || getmypid() !== $this->pid) {
            return;
        }
        try {
            $this->resign();
        } catch (\Throwable) {
            $this->abandon();
        }
    }

    /**
     * Whether the leadership is over as far as this object knows (resigned, found lost
     * by proclaim() or isLeading()), whatever dlockd would answer now.
     *
     * @internal
     */
    public function isOver(): bool
    {
        return $this->over;
    }

    /**
     * From Session at the end of a request whose RESIGN failed: closes the connection,
     * unless that happened already, so that dlockd resigns the leadership.
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

    /** A leadership whose connection closed since it was won: dlockd resigned it. */
    private function sessionEnded(): bool
    {
        return $this->conn->generation() !== $this->generation;
    }

    private function forget(): void
    {
        if (!$this->over) {
            $this->over = true;
            Session::remove($this);
        }
    }

    private function lost(string $what): LockLost
    {
        return new LockLost(sprintf(
            "dlock: cannot %s: no longer the leader of '%s' (term %d): resigned, deposed, or its connection closed",
            $what,
            $this->name,
            $this->term
        ));
    }
}
