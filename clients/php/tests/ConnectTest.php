<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use Dlock\CommandError;
use Dlock\InvalidArgument;
use Dlock\Lock;
use Dlock\ProtocolError;
use Dlock\Tests\Support\Process;
use Dlock\Tests\Support\Helpers;
use Dlock\Tests\Support\Servers;
use Dlock\Unavailable;
use PHPUnit\Framework\TestCase;

/**
 * Client::connect(): the URL and what it sets up (the client, the transport, the
 * connection's name, that name again after a reconnect), and the URLs it refuses.
 * One redis-server and dlockd (with a unix socket) for the class.
 */
final class ConnectTest extends TestCase
{
    use Helpers;

    private static ?Process $redis = null;
    private static ?Process $dlockd = null;
    private static int $port = 0;
    private static string $socket = '';

    public static function setUpBeforeClass(): void
    {
        self::$socket = sys_get_temp_dir() . '/dlock-php-' . getmypid() . '.sock';
        [self::$dlockd, self::$port, self::$redis] = Servers::pair(['--unixsocket', self::$socket]);
    }

    public static function tearDownAfterClass(): void
    {
        self::$dlockd?->stop();
        self::$redis?->stop();
        @unlink(self::$socket);
    }

    public function clients(): iterable
    {
        yield 'phpredis' => ['phpredis'];
        yield 'predis' => ['predis'];
    }

    /**
     * Client::connect() with client=phpredis or client=predis gives a working Client,
     * over TCP and over dlockd's unix socket, and its `name` names the client's locks;
     * a name dlockd refuses is its CommandError at connect, not ignored.
     * @dataProvider clients
     */
    public function testConnectUrl(string $kind): void
    {
        $tcp = 'dlockd://127.0.0.1:' . self::$port . "?client=$kind";
        foreach ([
            ["$tcp&name=web-$kind&timeout=2", '127.0.0.1:'],
            ['dlockd+unix://' . self::$socket . "?client=$kind&name=web-$kind", 'unix '],
        ] as [$url, $from]) {
            $c = Client::connect($url);
            $lock = $c->lock($name = $this->name('url'));
            $this->assertInstanceOf(Lock::class, $lock, $url);
            $this->assertStringStartsWith("web-$kind $from", $c->info($name)['holder']);
            $this->assertTrue($lock->release());
            $this->assertFalse($lock->release());
        }
        $e = $this->throws(CommandError::class, fn () => Client::connect("$tcp&name=a%20b"));
        $this->assertStringStartsWith('dlockd: ERR ', $e->getMessage());
    }

    /**
     * InvalidArgument, before connecting: a URL that is not dlockd's or names no host;
     * an unknown option (a misspelt one is not ignored) or one given as an array; a port
     * out of range; an unknown client, a timeout of 0, a maxhold that is not a number of
     * ms; a user other than dlockd's two (default, admin). So is a Client of something
     * that is not a Redis client.
     * @dataProvider clients
     */
    public function testBadUrlsAndObjects(string $kind): void
    {
        $port = self::$port;
        $at = "dlockd://127.0.0.1:$port?client=$kind";
        foreach ([
            "redis://127.0.0.1:$port?client=$kind", "127.0.0.1:$port", '', "dlockd://?client=$kind",
            "dlockd://127.0.0.1:$port?client=phpredis2", "$at&timeout=0", "$at&timout=1", "$at&name[]=x",
            "$at&maxhold=abc", "$at&maxhold=-1", "dlockd://127.0.0.1:99999?client=$kind",
            "dlockd://bob:pw@127.0.0.1:$port?client=$kind",
        ] as $url) {
            $this->throws(InvalidArgument::class, fn () => Client::connect($url), $url);
        }
        $e = $this->throws(InvalidArgument::class, fn () => new Client(new \stdClass()));
        $this->assertStringContainsString('stdClass', $e->getMessage());
    }

    /**
     * A redis-server where dlockd should be: ProtocolError, that says so, not a
     * CommandError about a command the application never sent.
     * @dataProvider clients
     */
    public function testNotDlockd(string $kind): void
    {
        [$redis, $port] = Servers::redis();
        try {
            $c = Client::connect("dlockd://127.0.0.1:$port?client=$kind");
            $e = $this->throws(ProtocolError::class, fn () => $c->lock('x'));
            $this->assertStringContainsString("unknown command 'LOCK'", $e->getMessage());
            $this->assertStringContainsString('is this dlockd', $e->getMessage());
        } finally {
            $redis->stop();
        }
    }

