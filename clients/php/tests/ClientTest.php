<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use Dlock\CommandError;
use Dlock\InvalidArgument;
use Dlock\Lock;
use Dlock\NotAcquired;
use Dlock\OutOfStock;
use Dlock\Reservation;
use Dlock\Tests\Support\Process;
use Dlock\Tests\Support\Helpers;
use Dlock\Tests\Support\Servers;
use PHPUnit\Framework\TestCase;

/**
 * Client, Lock, Semaphore, Stock and Reservation against one redis-server and dlockd for
 * the class; every test runs over phpredis and over predis, on names of its own.
 */
final class ClientTest extends TestCase
{
    use Helpers;

    private const HEX32 = '/^[0-9a-f]{32}$/';

    private static ?Process $redis = null;
    private static ?Process $dlockd = null;
    private static int $port = 0;

    public static function setUpBeforeClass(): void
    {
        [self::$dlockd, self::$port, self::$redis] = Servers::pair();
    }

    public static function tearDownAfterClass(): void
    {
        self::$dlockd?->stop();
        self::$redis?->stop();
    }

    /** Each test's Redis client: phpredis's \Redis, then a Predis\Client. */
    public function clients(): iterable
    {
        yield 'phpredis' => ['phpredis'];
        yield 'predis' => ['predis'];
    }

    private function client(string $kind): Client
    {
        return new Client(Servers::client($kind, self::$port));
    }

    /**
     * lock() gives a Lock with a 32-hex token, a fence greater than every earlier
     * holder's (this connection's or another's) and a validity within the TTL.
     * @dataProvider clients
     */
    public function testLockGivesTokenIncreasingFenceAndValidity(string $kind): void
    {
        $a = $this->client($kind);
        $b = $this->client($kind);
        $name = $this->name('fence');
        $last = 0;
        foreach ([$a, $b, $a, $b, $a] as $c) {
            $lock = $c->lock($name, ttlMs: 5000);
            $this->assertInstanceOf(Lock::class, $lock);
            $this->assertSame($name, $lock->name);
            $this->assertMatchesRegularExpression(self::HEX32, $lock->token);
            $this->assertFalse($lock->detached);
            $this->assertGreaterThan(0, $lock->validityMs);
            $this->assertLessThanOrEqual(5000, $lock->validityMs);
            $this->assertGreaterThan($last, $lock->fence);
            $last = $lock->fence;
            $this->assertTrue($lock->release());
        }
    }

    /**
     * release() is true once, then false; isHeld() is true while held and false after,
     * from the holder and from another connection given the token (CHECK). An adopted
     * lock carries the fence it is given (0 when none is).
     * @dataProvider clients
     */
    public function testReleaseAndIsHeld(string $kind): void
    {
        $c = $this->client($kind);
        $other = $this->client($kind);
        $name = $this->name('release');
        $lock = $c->lock($name);
        $this->assertTrue($lock->isHeld());
        $this->assertTrue($other->adopt($name, $lock->token)->isHeld());
        $this->assertTrue($lock->isHeld(), 'CHECK changed nothing');
        $this->assertSame(0, $other->adopt($name, $lock->token)->fence);
        $adopted = $other->adopt($name, $lock->token, $lock->fence);
        $this->assertSame([$name, $lock->token, $lock->fence], [$adopted->name, $adopted->token, $adopted->fence]);
        $this->assertTrue($adopted->detached);
        $this->assertTrue($lock->release());
        $this->assertFalse($lock->release());
        $this->assertFalse($lock->isHeld());
        $this->assertFalse($other->adopt($name, $lock->token)->isHeld());
        foreach (['', 'xyz', strtoupper($lock->token), $lock->token . '0'] as $bad) {
            $this->throws(InvalidArgument::class, fn () => $other->adopt($name, $bad));
        }
    }

