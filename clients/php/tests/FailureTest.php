<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\AuthFailed;
use Dlock\Client;
use Dlock\CommandError;
use Dlock\Lock;
use Dlock\NoQuorum;
use Dlock\Unavailable;
use Dlock\Tests\Support\Process;
use Dlock\Tests\Support\Helpers;
use Dlock\Tests\Support\Servers;
use PHPUnit\Framework\TestCase;

/**
 * What the client makes of failures: dlockd down, killed or paused, its lock servers
 * down, a wrong password, a worker killed while it holds a lock. Each test starts its
 * own servers, and runs over phpredis and predis. Every failure is one of this
 * package's exceptions, of the exact class, never the Redis client's own.
 */
final class FailureTest extends TestCase
{
    use Helpers;

    /** @return iterable<string, array{string}> */
    public function clients(): iterable
    {
        yield 'phpredis' => ['phpredis'];
        yield 'predis' => ['predis'];
    }

    /** Runs `sh -c 'sleep $delay; kill -$signal $pid'` in the background. */
    private static function signalLater(int $pid, string $signal, float $delay): void
    {
        exec(sprintf("sh -c 'sleep %.3F; kill -%s %d' >/dev/null 2>&1 &", $delay, $signal, $pid));
    }

    /**
     * dlockd not there: Client::connect() to a port nobody listens on, and a Client
     * whose dlockd was killed after it connected, are Unavailable at once, and again on
     * the next call.
     * @dataProvider clients
     */
    public function testDlockdDown(string $kind): void
    {
        $port = Servers::freePort();
        $t = hrtime(true);
        $this->throws(Unavailable::class, fn () => Client::connect("dlockd://127.0.0.1:$port?client=$kind"));
        $this->assertLessThan(1000 * Servers::slack(), self::ms($t));

        [$dlockd, $dport, $redis] = Servers::pair();
        $c = new Client(Servers::client($kind, $dport));
        $lock = $c->lock('a', detached: true, ttlMs: 60000);
        $dlockd->kill();
        $t = hrtime(true);
        $this->throws(Unavailable::class, fn () => $c->lock('b'));
        $this->throws(Unavailable::class, fn () => $c->info('a'));
        $this->throws(Unavailable::class, fn () => $lock->release());
        $this->assertLessThan(1000 * Servers::slack(), self::ms($t));
    }

    /**
     * dlockd back after a failure: a Client whose dlockd was killed, and whose calls
     * failed while it was down (phpredis gives up a connection whose reconnect failed,
     * until it is connected again), works again as soon as dlockd is back, with no new
     * Client: connected by URL, persistent or not, or given the application's own
     * connection.
     * @dataProvider clients
     */
    public function testDlockdBack(string $kind): void
    {
        [$dlockd, $dport, $redis, $rport] = Servers::pair();
        $clients = [
            'url' => Client::connect("dlockd://127.0.0.1:$dport?client=$kind"),
            'persistent url' => Client::connect("dlockd://127.0.0.1:$dport?client=$kind&persistent=1"),
            'own' => new Client(Servers::client($kind, $dport)),
        ];
        foreach ($clients as $how => $c) {
            $this->assertSame('free', $c->info("back:$how")['state'], $how);
        }
        $dlockd->kill();
        $this->assertTrue(self::ended($dlockd), 'dlockd was killed');
        foreach ($clients as $how => $c) {
            $this->throws(Unavailable::class, fn () => $c->lock("back:$how"));
            $this->throws(Unavailable::class, fn () => $c->lock("back:$how"));
        }
        $dlockd = Servers::dlockdOn($dport, ["redis://127.0.0.1:$rport"]);
        foreach ($clients as $how => $c) {
            $lock = $c->lock("back:$how");
            $this->assertInstanceOf(Lock::class, $lock, $how);
            $this->assertTrue($lock->release(), $how);
        }
    }

    /**
     * dlockd killed while a lock() waits for another connection's lock: Unavailable
     * as soon as the connection breaks, long before the wait would have ended.
     * @dataProvider clients
     */
    public function testDlockdKilledDuringWait(string $kind): void
    {
        [$dlockd, $port, $redis] = Servers::pair();
        $holder = new Client(Servers::client($kind, $port));
        $this->assertInstanceOf(Lock::class, $holder->lock('k'));
        $c = new Client(Servers::client($kind, $port));
        $t = hrtime(true);
        self::signalLater($dlockd->pid, 'KILL', 0.3);
        $this->throws(Unavailable::class, fn () => $c->lock('k', waitMs: 5000));
        $elapsed = self::ms($t);
        $this->assertGreaterThanOrEqual(300, $elapsed);
        $this->assertLessThan(min(5000, 1500 * Servers::slack()), $elapsed);
        $this->assertTrue(self::ended($dlockd), 'dlockd was killed');
    }

