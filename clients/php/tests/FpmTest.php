<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use Dlock\Tests\Support\Fpm;
use Dlock\Tests\Support\Servers;
use PHPUnit\Framework\TestCase;

/**
 * The package under PHP-FPM with persistent connections (docs/service.md, "PHP-FPM
 * and persistent connections"), with real processes: php-fpm with one worker (every
 * request lands in the same process and finds its persistent connection to dlockd
 * again), cgi-fcgi as the web server, dlockd before a redis-server, and
 * tests/fixtures/fpm_request.php as the request, over phpredis pconnect() and predis
 * `persistent` => true.
 *
 * A request that dies inside synchronized(), by a fatal error proper (memory_limit: its
 * `finally` blocks are skipped) or an uncaught Error, leaves the lock free when its
 * response ends, long before the TTL, and the worker's next request (the same process,
 * the same connection) takes it at once: the package's shutdown guard released it. The
 * contrast: the same session lock taken with a raw LOCK on the same connection, without
 * the package, stays held by the idle worker.
 */
final class FpmTest extends TestCase
{
    private const TTL = 30000;

    /** @var list<mixed> the servers' processes: kept while the test runs */
    private array $keep = [];
    private int $port;
    private Fpm $fpm;
    private Client $dlock;
    private \Redis $redis;
    /** @var list<int> the worker PIDs the responses named */
    private array $workers = [];

    protected function setUp(): void
    {
        try {
            Fpm::tools();
        } catch (\RuntimeException $e) {
            $this->fail($e->getMessage());
        }
        [$dlockd, $this->port, $redis] = Servers::pair();
        $this->keep = [$dlockd, $redis];
        $this->fpm = Fpm::start();
        $this->redis = Servers::phpredis($this->port);
        $this->dlock = new Client($this->redis);
        // The worker has phpredis (its php.ini is Debian's, not -n's), and reaches dlockd.
        $out = $this->request('phpredis', []);
        $this->assertMatchesRegularExpression("/^PHPREDIS '\\d+\\.\\d+/m", $out, 'phpredis is not loaded in the php-fpm worker');
        $this->assertGreaterThan(0, $this->field($out, 'CLIENT'), $out);
    }

    protected function tearDown(): void
    {
        if (!isset($this->fpm)) {
            return;
        }
        $this->fpm->stop();
        foreach (array_unique($this->workers) as $pid) {
            // The worker went with its master.
            $this->assertFalse(posix_kill($pid, 0) && !$this->zombie($pid), "php-fpm worker $pid outlived its master");
        }
        unset($this->fpm);
        $this->keep = [];
    }

    public function clients(): array
    {
        return ['phpredis pconnect' => ['phpredis'], 'predis persistent' => ['predis']];
    }

    public function deaths(): array
    {
        $cases = [];
        foreach (['phpredis', 'predis'] as $kind) {
            $cases["$kind, memory_limit"] = [$kind, 'memory', 'Fatal error: Allowed memory size of'];
            $cases["$kind, undefined function"] = [$kind, 'undefined',
                'Fatal error: Uncaught Error: Call to undefined function no_such_function()'];
        }
        return $cases;
    }