    /**
     * extend() sets the lease from now (true), and is false once the lock ended:
     * released, or a detached lease that ran out.
     * @dataProvider clients
     */
    public function testExtend(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('extend');
        $lock = $c->lock($name, ttlMs: 1000, detached: true);
        $this->assertTrue($lock->extend(60000));
        $remaining = $c->info($name)['remaining_ms'];
        $this->assertGreaterThan(50000, $remaining);
        $this->assertLessThanOrEqual(60000, $remaining);
        $this->assertTrue($lock->release());
        $this->assertFalse($lock->extend(60000));
        $session = $c->lock($name, ttlMs: 1000);
        $this->assertTrue($session->extend(20000));
        $this->assertGreaterThan(10000, $c->info($name)['remaining_ms']);
        $this->assertTrue($session->release());
        $short = $c->lock($name, ttlMs: 10, detached: true);
        usleep(50000);
        $this->assertFalse($short->extend(60000));
        $this->assertSame('free', $c->info($name)['state']);
    }

    /**
     * A name another connection holds: null at once (waitMs 0), or after the whole 300 ms.
     * @dataProvider clients
     */
    public function testLockHeldElsewhereIsNull(string $kind): void
    {
        $held = $this->client($kind)->lock($name = $this->name('held'));
        $c = $this->client($kind);
        $t = hrtime(true);
        $this->assertNull($c->lock($name));
        $this->assertLessThan(200 * Servers::slack(), self::ms($t));
        $t = hrtime(true);
        $this->assertNull($c->lock($name, waitMs: 300));
        $elapsed = self::ms($t);
        $this->assertGreaterThanOrEqual(300, $elapsed);
        $this->assertLessThan(1300 * Servers::slack(), $elapsed);
        $this->assertTrue($held->isHeld());
        $this->assertTrue($held->release());
    }

    /**
     * A wait is served when the holder (another process, with the token) releases the
     * lock: the waiter gets it after the release, with a greater fence.
     * @dataProvider clients
     */
    public function testWaitEndsWhenHolderReleases(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('wait-release');
        $held = $c->lock($name, ttlMs: 30000, detached: true);
        $code = '$r = new Redis(); $r->connect("127.0.0.1", (int) $argv[1]); usleep(300000);'
            . ' exit($r->rawCommand("UNLOCK", $argv[2], $argv[3]) === 1 ? 0 : 1);';
        $t = hrtime(true);
        $child = proc_open(
            [PHP_BINARY, '-r', $code, (string) self::$port, $name, $held->token],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w']],
            $pipes
        );
        $lock = $c->lock($name, waitMs: 5000);
        $elapsed = self::ms($t);
        $this->assertSame(0, proc_close($child), 'the child released the lock');
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertGreaterThan($held->fence, $lock->fence);
        $this->assertGreaterThanOrEqual(300, $elapsed);
        $this->assertLessThan(3000 * Servers::slack(), $elapsed);
        $this->assertTrue($lock->release());
    }

    /**
     * A wait is served when the holder's detached lease runs out (bounded, and FOREVER).
     * @dataProvider clients
     */
    public function testWaitEndsWhenLeaseRunsOut(string $kind): void
    {
        $holder = $this->client($kind);
        $c = $this->client($kind);
        foreach ([2000, Client::FOREVER] as $wait) {
            $name = $this->name('wait-lease');
            $t = hrtime(true);
            $held = $holder->lock($name, ttlMs: 200, detached: true);
            $lock = $c->lock($name, waitMs: $wait);
            $elapsed = self::ms($t);
            $this->assertInstanceOf(Lock::class, $lock);
            $this->assertGreaterThan($held->fence, $lock->fence);
            $this->assertGreaterThanOrEqual(200, $elapsed, 'not before the lease ended');
            $this->assertLessThan(1500 * Servers::slack(), $elapsed);
            $this->assertFalse($held->release());
            $this->assertTrue($lock->release());
        }
    }

