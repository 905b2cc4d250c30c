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
    /**
     * Closed here (drop()): the next command connects it again first. phpredis would
     * reconnect by itself after close(), but not once a reconnect of its own failed
     * (dlockd down for one command): from then on every command fails with "went away"
     * until connect() is called again.
     */
    private bool $closed = false;

    /**
     * How the application connected its \Redis, read while it was connected (phpredis
     * tells its address, timeouts, persistent id and password only then), for the
     * connections opened again here and for subscriber(): [host, port, timeout, read
     * timeout, persistent id or null, auth or null]; null when it was not connected.
     */
    private ?array $params;

    /**
     * @param Url|null $url the URL of Client::connect(), which connects again with
     *                      everything it named (TLS options included); null: as the
     *                      application's \Redis was connected, without its TLS stream
     *                      options, which phpredis does not tell
     */
    public function __construct(private \Redis $redis, private ?Url $url = null)
    {
        $this->params = self::params($redis);
    }

    protected function send(array $args, int $waitMs): mixed
    {
        if ($this->closed) {
            $this->open();
        }
        $restore = null;
        try {
            // A last error left by the application's own commands is not this reply's.
            $this->redis->clearLastError();
            $restore = $waitMs !== 0 ? $this->raiseReadTimeout($waitMs) : null;
            $reply = $this->redis->rawCommand(...$args);
        } catch (\RedisException $e) {
            $message = $e->getMessage();
            if ($this->params === null && $this->url === null && !$this->redis->isConnected()) {
                throw self::neverConnected($e);
            }
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

    /** A \Redis of its own, connected as the application's was, never persistent. */
    public function subscriber(): \Redis
    {
        $r = new \Redis();
        $this->connect($r, false);
        return $r;
    }

    /** The application's \Redis connected again, after close(). */
    private function open(): void
    {
        // A \Redis the application connected after giving it to the Client.
        $this->params ??= self::params($this->redis);
        $this->connect($this->redis, true);
        $this->closed = false;
    }

    /**
     * Connects $r as the application's \Redis was. $persistent: persistent if it was
     * (phpredis tells a persistent id only; a pconnect() without one comes back as a
     * plain connect(), which ends with the request).
     */
    private function connect(\Redis $r, bool $persistent): void
    {
        if ($this->url !== null) {
            $this->url->connectPhpredis($r, $persistent ? null : false);
            return;
        }
        if ($this->params === null) {
            throw self::neverConnected();
        }
        [$host, $port, $timeout, $readTimeout, $id, $auth] = $this->params;
        $where = $port > 0 ? "$host:$port" : $host;
        try {
            $ok = $persistent && $id !== null
                ? $r->pconnect($host, $port, $timeout, $id, 0, $readTimeout)
                : $r->connect($host, $port, $timeout, null, 0, $readTimeout);
            if (!$ok) {
                throw new Unavailable("dlock: cannot connect to dlockd at $where");
            }
            if ($auth !== null && !$r->auth($auth)) {
                throw new AuthFailed('dlockd: ' . ($r->getLastError() ?? 'AUTH refused'));
            }
        } catch (\RedisException $e) {
            $message = $e->getMessage();
            throw Replies::code($message) !== null
                ? Replies::error($message)
                : new Unavailable("dlock: cannot connect to dlockd at $where: $message", 0, $e);
        }
    }

    private static function params(\Redis $redis): ?array
    {
        $host = $redis->getHost();
        if (!is_string($host) || $host === '') {
            return null;
        }
        $id = $redis->getPersistentID();
        $auth = $redis->getAuth();
        return [
            $host,
            (int) $redis->getPort(),
            (float) $redis->getTimeout(),
            (float) $redis->getReadTimeout(),
            is_string($id) ? $id : null,
            $auth === false ? null : $auth,
        ];
    }

    private static function neverConnected(?\Throwable $e = null): Unavailable
    {
        return new Unavailable('dlock: the \\Redis given to Dlock\\Client was never connected', 0, $e);
    }

    protected function close(): void
    {
        // close() ends a pconnect() connection too (phpredis 5.3 closes it for good
        // rather than giving it back to the pool).
        $this->closed = true;
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