    /**
     * A request dies inside synchronized(): the lock is free when its response ends,
     * 30 s before its TTL; the worker's next request, on the same connection, takes it.
     *
     * @dataProvider deaths
     */
    public function testRequestThatDiesInsideSynchronizedLeavesTheLockFree(string $kind, string $die, string $error): void
    {
        $name = "fpm-die-$kind-$die";
        $t0 = microtime(true);
        $out = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'sync', 'die' => $die]);
        $info = $this->dlock->info($name);
        $took = microtime(true) - $t0;
        $this->assertStringContainsString($error, $out);
        $fence = $this->field($out, 'LOCKED');
        $this->assertGreaterThan(0, $fence, $out);
        $this->assertStringNotContainsString('RETURNED', $out);
        $this->assertStringNotContainsString('ERROR', $out);
        // Free as the response ends: no wait, no poll.
        $this->assertSame('free', $info['state'], $out);
        $this->assertSame(0, $info['remaining_ms']);
        $this->assertSame($fence, $info['fence']);
        // The guard ran before the shutdown function registered after it, and left
        // Internal\Session empty.
        $this->assertSame(0, $this->field($out, 'SESSION'), $out);
        $this->assertLessThan(3.0 * Servers::slack(), $took, 'the request, lock free after it');
        $this->assertSame(0, $this->sessionLocks());
        $mine = $this->dlock->lock($name, 5000, 0);
        $this->assertNotNull($mine, 'the test could not take the lock after the request');
        $this->assertTrue($mine->release());

        // The worker's next request: the same process and connection takes the lock at
        // once (no "ERR this connection already holds lock").
        $next = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'sync']);
        $this->assertSame($this->field($out, 'PID'), $this->field($next, 'PID'), 'not the same worker');
        $this->assertSame($this->field($out, 'CLIENT'), $this->field($next, 'CLIENT'), 'not the same connection');
        $this->assertGreaterThan($fence + 1, $this->field($next, 'LOCKED'), $next);
        $this->assertStringContainsString("\nRETURNED\n", $next);
        $this->assertStringNotContainsString('ERROR', $next);
        $this->assertSame(0, $this->field($next, 'SESSION'), $next);
        $this->assertSame('free', $this->dlock->info($name)['state']);
    }

    /**
     * Requests that end as they should leave nothing held: synchronized() that returns,
     * and a lock() never released (the guard releases it as the request ends).
     *
     * @dataProvider clients
     */
    public function testRequestsThatReturnLeaveNothingHeld(string $kind): void
    {
        $name = "fpm-ok-$kind";
        $out = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'sync']);
        $this->assertGreaterThan(0, $this->field($out, 'LOCKED'), $out);
        $this->assertStringContainsString("\nRETURNED\nSESSION 0\n", $out);
        $this->assertSame('free', $this->dlock->info($name)['state']);
        $this->assertSame(0, $this->sessionLocks());

        $forgot = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'lock']);
        $this->assertSame($this->field($out, 'CLIENT'), $this->field($forgot, 'CLIENT'), 'not the same connection');
        $this->assertGreaterThan($this->field($out, 'LOCKED'), $this->field($forgot, 'LOCKED'), $forgot);
        $this->assertSame(0, $this->field($forgot, 'SESSION'), $forgot);
        $this->assertSame('free', $this->dlock->info($name)['state']);
        $this->assertSame(0, $this->sessionLocks());

        $again = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'lock']);
        $this->assertSame($this->field($out, 'PID'), $this->field($again, 'PID'), 'not the same worker');
        $this->assertSame($this->field($out, 'CLIENT'), $this->field($again, 'CLIENT'), 'not the same connection');
        $this->assertGreaterThan($this->field($forgot, 'LOCKED'), $this->field($again, 'LOCKED'), $again);
        $this->assertStringNotContainsString('ERROR', $again);
    }

    /**
     * A request that leads (elect(), the Leadership kept in a global) and dies by a fatal
     * error proper, or returns without resign(): no one leads once its response ends,
     * though the worker's persistent connection stays open; the worker's next request,
     * on that connection, is elected again at once, with a larger term.
     *
     * @dataProvider deaths
     */
    public function testRequestThatLeadsLeavesNoLeader(string $kind, string $die, string $error): void
    {
        $name = "fpm-elect-$kind-$die";
        $out = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'elect', 'die' => $die]);
        $leader = $this->dlock->leader($name);
        $this->assertStringContainsString($error, $out);
        $term = $this->field($out, 'LEADING');
        $this->assertGreaterThan(0, $term, $out);
        $this->assertSame(0, $this->field($out, 'SESSION'), $out);
        $this->assertNull($leader, 'still leading after the request: ' . json_encode($leader));

        $next = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'elect']);
        $this->assertSame($this->field($out, 'PID'), $this->field($next, 'PID'), 'not the same worker');
        $this->assertSame($this->field($out, 'CLIENT'), $this->field($next, 'CLIENT'), 'not the same connection');
        $this->assertGreaterThan($term, $this->field($next, 'LEADING'), $next);
        $this->assertStringNotContainsString('ERROR', $next);
        $this->assertSame(0, $this->field($next, 'SESSION'), $next);
        $this->assertNull($this->dlock->leader($name));
    }

    /**
     * The contrast, to show that the guard is what frees the lock: a session lock taken
     * on the same persistent connection with a raw LOCK, without the package, by a
     * request that dies, stays held by the idle worker's connection; the worker's next
     * request is told that its connection holds it; it goes only with the worker.
     *
     * @dataProvider clients
     */
    public function testRawLockWithoutThePackageStaysHeldByTheWorker(string $kind): void
    {
        $name = "fpm-raw-$kind";
        $out = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'raw', 'die' => 'memory']);
        $this->assertStringContainsString('Fatal error: Allowed memory size of', $out);
        $fence = $this->field($out, 'LOCKED');
        $info = $this->dlock->info($name);
        $this->assertSame('held', $info['state'], $out);
        $this->assertSame($fence, $info['fence']);
        $this->assertSame(1, $this->sessionLocks());
        $this->assertNull($this->dlock->lock($name, 5000, 0));

        $next = $this->request($kind, ['name' => $name, 'ttl' => self::TTL, 'do' => 'sync']);
        $this->assertSame($this->field($out, 'PID'), $this->field($next, 'PID'), 'not the same worker');
        $this->assertSame($this->field($out, 'CLIENT'), $this->field($next, 'CLIENT'), 'not the same connection');
        $this->assertStringContainsString(
            "ERROR Dlock\\CommandError: dlockd: ERR this connection already holds lock '$name'",
            $next
        );
        $this->assertStringNotContainsString('LOCKED', $next);

        $this->fpm->stop();
        $mine = $this->dlock->lock($name, 5000, 2000 * Servers::slack());
        $this->assertNotNull($mine, 'held after php-fpm stopped');
        $this->assertTrue($mine->release());
    }

    /** One request of fpm_request.php over $kind: the response. */
    private function request(string $kind, array $query): string
    {
        $out = $this->fpm->request(['port' => $this->port, 'client' => $kind] + $query);
        $pid = $this->field($out, 'PID');
        $this->assertGreaterThan(0, $pid, "no worker PID in the response:\n$out");
        $this->workers[] = $pid;
        return $out;
    }

    /** The integer after "KEY " at the start of a line of $out, or -1. */
    private function field(string $out, string $key): int
    {
        return preg_match("/^$key (\\d+)$/m", $out, $m) === 1 ? (int) $m[1] : -1;
    }

    /** dlockd's INFO session_locks: the session locks of every connection. */
    private function sessionLocks(): int
    {
        $info = $this->redis->rawCommand('INFO', 'locks');
        $this->assertSame(1, preg_match('/^session_locks:(\d+)\r?$/m', $info, $m), $info);
        return (int) $m[1];
    }

    private function zombie(int $pid): bool
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        return $stat === false || preg_match('/^\d+ \(.*\) Z /', $stat) === 1;
    }
}