    /**
     * synchronized() runs the callable under the lock, returns its value and releases
     * the lock; rethrows the callable's exception, the lock released; and throws
     * NotAcquired, without calling the callable, when the lock is not had in the wait.
     * A callable that releases the lock itself has not lost it: its value is returned.
     * @dataProvider clients
     */
    public function testSynchronized(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('sync');
        $seen = null;
        $value = $c->synchronized($name, function (Lock $lock) use ($c, $kind, $name, &$seen): array {
            $seen = $lock;
            $this->assertSame($name, $lock->name);
            $this->assertSame('held', $c->info($name)['state']);
            $this->assertNull($this->client($kind)->lock($name));
            return ['done', $lock->fence];
        });
        $this->assertSame(['done', $seen->fence], $value);
        $this->assertSame('free', $c->info($name)['state']);
        $this->assertFalse($seen->isHeld());
        $boom = new \DomainException('boom');
        $e = $this->throws(\DomainException::class, fn () => $c->synchronized($name, fn () => throw $boom), dlock: false);
        $this->assertSame($boom, $e);
        $this->assertSame('free', $c->info($name)['state']);
        $this->assertSame(7, $c->synchronized($name, function (Lock $lock) use ($c, $name): int {
            $this->assertTrue($lock->release());
            $this->assertSame('free', $c->info($name)['state']);
            return 7;
        }));
        $this->assertSame('free', $c->info($name)['state']);
        $held = $this->client($kind)->lock($name);
        foreach ([0, 100] as $wait) {
            $never = fn () => $this->fail('called without the lock');
            $e = $this->throws(NotAcquired::class, fn () => $c->synchronized($name, $never, waitMs: $wait));
            $this->assertStringContainsString("lock '$name' not acquired within $wait ms", $e->getMessage());
        }
        $this->assertTrue($held->release());
    }

    /**
     * info(): a free name (never held, and released), a holder with its label, the fence.
     * @dataProvider clients
     */
    public function testInfo(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('info');
        $this->assertSame(['state' => 'free', 'holder' => null, 'remaining_ms' => 0, 'fence' => 0], $c->info($name));
        $lock = $c->lock($name, ttlMs: 20000, label: 'worker-7');
        $info = $c->info($name);
        $this->assertSame(['state', 'holder', 'remaining_ms', 'fence'], array_keys($info));
        $this->assertSame('held', $info['state']);
        $this->assertMatchesRegularExpression('/^worker-7 127\.0\.0\.1:\d+ via dlockd \S+:\d+$/', $info['holder']);
        $this->assertGreaterThan(15000, $info['remaining_ms']);
        $this->assertLessThanOrEqual(20000, $info['remaining_ms']);
        $this->assertSame($lock->fence, $info['fence']);
        $this->assertTrue($lock->release());
        $free = ['state' => 'free', 'holder' => null, 'remaining_ms' => 0, 'fence' => $lock->fence];
        $this->assertSame($free, $c->info($name));
    }

    /**
     * Shared locks: two holders at once (info() lists them, `shared` counts them), an
     * exclusive lock refused while either holds, granted after, then refusing a shared one.
     * @dataProvider clients
     */
    public function testSharedLocks(string $kind): void
    {
        $a = $this->client($kind);
        $b = $this->client($kind);
        $name = $this->name('shared');
        $r1 = $a->lock($name, shared: true, label: 'reader-1');
        $r2 = $b->lock($name, shared: true, label: 'reader-2');
        $this->assertContainsOnlyInstancesOf(Lock::class, [$r1, $r2]);
        $this->assertNotSame($r1->token, $r2->token);
        $info = $a->info($name);
        $this->assertSame('held', $info['state']);
        $this->assertSame(2, $info['shared']);
        $this->assertCount(2, $info['holder']);
        $labels = array_map(fn (string $h) => strstr($h, ' ', true), $info['holder']);
        sort($labels);
        $this->assertSame(['reader-1', 'reader-2'], $labels);
        $this->assertNull($this->client($kind)->lock($name));
        $this->assertTrue($r1->release());
        $this->assertSame(1, $a->info($name)['shared']);
        $this->assertNull($a->lock($name));
        $this->assertTrue($r2->release());
        $this->assertArrayNotHasKey('shared', $a->info($name));
        $w = $a->lock($name);
        $this->assertInstanceOf(Lock::class, $w);
        $this->assertNull($b->lock($name, shared: true));
        $this->assertTrue($w->release());
    }