    /**
     * dlockds://: over TLS with the URL's cafile, persistent or not; refused without it
     * (dlockd's certificate is signed by no CA the system trusts), as Unavailable with
     * the handshake's reason and no PHP warning. And the cafile stays the URL's: PHP's
     * default stream context is left as it was (predis 1 would write the URL's TLS
     * options there, for every later TLS stream of the process to use).
     * @dataProvider clients
     */
    public function testTls(string $kind): void
    {
        $dir = sys_get_temp_dir() . '/dlock-php-tls-' . getmypid() . "-$kind";
        @mkdir($dir);
        [$ca, $cert, $key] = Servers::certificates($dir);
        $tlsPort = Servers::freePort();
        [$dlockd, , $redis] = Servers::pair(['--tls-port', (string) $tlsPort, '--tls-cert-file', $cert,
            '--tls-key-file', $key, '--tls-auth-clients', 'no']);
        try {
            $default = stream_context_get_options(stream_context_get_default());
            $at = "dlockds://localhost:$tlsPort?client=$kind";
            foreach (['0', '1'] as $persistent) {
                $c = Client::connect("$at&persistent=$persistent&cafile=" . rawurlencode($ca));
                $lock = $c->lock($this->name("tls-$kind-$persistent"));
                $this->assertInstanceOf(Lock::class, $lock, "persistent=$persistent");
                $this->assertTrue($lock->release());
            }
            $this->assertSame($default, stream_context_get_options(stream_context_get_default()));
            // No '@': a warning would fail the test (PHPUnit turns it into an exception).
            $e = $this->throws(Unavailable::class, fn () => Client::connect($at));
            $this->assertStringContainsString('certificate verify failed', $e->getMessage());
        } finally {
            $dlockd->stop();
            $redis->stop();
            array_map('unlink', glob("$dir/*"));
            rmdir($dir);
        }
    }

    /**
     * The URL's name is the connection's for good: once dlockd has closed the idle
     * connections (--timeout-idle 1), the next lock, on a new connection, is still named
     * web-1 in LOCKINFO's holder. And that lock is the first call's: a command sent to a
     * connection dlockd had closed was never run, and goes out again on a new one, not
     * an Unavailable. Over both clients at once, so that one idle wait does.
     */
    public function testNameSurvivesAReconnect(): void
    {
        [$dlockd, $port, $redis] = Servers::pair(['--timeout-idle', '1']);
        $watch = Servers::phpredis($port);
        $idleTimeouts = function () use ($watch): int {
            $stats = $watch->rawCommand('INFO', 'stats');
            $this->assertSame(1, preg_match('/^idle_timeouts:(\d+)\r?$/m', $stats, $m), $stats);
            return (int) $m[1];
        };
        $holder = fn (Client $c, string $name): string => (string) $c->info($name)['holder'];
        $before = $idleTimeouts();
        $clients = [];
        foreach (['phpredis', 'predis'] as $kind) {
            $clients[$kind] = $c = Client::connect("dlockd://127.0.0.1:$port?client=$kind&name=web-1");
            $lock = $c->lock($name = $this->name("named-$kind"));
            $this->assertStringStartsWith('web-1 ', $holder($c, $name), $kind);
            $this->assertTrue($lock->release());
        }
        // The sweep runs each second: an idle connection is closed within 2 s.
        $deadline = microtime(true) + 2 + 2 * Servers::slack();
        while ($idleTimeouts() < $before + 2) {
            $this->assertLessThan($deadline, microtime(true), 'dlockd did not close the idle connections');
            usleep(10000);
        }
        $failed = [];
        foreach ($clients as $kind => $c) {
            $name = $this->name("renamed-$kind");
            try {
                $lock = $c->lock($name);
            } catch (Unavailable $e) {
                // Asserted below, once the name has been checked on the second call.
                $failed[$kind] = $e->getMessage();
                $lock = $c->lock($name);
            }
            $this->assertInstanceOf(Lock::class, $lock, $kind);
            $this->assertStringStartsWith('web-1 ', $holder($c, $name), "$kind, after a reconnect");
            $this->assertTrue($lock->release());
        }
        $this->assertSame([], $failed, 'the first call after dlockd closed the idle connection');
        $this->assertTrue($dlockd->running());
    }
}
