<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\Exception;
use Dlock\LockLost;
use Dlock\ProtocolError;
use Dlock\Unavailable;

/**
 * What the phpredis and predis adapters share: the retry after a `-LOST`, the
 * connection's generation, and which failures close the connection.
 *
 * @internal
 */
abstract class BaseConnection implements Connection
{
    private int $generation = 0;

    /**
     * dlockd answers `-LOST` in place of the reply to the command after a session lock
     * of the connection was lost, and closes the connection: the command was not run
     * (a command in flight is answered before the `-LOST`, and a wait in progress is
     * given up). So it is sent again, once, on a new connection; this connection's
     * session locks are gone with the old one, which their Lock objects know from the
     * generation.
     */
    public function call(array $args, int $waitMs = 0): mixed
    {
        try {
            return $this->send($args, $waitMs);
        } catch (LockLost) {
            return $this->send($args, $waitMs);
        }
    }

    public function generation(): int
    {
        return $this->generation;
    }

    public function drop(): void
    {
        $this->generation++;
        $this->close();
    }

    /** Sends one command as it is, and returns its reply (call() retries it). */
    abstract protected function send(array $args, int $waitMs): mixed;

    /** Closes the client's connection, persistent or not. Never throws. */
    abstract protected function close(): void;

    /**
     * The exception for a failed command. $replied: $message is an error reply dlockd
     * sent (else the client's own words for an I/O failure, after which the reply may
     * still be on its way: the connection is closed, so that no later command reads
     * it as its own).
     */
    protected function failure(string $message, bool $replied, ?\Throwable $e = null): Exception
    {
        if (!$replied) {
            $this->drop();
            return new Unavailable("dlockd: $message", 0, $e);
        }
        if (Replies::code($message) === null) {
            // A reply, so the connection is in step: nothing to close.
            return new ProtocolError("dlockd: unexpected error reply: $message", 0, $e);
        }
        $error = Replies::error($message);
        if (Replies::closes($error)) {
            $this->drop();
        }
        return $error;
    }
}