    /**
     * InvalidArgument (a Dlock\Exception) before anything is sent: an empty name or one
     * of 64 KB or 4097 bytes wherever a name is taken, a negative wait (-1 included), a
     * TTL below dlockd's floor of any lock (10 ms) or above 2^31 - 1, an empty label or
     * one with a NUL, a MAXHOLD for a detached lock, a negative default MAXHOLD. A name of
     * 4096 bytes (dlockd's limit), a wait of 0 and Client::FOREVER on a free name take the
     * lock; so does a detached lock of 10 ms, and one from a Client with a default
     * MAXHOLD (which is for session locks).
     * @dataProvider clients
     */
    public function testArguments(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('args');
        foreach ([-1, -2, -1000, PHP_INT_MIN] as $bad) {
            $this->throws(InvalidArgument::class, fn () => $c->lock($name, waitMs: $bad));
        }
        foreach ([0, 5, 9, 2147483648] as $bad) {
            $this->throws(InvalidArgument::class, fn () => $c->lock($name, ttlMs: $bad, detached: true));
            $this->throws(InvalidArgument::class, fn () => $c->lock($name, ttlMs: $bad));
        }
        foreach (['', "web\0one"] as $bad) {
            $this->throws(InvalidArgument::class, fn () => $c->lock($name, label: $bad));
        }
        $this->throws(InvalidArgument::class, fn () => $c->lock($name, detached: true, maxHoldMs: 1000));
        $this->throws(InvalidArgument::class, fn () => new Client(Servers::client($kind, self::$port), maxHoldMs: -1));
        $this->assertSame('free', $c->info($name)['state']);
        $this->assertInstanceOf(Lock::class, $c->lock("$name:10", ttlMs: 10, detached: true));
        $bounded = new Client(Servers::client($kind, self::$port), maxHoldMs: 60000);
        $detached = $bounded->lock("$name:d", detached: true);
        $this->assertInstanceOf(Lock::class, $detached);
        $this->assertTrue($detached->release());
        foreach ([0, Client::FOREVER] as $wait) {
            $lock = $c->lock($name, waitMs: $wait);
            $this->assertInstanceOf(Lock::class, $lock);
            $this->assertTrue($lock->release());
        }
        foreach (['', str_repeat('n', 65536), str_repeat('n', 4097)] as $bad) {
            $this->throws(InvalidArgument::class, fn () => $c->lock($bad));
            $this->throws(InvalidArgument::class, fn () => $c->info($bad));
            $this->throws(InvalidArgument::class, fn () => $c->synchronized($bad, fn () => null));
            $this->throws(InvalidArgument::class, fn () => $c->semaphore($bad, 2));
            $this->throws(InvalidArgument::class, fn () => $c->stock($bad));
        }
        $long = str_repeat('n', 4096 - 8) . sprintf('%08d', ++self::$seq);
        $lock = $c->lock($long);
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertSame('held', $c->info($long)['state']);
        $this->assertTrue($lock->release());
    }

    /**
     * Names are bytes: with CR LF, spaces or UTF-8 they lock, show in info() and release.
     * @dataProvider clients
     */
    public function testBinaryNames(string $kind): void
    {
        $c = $this->client($kind);
        $base = $this->name('bin');
        foreach (["$base\r\nUNLOCK x y\r\n", "$base with spaces Ümlaut 🔒 ключ"] as $name) {
            $lock = $c->lock($name);
            $this->assertInstanceOf(Lock::class, $lock);
            $this->assertSame($name, $lock->name);
            $info = $c->info($name);
            $this->assertSame('held', $info['state']);
            $this->assertSame($lock->fence, $info['fence']);
            $this->assertSame('free', $c->info($base)['state']);
            $this->assertTrue($lock->release());
            $this->assertSame('free', $c->info($name)['state']);
        }
    }

