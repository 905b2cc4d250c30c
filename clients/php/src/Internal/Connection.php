<?php

declare(strict_types=1);

namespace Dlock\Internal;

/**
 * One connection to dlockd, over whichever Redis client the application gave: the
 * package sends every command through call() and gets replies and exceptions of one
 * shape from both phpredis and predis.
 *
 * @internal
 */
interface Connection
{
    /**
     * Sends one command and returns its reply: a string, an int, null (nil) or an array
     * of those. An error reply or a failure throws a Dlock\Exception (Replies::error
     * says which).
     *
     * @param list<string> $args   the command and its arguments
     * @param int          $waitMs how long dlockd may rightly take before it answers (a
     *                             LOCK's WAIT; -1: without end): the read timeout is
     *                             raised by that much for this call, then restored
     */
    public function call(array $args, int $waitMs = 0): mixed;

    /**
     * Closes the connection, so that dlockd releases the session locks it holds (a
     * persistent one too). The next command connects again. Never throws.
     */
    public function drop(): void;

    /**
     * Counts the times this connection was found closed (an I/O error, a `-LOST`) or
     * dropped: a session lock taken at an earlier count was released by dlockd when its
     * connection closed, whatever the client reconnected to since.
     */
    public function generation(): int;

    /**
     * A new connection to the same dlockd, of the same Redis client, not persistent and
     * not this one: for SUBSCRIBE, after which a connection takes nothing else (and
     * which ends by closing it). Throws Unavailable when it cannot connect.
     */
    public function subscriber(): \Redis|\Predis\Client;
}
