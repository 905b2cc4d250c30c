<?php

declare(strict_types=1);

namespace Dlock\Connection;

use Dlock\Exception;
use Dlock\Unavailable;

/**
 * dlockd through phpredis's \Redis: every command is a rawCommand().
 *
 * phpredis answers an error reply in two ways: for `-ERR` and a few codes it knows
 * (NOQUORUM among them) rawCommand() returns false and getLastError() holds the line;
 * for any other code (UNAVAILABLE, NOAUTH, LOST...) it throws RedisException with the
 * line as its message. A nil reply is false too, with no last error. I/O failures throw
 * RedisException with phpredis's own words ("Connection refused", "socket error on
 * read socket").
 *
 * @internal
 */
final class PhpRedisConnection implements Connection
{
    private int $generation = 0;

    public function __construct(private \Redis $redis)
    {
    }

    public function call(array $args, int $waitMs = 0): mixed
    {
        // A last error left by the application's own commands is not this reply's.
        $this->redis->clearLastError();
        $restore = $waitMs !== 0 ? $this->raiseReadTimeout($waitMs) : null;
        try {
            $reply = $this->redis->rawCommand(...$args);
        } catch (\RedisException $e) {
            throw $this->failure($e->getMessage(), $e);
        } finally {
            if ($restore !== null) {
                $this->setReadTimeout($restore);
            }
        }
        if ($reply === false) {
            $line = $this->redis->getLastError();
            if ($line === null) {
                return null;
            }
            $this->redis->clearLastError();
            throw $this->failure($line, null);
        }
        return self::nils($reply);
    }

    public function abandon(): void
    {
        // QUIT: dlockd closes its end, which a persistent connection's next user
        // (phpredis checks a pooled connection before reuse) finds closed.
        try {
            $this->redis->rawCommand('QUIT');
        } catch (\RedisException) {
        }
        $this->drop();
    }

    public function generation(): int
    {
        return $this->generation;
    }

    /** An error reply's exception, or Unavailable for an I/O failure. */
    private function failure(string $message, ?\RedisException $e): Exception
    {
        if (Replies::code($message) !== null) {
            $error = Replies::error($message);
            if (Replies::closes($error)) {
                $this->drop();
            }
            return $error;
        }
        // A read that timed out leaves the reply on its way: the next command would read
        // it as its own. Closing the connection is the only way to be sure it is not.
        $this->drop();
        return new Unavailable("dlockd: $message", 0, $e);
    }

    private function drop(): void
    {
        $this->generation++;
        try {
            $this->redis->close();
        } catch (\RedisException) {
            // Closed already: what close() is for.
        }
    }

    /**
     * Sets the read timeout to cover a wait of $waitMs more than the application's
     * timeout for any other reply, and returns the timeout to restore (null: unchanged).
     */
    private function raiseReadTimeout(int $waitMs): ?float
    {
        $current = (float) $this->redis->getOption(\Redis::OPT_READ_TIMEOUT);
        if ($current < 0) {
            return null; // reads wait without end already
        }
        // 0 is phpredis's "the default": PHP's default_socket_timeout. Restored as that,
        // not as 0, which setOption() would make a stream timeout of 0 s: every later
        // read would time out (and the drop release the session locks).
        $base = $current > 0 ? $current : (float) ini_get('default_socket_timeout');
        if ($base < 0) {
            return null; // default_socket_timeout -1: reads wait without end already
        }
        $this->setReadTimeout($waitMs < 0 ? -1.0 : $base + $waitMs / 1000);
        return $base;
    }

    private function setReadTimeout(float $seconds): void
    {
        $this->redis->setOption(\Redis::OPT_READ_TIMEOUT, $seconds);
    }

    /** phpredis reads a nil inside an array as false; dlockd never sends a boolean. */
    private static function nils(mixed $reply): mixed
    {
        if (!is_array($reply)) {
            return $reply;
        }
        foreach ($reply as $i => $v) {
            $reply[$i] = $v === false ? null : self::nils($v);
        }
        return $reply;
    }
}