    /**
     * dlockd's CommandError, with its message: a session TTL under its floor of 1000 ms
     * (a detached lock of 100 ms is fine), and a LOCK of a name this connection holds
     * as a session lock, at once (not a wait for itself), the lock it holds untouched.
     * @dataProvider clients
     */
    public function testCommandErrors(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('floor');
        $e = $this->throws(CommandError::class, fn () => $c->lock($name, ttlMs: 999));
        $this->assertStringStartsWith('dlockd: ERR TTL of a session lock must be at least 1000 ms', $e->getMessage());
        $this->assertSame('free', $c->info($name)['state']);
        $lock = $c->lock($name, ttlMs: 100, detached: true);
        $this->assertTrue($lock->detached);
        $this->assertGreaterThan(0, $lock->validityMs);
        $this->assertLessThanOrEqual(100, $lock->validityMs);
        $this->assertTrue($lock->release());
        $lock = $c->lock($name);
        $t = hrtime(true);
        $e = $this->throws(CommandError::class, fn () => $c->lock($name, waitMs: 5000));
        $this->assertLessThan(1000 * Servers::slack(), self::ms($t));
        $this->assertStringStartsWith('dlockd: ERR this connection already holds lock', $e->getMessage());
        $this->assertTrue($lock->isHeld());
        $this->assertTrue($lock->release());
        $again = $c->lock($name);
        $this->assertInstanceOf(Lock::class, $again);
        $this->assertTrue($again->release());
    }

    /**
     * A semaphore of 2 gives two permits, refuses a third until one is released; its
     * synchronized() runs the callable under a permit and gives it back.
     * @dataProvider clients
     */
    public function testSemaphore(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('sem');
        $sem = $c->semaphore($name, 2);
        $this->assertSame(2, $sem->permits);
        $p1 = $sem->acquire();
        $p2 = $this->client($kind)->semaphore($name, 2)->acquire();
        $this->assertContainsOnlyInstancesOf(Lock::class, [$p1, $p2]);
        $this->assertMatchesRegularExpression(self::HEX32, $p1->token);
        $this->assertNotSame($p1->token, $p2->token);
        $this->assertGreaterThan($p1->fence, $p2->fence);
        $this->assertSame(2, $c->info($name)['shared']);
        $this->assertNull($sem->acquire());
        $this->assertNull($sem->acquire(waitMs: 100));
        $this->throws(NotAcquired::class, fn () => $sem->synchronized(fn () => 'never'));
        $this->assertTrue($p1->release());
        $p3 = $sem->acquire();
        $this->assertInstanceOf(Lock::class, $p3);
        $this->assertTrue($p3->release());
        $value = $sem->synchronized(function (Lock $permit) use ($c, $name): array {
            $this->assertSame(2, $c->info($name)['shared']);
            return [$permit->fence];
        });
        $this->assertGreaterThan($p3->fence, $value[0]);
        $this->assertSame(1, $c->info($name)['shared']);
        $this->assertTrue($p2->release());
        $this->assertSame('free', $c->info($name)['state']);
    }

    /**
     * Stock: reservations take units all or none, OutOfStock says whether units are
     * only reserved or sold out (with the state), commit is idempotent, a committed
     * reservation cannot be canceled, and another Client commits a reservation by id.
     * @dataProvider clients
     */
    public function testStock(string $kind): void
    {
        $sku = $this->name('sku');
        $stock = $this->client($kind)->stock($sku);
        $state = fn (int $st, int $av, int $re, int $so, int $rs): array => ['stock' => $st, 'available' => $av,
            'reserved' => $re, 'sold' => $so, 'reservations' => $rs, 'waiters' => 0];
        $this->assertSame($state(0, 0, 0, 0, 0), $stock->status());
        $this->assertSame($state(3, 3, 0, 0, 0), $stock->set(3));
        $r = $stock->reserve(2);
        $this->assertInstanceOf(Reservation::class, $r);
        $this->assertMatchesRegularExpression(self::HEX32, $r->id);
        $this->assertSame([$sku, 2], [$r->sku, $r->qty]);
        $this->assertSame($state(3, 1, 2, 0, 1), $stock->status());
        $e = $this->throws(OutOfStock::class, fn () => $stock->reserve(2));
        $this->assertFalse($e->soldOut);
        $this->assertSame($state(3, 1, 2, 0, 1), $e->state);
        $this->assertTrue($r->commit());
        $this->assertTrue($r->commit());
        $this->assertSame($state(3, 1, 0, 2, 0), $stock->status());
        $e = $this->throws(OutOfStock::class, fn () => $stock->reserve(2));
        $this->assertTrue($e->soldOut);
        $this->assertSame($state(3, 1, 0, 2, 0), $e->state);
        $this->assertFalse($r->cancel());
        $last = $stock->reserve(1, leaseMs: 1000);
        $this->assertTrue($last->extend(60000));
        $this->assertTrue($last->cancel());
        $this->assertFalse($last->cancel());
        $this->assertFalse($last->commit());
        $this->assertFalse($last->extend(60000));
        $this->assertSame($state(3, 1, 0, 2, 0), $stock->status());
        $last = $stock->reserve(1, leaseMs: 60000);
        $elsewhere = $this->client($kind)->stock($sku)->reservation($last->id);
        $this->assertNull($elsewhere->qty);
        $this->assertTrue($elsewhere->commit());
        $this->assertTrue($last->commit());
        $this->assertSame($state(3, 0, 0, 3, 0), $stock->status());
        $this->throws(InvalidArgument::class, fn () => $stock->reservation('not-an-id'));
    }

