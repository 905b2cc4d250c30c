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
        return self::start(fn (int $port) => self::redisArgv($port), 'redis');
    }

    /** A redis-server again on $port (the one a stopped lock server had). */
    public static function redisOn(int $port): Process
    {
        return self::startOn(self::redisArgv($port), $port, 'redis');
    }

    /**
     * dlockd in front of the lock servers $urls (redis://...): [process, port]. Without
     * a drain at shutdown, as the C tests start it, unless $extra says otherwise.
     */
    public static function dlockd(array $urls, array $extra = []): array
    {
        return self::start(fn (int $port) => self::dlockdArgv($port, $urls, $extra), 'dlockd');
    }

    /** dlockd again on $port (the one a killed dlockd had). */
    public static function dlockdOn(int $port, array $urls): Process
    {
        return self::startOn(self::dlockdArgv($port, $urls, []), $port, 'dlockd');
    }

    private static function redisArgv(int $port): array
    {
        return [getenv('DLOCK_REDIS_SERVER') ?: 'redis-server', '--port', (string) $port,
            '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
    }

    private static function dlockdArgv(int $port, array $urls, array $extra): array
    {
        return array_merge(
            [getenv('DLOCKD'), '-s', implode(',', $urls), '-p', (string) $port, '--shutdown-timeout', '0'],
            $extra
        );
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

    /**
     * A CA and a server certificate it signed for localhost and 127.0.0.1, written to
     * $dir: [CA certificate, certificate, key] files, for dlockd's --tls-port.
     */
    public static function certificates(string $dir): array
    {
        $cnf = "$dir/openssl.cnf";
        file_put_contents($cnf, "[req]\ndistinguished_name = dn\n[dn]\n"
            . "[ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
            . "[server]\nbasicConstraints = CA:FALSE\nsubjectAltName = DNS:localhost,IP:127.0.0.1\n");
        $key = fn () => openssl_pkey_new(['private_key_type' => OPENSSL_KEYTYPE_EC, 'curve_name' => 'prime256v1']);
        $opts = fn (string $ext) => ['config' => $cnf, 'digest_alg' => 'sha256', 'x509_extensions' => $ext];
        $caKey = $key();
        $ca = openssl_csr_sign(openssl_csr_new(['commonName' => 'dlock test CA'], $caKey, $opts('ca')), null, $caKey, 1, $opts('ca'), 1);
        $serverKey = $key();
        $csr = openssl_csr_new(['commonName' => 'localhost'], $serverKey, $opts('server'));
        $cert = openssl_csr_sign($csr, $ca, $caKey, 1, $opts('server'), 2);
        if ($ca === false || $cert === false) {
            throw new \RuntimeException('test certificates: ' . openssl_error_string());
        }
        openssl_x509_export_to_file($ca, "$dir/ca.crt");
        openssl_x509_export_to_file($cert, "$dir/server.crt");
        openssl_pkey_export_to_file($serverKey, "$dir/server.key");
        return ["$dir/ca.crt", "$dir/server.crt", "$dir/server.key"];
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
        for ($try = 0; $try < 5; $try++) {
            $port = self::freePort();
            $p = self::listening($argv($port), $port, $what, $log);
            if ($p !== null) {
                return [$p, $port];
            }
        }
        throw new \RuntimeException("$what did not start; its last log: " . file_get_contents($log));
    }

    private static function startOn(array $argv, int $port, string $what): Process
    {
        return self::listening($argv, $port, $what, $log)
            ?? throw new \RuntimeException("$what did not start again on $port: " . file_get_contents($log));
    }

    /** $argv's process once it listens on $port; null (and stopped) when it did not. */
    private static function listening(array $argv, int $port, string $what, ?string &$log): ?Process
    {
        $log = tempnam(sys_get_temp_dir(), "dlock-php-$what-");
        $p = Process::start($argv, $log);
        $deadline = microtime(true) + 10 * self::slack();
        while (microtime(true) < $deadline && $p->running()) {
            $s = @stream_socket_client("tcp://127.0.0.1:$port", $errno, $errstr, 0.2);
            if ($s !== false) {
                fclose($s);
                return $p;
            }
            usleep(10000);
        }
        $p->stop();
        return null;
    }
}