    /**
     * dlockd paused (SIGSTOP) during a wait: Unavailable once the wait and the read
     * timeout are over, never a hang; resumed, the same Client works, and no reply to
     * the abandoned command is read as a later command's. The pause lands 0.2 s into a
     * wait of 3 s. Then the read timeout is the Client's own again after a wait (granted
     * at once, here): a command to a paused dlockd times out at it, not at the wait's.
     * @dataProvider clients
     */
    public function testDlockdPausedDuringWait(string $kind): void
    {
        [$dlockd, $port, $redis] = Servers::pair();
        $holder = new Client(Servers::client($kind, $port));
        $held = $holder->lock('k');
        $c = new Client(Servers::client($kind, $port, 1.0));
        $t = hrtime(true);
        self::signalLater($dlockd->pid, 'STOP', 0.2);
        $this->throws(Unavailable::class, fn () => $c->lock('k', waitMs: 3000));
        $elapsed = self::ms($t);
        $dlockd->resume();
        $this->assertGreaterThanOrEqual(3000, $elapsed, 'not before the wait was over');
        $this->assertLessThan((3 + 1 + 1) * 1000 * Servers::slack(), $elapsed);

        // The abandoned LOCK k's reply (nil) must not be read as LOCK free's.
        $lock = $c->lock('free');
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertSame('held', $c->info('free')['state']);
        $this->assertTrue($lock->isHeld());
        $this->assertTrue($lock->release());
        $this->assertFalse($lock->isHeld());
        $this->assertNull($c->lock('k'));
        $this->assertTrue($held->release());
        $again = $c->lock('k', waitMs: 1000);
        $this->assertInstanceOf(Lock::class, $again);
        $this->assertGreaterThan($held->fence, $again->fence);
        $this->assertTrue($again->release());

        // A read timeout of 0.3 s, raised to 10.3 s for a wait: restored, a read from a
        // paused dlockd ends at 0.3 s; left raised, at 10.3 s.
        $fast = new Client(Servers::client($kind, $port, 0.3));
        $lock = $fast->lock('r', waitMs: 10000);
        $this->assertInstanceOf(Lock::class, $lock);
        $dlockd->pause();
        try {
            $t = hrtime(true);
            $this->throws(Unavailable::class, fn () => $fast->info('r'));
            $this->assertLessThan(300 + 2000 * Servers::slack(), self::ms($t), 'the read timeout raised for the wait stayed');
        } finally {
            $dlockd->resume();
        }
    }

    /**
     * The lock server down: dlockd answers -UNAVAILABLE, an Unavailable for every
     * command; the connection stays usable, and works again once the lock server is
     * back on its port.
     * @dataProvider clients
     */
    public function testLockServerDown(string $kind): void
    {
        [$dlockd, $port, $redis, $rport] = Servers::pair();
        $c = new Client(Servers::client($kind, $port));
        $lock = $c->lock('k', detached: true, ttlMs: 60000);
        $redis->stop();
        $calls = [fn () => $c->lock('x'), fn () => $c->info('k'), fn () => $lock->release(), fn () => $lock->isHeld()];
        foreach ($calls as $call) {
            $e = $this->throws(Unavailable::class, $call);
            $this->assertStringStartsWith('dlockd: UNAVAILABLE ', $e->getMessage());
        }
        // dlockd still answers this connection, and in order.
        $e = $this->throws(CommandError::class, fn () => $c->lock('x', ttlMs: 999));
        $this->assertStringContainsString('TTL of a session lock', $e->getMessage());

        $redis = Servers::redisOn($rport);
        $new = $c->lock('x');
        $this->assertInstanceOf(Lock::class, $new);
        $this->assertTrue($new->release());
    }

