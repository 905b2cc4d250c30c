<?php

declare(strict_types=1);

namespace Dlock\Internal;

use Dlock\AuthFailed;
use Dlock\Unavailable;

/**
 * dlockd through phpredis's \Redis: every command is a rawCommand().
 *
 * phpredis answers an error reply in two ways: for `-ERR` and a few codes it knows
 * (NOQUORUM among them) rawCommand() returns false and getLastError() holds the line;
 * for any other code (UNAVAILABLE, NOAUTH, LOST...) it throws RedisException with the
 * line as its message, and getLastError() holds it too. A nil reply is false, with no
 * last error. I/O failures throw RedisException with phpredis's own words ("Connection
 * refused", "socket error on read socket"), with no last error; and a reply whose
 * header could not be read is null, with no exception at all (phpredis 5.3).
 *
 * @internal
 */
final class PhpRedisConnection extends BaseConnection
{
    public function __construct(private \Redis $redis)
    {
    }

    protected function send(array $args, int $waitMs): mixed
    {
        // A last error left by the application's own commands is not this reply's.
        $this->redis->clearLastError();
        $restore = $waitMs !== 0 ? $this->raiseReadTimeout($waitMs) : null;
        try {
            $reply = $this->redis->rawCommand(...$args);
        } catch (\RedisException $e) {
            $message = $e->getMessage();
            throw $this->failure($message, $this->redis->getLastError() === $message, $e);
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
            throw $this->failure($line, true);
        }
        if ($reply === null) {
            throw $this->failure('the reply could not be read', false);
        }
        return self::nils($reply);
    }

    /**
     * Connects a \Redis as the application's was: its address, timeouts and password,
     * which phpredis tells; not its TLS stream options, which it does not (a client
     * made by Client::connect() gets its subscriber from the URL instead).
     */
    public function subscriber(): \Redis
    {
        $host = $this->redis->getHost();
        $port = $this->redis->getPort();
        if (!is_string($host) || $host === '') {
            throw new Unavailable('dlock: the \\Redis given to Dlock\\Client was never connected');
        }
        $r = new \Redis();
        try {
            $ok = $r->connect($host, (int) $port, (float) $this->redis->getTimeout(), null, 0, (float) $this->redis->getReadTimeout());
            if (!$ok) {
                throw new Unavailable("dlock: cannot connect to dlockd at $host");
            }
            $auth = $this->redis->getAuth();
            if ($auth !== null && $auth !== false && !$r->auth($auth)) {
                throw new AuthFailed('dlockd: ' . ($r->getLastError() ?? 'AUTH refused'));
            }
        } catch (\RedisException $e) {
            $message = $e->getMessage();
            throw Replies::code($message) !== null
                ? Replies::error($message)
                : new Unavailable("dlock: cannot connect to dlockd at $host: $message", 0, $e);
        }
        return $r;
    }

    protected function close(): void
    {
        // close() ends a pconnect() connection too (phpredis 5.3 closes it for good
        // rather than giving it back to the pool).
        try {
            $this->redis->close();
        } catch (\RedisException) {
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
