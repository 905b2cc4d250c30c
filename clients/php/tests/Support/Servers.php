<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

/**
 * Real servers for the tests: redis-server processes as lock servers and dlockd ($DLOCKD)
 * in front of them, each on a free port of 127.0.0.1, and Redis clients connected to
 * dlockd as an application connects them.
 */
final class Servers
{
    /** A port nobody listens on now (taken before the server takes it? start() retries). */
    public static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0', $errno, $errstr);
        if ($s === false) {
            throw new \RuntimeException("no free port: $errstr");
        }
        $name = stream_socket_get_name($s, false);
        fclose($s);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    /** A redis-server: [process, port]. */
    public static function redis(): array
    {
        $exe = getenv('DLOCK_REDIS_SERVER') ?: 'redis-server';
        return self::start(fn (int $port) => [$exe, '--port', (string) $port, '--bind', '127.0.0.1',
            '--save', '', '--appendonly', 'no'], 'redis');
    }

    /**
     * dlockd in front of the lock servers $urls (redis://...): [process, port]. Without
     * a drain at shutdown, as the C tests start it, unless $extra says otherwise.
     */
    public static function dlockd(array $urls, array $extra = []): array
    {
        $exe = getenv('DLOCKD');
        return self::start(fn (int $port) => array_merge(
            [$exe, '-s', implode(',', $urls), '-p', (string) $port, '--shutdown-timeout', '0'],
            $extra
        ), 'dlockd');
    }

    /** A redis-server and a dlockd before it: [dlockd, dlockd's port, redis, redis's port]. */
    public static function pair(array $extra = []): array
    {
        [$redis, $rport] = self::redis();
        [$dlockd, $dport] = self::dlockd(["redis://127.0.0.1:$rport"], $extra);
        return [$dlockd, $dport, $redis, $rport];
    }

    /**
     * A pair whose dlockd requires $password (given to it in a file, removed once it
     * started): [dlockd, dlockd's port, redis, redis's port].
     */
    public static function pairWithPassword(string $password): array
    {
        $file = tempnam(sys_get_temp_dir(), 'dlock-php-pass-');
        file_put_contents($file, "$password\n");
        try {
            return self::pair(['--requirepass-file', $file]);
        } finally {
            unlink($file);
        }
    }

    /** phpredis connected to dlockd at $port, replies awaited $readTimeout s at most. */
    public static function phpredis(int $port, float $readTimeout = 5.0): \Redis
    {
        $r = new \Redis();
        $r->connect('127.0.0.1', $port, 2.0, null, 0, $readTimeout);
        return $r;
    }

    /** predis connected to dlockd at $port, as phpredis() is. */
    public static function predis(int $port, float $readTimeout = 5.0): \Predis\Client
    {
        $c = new \Predis\Client(['host' => '127.0.0.1', 'port' => $port, 'timeout' => 2.0,
            'read_write_timeout' => $readTimeout]);
        $c->connect();
        return $c;
    }

    /** One of the two, by name ('phpredis' or 'predis'): the tests run over both. */
    public static function client(string $kind, int $port, float $readTimeout = 5.0): \Redis|\Predis\Client
    {
        return $kind === 'predis' ? self::predis($port, $readTimeout) : self::phpredis($port, $readTimeout);
    }

    /** DLOCK_TEST_SLACK: what liveness bounds are multiplied by on slow machines. */
    public static function slack(): int
    {
        return max(1, (int) (getenv('DLOCK_TEST_SLACK') ?: 1));
    }

    private static function start(callable $argv, string $what): array
    {
        $dir = sys_get_temp_dir();
        for ($try = 0; $try < 5; $try++) {
            $port = self::freePort();
            $log = tempnam($dir, "dlock-php-$what-");
            $p = Process::start($argv($port), $log);
            $deadline = microtime(true) + 10 * self::slack();
            while (microtime(true) < $deadline && $p->running()) {
                $s = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 0.2);
                if ($s !== false) {
                    fclose($s);
                    return [$p, $port];
                }
                usleep(10000);
            }
            $p->stop();
        }
        throw new \RuntimeException("$what did not start; its last log: " . file_get_contents($log));
    }
}