    /**
     * dlockd over three lock servers, two of them down: NoQuorum, which is an
     * Unavailable.
     * @dataProvider clients
     */
    public function testNoQuorum(string $kind): void
    {
        $redis = [];
        $urls = [];
        for ($i = 0; $i < 3; $i++) {
            [$redis[$i], $rport] = Servers::redis();
            $urls[] = "redis://127.0.0.1:$rport";
        }
        [$dlockd, $port] = Servers::dlockd($urls);
        $c = new Client(Servers::client($kind, $port));
        $lock = $c->lock('k');
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertTrue($lock->release());

        $redis[1]->stop();
        $lock = $c->lock('k');
        $this->assertInstanceOf(Lock::class, $lock, 'two of three are a quorum');
        $redis[2]->stop();
        foreach ([fn () => $c->lock('j'), fn () => $c->info('k'), fn () => $lock->release()] as $call) {
            $e = $this->throws(NoQuorum::class, $call);
            $this->assertInstanceOf(Unavailable::class, $e);
            $this->assertStringStartsWith('dlockd: NOQUORUM ', $e->getMessage());
        }
    }

    /**
     * dlockd with a password: a wrong one is AuthFailed at connect, the right one works
     * (URL-encoded in the URL), and a client that never authenticated gets AuthFailed
     * (NOAUTH) from its first command.
     * @dataProvider clients
     */
    public function testAuthentication(string $kind): void
    {
        $password = 'p@ss w:rd/1';
        [$dlockd, $port, $redis] = Servers::pairWithPassword($password);

        $url = "dlockd://:wrong@127.0.0.1:$port?client=$kind";
        $e = $this->throws(AuthFailed::class, fn () => Client::connect($url));
        $this->assertStringStartsWith('dlockd: WRONGPASS ', $e->getMessage());

        $c = Client::connect('dlockd://:' . rawurlencode($password) . "@127.0.0.1:$port?client=$kind");
        $lock = $c->lock('k');
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertTrue($lock->release());

        $url = "dlockd://127.0.0.1:$port?client=$kind&name=w1";
        $e = $this->throws(AuthFailed::class, fn () => Client::connect($url));
        $this->assertStringStartsWith('dlockd: NOAUTH ', $e->getMessage());
        foreach ([
            new Client(Servers::client($kind, $port)),
            Client::connect("dlockd://127.0.0.1:$port?client=$kind"),
        ] as $anonymous) {
            foreach ([fn () => $anonymous->lock('k'), fn () => $anonymous->info('k')] as $call) {
                $e = $this->throws(AuthFailed::class, $call);
                $this->assertStringStartsWith('dlockd: NOAUTH ', $e->getMessage());
            }
        }
    }

    /**
     * A worker killed (SIGKILL) inside synchronized(): its session lock passes to the
     * waiter as soon as its connection closes, not after the lease.
     * @dataProvider clients
     */
    public function testWorkerKilledInsideSynchronized(string $kind): void
    {
        [$dlockd, $port, $redis] = Servers::pair();
        $predis = is_file(__DIR__ . '/../vendor/autoload.php')
            ? __DIR__ . '/../vendor/autoload.php'
            : '/usr/share/php/Predis/autoload.php';
        $code = 'require $argv[1]; require $argv[2];'
            . ' $c = Dlock\Client::connect("dlockd://127.0.0.1:$argv[3]?client=$argv[4]");'
            . ' $c->synchronized("k", function () { echo "held\n"; sleep(30); }, waitMs: 0);';
        $log = tempnam(sys_get_temp_dir(), 'dlock-php-worker-');
        $worker = Process::start(
            [PHP_BINARY, '-r', $code, __DIR__ . '/../autoload.php', $predis, (string) $port, $kind],
            $log
        );
        $deadline = microtime(true) + 5 * Servers::slack();
        while (!str_contains((string) file_get_contents($log), "held\n")) {
            $this->assertTrue($worker->running(), 'the worker died: ' . file_get_contents($log));
            $this->assertLessThan($deadline, microtime(true), 'the worker did not take the lock');
            usleep(10000);
        }
        $c = new Client(Servers::client($kind, $port));
        $this->assertNull($c->lock('k'));

        $t = hrtime(true);
        self::signalLater($worker->pid, 'KILL', 0.3);
        $lock = $c->lock('k', waitMs: 5000);
        $elapsed = self::ms($t);
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertTrue(self::ended($worker), 'the worker was killed');
        $this->assertGreaterThanOrEqual(300, $elapsed, 'not before the kill');
        $this->assertLessThan(1000 * Servers::slack(), $elapsed - 300, 'within 1 s of the kill');
        $this->assertTrue($lock->release());
    }

    /** Whether $p ends within a second (a killed process closes its sockets before it is reaped). */
    private static function ended(Process $p): bool
    {
        $deadline = microtime(true) + 1;
        while ($p->running() && microtime(true) < $deadline) {
            usleep(1000);
        }
        return !$p->running();
    }
}