    /**
     * A wait longer than the Redis client's read timeout (0.5 s here) is read to its end:
     * the timeout is raised for the wait, so that a LOCK granted at about 1 s (when the
     * holder's lease ends) or nil after 0.7 s is its reply, not a timeout. And it is put
     * back after either: phpredis's option reads 0.5 again, and the commands after, plain
     * and waitMs 0, work. (That predis's comes back too: FailureTest, with dlockd paused.)
     * @dataProvider clients
     */
    public function testWaitRaisesTheReadTimeoutAndRestoresIt(string $kind): void
    {
        $redis = Servers::client($kind, self::$port, 0.5);
        $c = new Client($redis);
        $holder = $this->client($kind);
        $restored = function (string $after) use ($redis): void {
            if ($redis instanceof \Redis) {
                $this->assertEquals(0.5, $redis->getOption(\Redis::OPT_READ_TIMEOUT), "read timeout after $after");
            }
        };
        $name = $this->name('raise');
        $t = hrtime(true);
        $held = $holder->lock($name, ttlMs: 1000, detached: true);
        $lock = $c->lock($name, waitMs: 3000);
        $elapsed = self::ms($t);
        $this->assertInstanceOf(Lock::class, $lock);
        $this->assertGreaterThan($held->fence, $lock->fence);
        $this->assertGreaterThanOrEqual(990, $elapsed, 'not before the lease ended');
        $this->assertLessThan(1000 + 1500 * Servers::slack(), $elapsed);
        $restored('a granted wait');
        $this->assertSame('held', $c->info($name)['state']);
        $this->assertTrue($lock->release());

        $kept = $holder->lock($other = $this->name('raise-nil'), ttlMs: 30000, detached: true);
        $t = hrtime(true);
        $this->assertNull($c->lock($other, waitMs: 700));
        $elapsed = self::ms($t);
        $this->assertGreaterThanOrEqual(700, $elapsed);
        $this->assertLessThan(700 + 1000 * Servers::slack(), $elapsed);
        $restored('a wait that ended nil');
        $t = hrtime(true);
        $this->assertNull($c->lock($other));
        $this->assertLessThan(200 * Servers::slack(), self::ms($t));
        $again = $c->lock($name);
        $this->assertInstanceOf(Lock::class, $again);
        $this->assertSame('held', $c->info($other)['state']);
        $restored('commands without a wait');
        $this->assertTrue($again->release());
        $this->assertTrue($kept->release());
    }

    /**
     * A Redis client without a read timeout keeps working after a lock() that waited, and
     * the lock stays held: the read timeout raised for the wait is restored as it was.
     * @dataProvider clients
     */
    public function testNoReadTimeoutAfterWait(string $kind): void
    {
        $redis = $kind === 'predis' ? new \Predis\Client(['port' => self::$port]) : new \Redis();
        if ($redis instanceof \Redis) {
            $redis->connect('127.0.0.1', self::$port);
        }
        $c = new Client($redis);
        $lock = $c->lock($name = $this->name('rt'), waitMs: 100);
        $this->assertInstanceOf(Lock::class, $lock);
        for ($i = 0; $i < 20; $i++) {
            $this->assertSame('held', $c->info($name)['state']);
        }
        $this->assertTrue($lock->isHeld());
        $this->assertTrue($lock->release());
    }}
