<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use Dlock\Symfony\DlockdStore;
use Dlock\Tests\Support\Servers;
use Dlock\Unavailable;
use PHPUnit\Framework\TestCase;
use Predis\Command\CommandInterface;
use Predis\Connection\Parameters;
use Predis\Connection\StreamConnection;
use Symfony\Component\Lock\Exception\LockAcquiringException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;

/**
 * Dlock\Symfony\DlockdStore through Symfony Lock's own LockFactory and Lock (Debian's
 * php-symfony-lock 5.4), over phpredis and predis, against a real dlockd: conflicts,
 * release, a blocking acquire served when a holder in another process releases (one
 * waiting LOCK, no polling), shared locks, refresh() as the Key and dlockd see it, a TTL
 * that runs out, and detached locks that outlive their connection.
 */
final class SymfonyStoreTest extends TestCase
{
    /** @var list<mixed> the servers' processes: kept while the test runs */
    private array $keep = [];
    private int $port;
    /** the test's own connection, for LOCKINFO and INFO */
    private Client $dlock;
    private \Redis $redis;

    protected function setUp(): void
    {
        [$dlockd, $this->port, $redis] = Servers::pair();
        $this->keep = [$dlockd, $redis];
        $this->redis = Servers::phpredis($this->port);
        $this->dlock = new Client($this->redis);
    }

    protected function tearDown(): void
    {
        $this->keep = [];
    }

    public function clients(): array
    {
        return ['phpredis' => ['phpredis'], 'predis' => ['predis']];
    }

    /** A LockFactory on a store over a connection of its own. */
    private function factory(string $kind, ?object &$conn = null): LockFactory
    {
        $conn = Servers::client($kind, $this->port);
        return new LockFactory(new DlockdStore($conn));
    }

    /** @dataProvider clients */
    public function testAcquireConflictsAndRelease(string $kind): void
    {
        $factory = $this->factory($kind);
        $lock = $factory->createLock('r', 10);
        $this->assertTrue($lock->acquire(false));
        $this->assertTrue($lock->isAcquired());
        $info = $this->dlock->info('r');
        $this->assertSame('held', $info['state']);
        $this->assertGreaterThan(9000, $info['remaining_ms']);
        $this->assertLessThanOrEqual(10000, $info['remaining_ms']);
        $fence = $info['fence'];

        // Another Lock of the resource, on the same factory and connection, and on
        // another connection's: refused while the first holds.
        $same = $factory->createLock('r', 10);
        $this->assertFalse($same->acquire(false));
        $this->assertFalse($same->isAcquired());
        $other = $this->factory($kind)->createLock('r', 10);
        $this->assertFalse($other->acquire(false));
        $this->assertFalse($other->isAcquired());
        // The holder acquiring again keeps its lock (a fresh lease, no new fence).
        $this->assertTrue($lock->acquire(false));
        $this->assertSame($fence, $this->dlock->info('r')['fence']);

        $lock->release();
        $this->assertFalse($lock->isAcquired());
        $this->assertSame('free', $this->dlock->info('r')['state']);
        $this->assertTrue($other->acquire(false));
        $this->assertTrue($other->isAcquired());
        $this->assertFalse($lock->acquire(false));
        $other->release();
        $this->assertSame('free', $this->dlock->info('r')['state']);
    }

    /**
     * acquire(true) waits for a holder in another process and returns as it releases:
     * one LOCK that waits (INFO: one wait, no LOCK refused), not Symfony's 100 ms polls.
     * The holder releases once it sees the waiter parked on dlockd (INFO blocked_clients),
     * so the LOCK has gone out and waits before the release, however slow the machine.
     *
     * @dataProvider clients
     */
    public function testBlockingAcquireIsServedWhenTheOtherProcessReleases(string $kind): void
    {
        $lock = $this->factory($kind)->createLock('b', 10);
        $child = proc_open(
            [PHP_BINARY, __DIR__ . '/fixtures/symfony_holder.php', $kind, (string) $this->port, 'b'],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $pipes
        );
        $this->assertIsResource($child);
        $line = (string) fgets($pipes[1]);
        if (preg_match('/^LOCKED (\S+)$/', $line, $m) !== 1) {
            $this->fail("the holder did not take the lock: $line" . stream_get_contents($pipes[2]));
        }
        $this->assertSame('held', $this->dlock->info('b')['state']);
        $before = $this->locksInfo();

        $this->assertTrue($lock->acquire(true));
        $acquired = microtime(true);
        $this->assertTrue($lock->isAcquired());

        $rest = stream_get_contents($pipes[1]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($child), $rest);
        $this->assertSame(1, preg_match('/^WAITER \S+\nRELEASING (\S+)\nRELEASED /m', $rest, $m), $rest);
        $releasing = (float) $m[1];
        // After the holder's release began, and promptly: no poll's sleep between.
        $this->assertGreaterThan($releasing, $acquired);
        $this->assertLessThan(0.2 * Servers::slack(), $acquired - $releasing);
        $after = $this->locksInfo();
        $this->assertSame($before['waits'] + 1, $after['waits'], 'the blocking acquire is one LOCK that waited');
        $this->assertSame($before['locks_not_acquired'], $after['locks_not_acquired'], 'a LOCK was refused: polling');
        $this->assertSame($before['locks_acquired'] + 1, $after['locks_acquired']);
        $lock->release();
        $this->assertSame('free', $this->dlock->info('b')['state']);
    }

    /** @dataProvider clients */
    public function testSharedLocks(string $kind): void
    {
        $factory = $this->factory($kind);
        $r1 = $factory->createLock('s', 10);
        $r2 = $this->factory($kind)->createLock('s', 10);
        $this->assertTrue($r1->acquireRead(false));
        $this->assertTrue($r2->acquireRead(false));
        $this->assertTrue($r1->isAcquired());
        $this->assertTrue($r2->isAcquired());
        $info = $this->dlock->info('s');
        $this->assertSame('held', $info['state']);
        $this->assertSame(2, $info['shared']);

        $w = $factory->createLock('s', 10);
        $this->assertFalse($w->acquire(false));
        $r1->release();
        $this->assertFalse($r1->isAcquired());
        $this->assertSame(1, $this->dlock->info('s')['shared']);
        $this->assertFalse($w->acquire(false));
        // The last reader takes the lock exclusively: its read lock is given up for it.
        $this->assertTrue($r2->acquire(false));
        $this->assertArrayNotHasKey('shared', $this->dlock->info('s'));
        $this->assertFalse($r1->acquireRead(false));
        $r2->release();
        $this->assertTrue($w->acquire(false));
        $this->assertFalse($r1->acquireRead(false));
        $w->release();
        $this->assertSame('free', $this->dlock->info('s')['state']);
    }

    /**
     * A read lock's holder asking for the write lock while another reads is refused, and
     * keeps its read lock: still two shared holders on dlockd, and isAcquired(). Once the
     * other reader is gone, the same acquire() is granted.
     *
     * @dataProvider clients
     */
    public function testRefusedPromotionKeepsTheReadLock(string $kind): void
    {
        $a = $this->factory($kind)->createLock('p', 10);
        $b = $this->factory($kind)->createLock('p', 10);
        $this->assertTrue($a->acquireRead(false));
        $this->assertTrue($b->acquireRead(false));
        $this->assertFalse($a->acquire(false));
        $info = $this->dlock->info('p');
        $this->assertSame('held', $info['state']);
        $this->assertSame(2, $info['shared'] ?? null, 'the refused promotion gave up its read lock');
        $this->assertTrue($a->isAcquired());
        $this->assertTrue($b->isAcquired());

        $b->release();
        $this->assertSame(1, $this->dlock->info('p')['shared'] ?? null);
        $this->assertTrue($a->acquire(false));
        $info = $this->dlock->info('p');
        $this->assertSame('held', $info['state']);
        $this->assertArrayNotHasKey('shared', $info);
        $a->release();
        $this->assertSame('free', $this->dlock->info('p')['state']);
    }

    /**
     * refresh() sets the lease to the new TTL on dlockd and in the Key. Bounds that hold
     * however slow the machine: a Key's lifetime of TTL runs from before the EXTEND that
     * set it, so it is at most TTL and at least TTL less the time since before the call;
     * dlockd's lease (PTTL) the same, in ms.
     *
     * @dataProvider clients
     */
    public function testRefreshPutsOffTheExpiration(string $kind): void
    {
        $lock = $this->factory($kind)->createLock('f', 1.0);
        $lifetime = function (float $ttl, float $since) use ($lock): void {
            $left = $lock->getRemainingLifetime();
            $this->assertLessThanOrEqual($ttl, $left);
            $this->assertGreaterThanOrEqual($ttl - (microtime(true) - $since) - 0.001, $left);
            $remaining = $this->dlock->info('f')['remaining_ms'];
            $this->assertLessThanOrEqual($ttl * 1000, $remaining);
            $this->assertGreaterThanOrEqual(($ttl - (microtime(true) - $since)) * 1000 - 2, $remaining);
        };
        $t = microtime(true);
        $this->assertTrue($lock->acquire(false));
        $lifetime(1.0, $t);
        usleep(200000);
        $this->assertLessThan(0.85, $lock->getRemainingLifetime());

        $t = microtime(true);
        $lock->refresh(5.0);
        $lifetime(5.0, $t);

        // Without a TTL, refresh() uses the Lock's own: down to 1 s again.
        $t = microtime(true);
        $lock->refresh();
        $lifetime(1.0, $t);
        $lock->release();
        $this->assertSame('free', $this->dlock->info('f')['state']);
    }

    /**
     * The Key never outlives the lease it was given: its lifetime runs from before the
     * EXTEND was sent, not from when its reply was read, which a process descheduled
     * at the wrong moment (here: a predis connection that reads EXTEND's reply 150 ms
     * late) reads long after dlockd set the lease.
     */
    public function testRefreshedKeyNeverOutlivesTheLease(): void
    {
        $late = new class (Parameters::create(['host' => '127.0.0.1', 'port' => $this->port,
            'read_write_timeout' => 5.0])) extends StreamConnection {
            public function readResponse(CommandInterface $command)
            {
                $reply = parent::readResponse($command);
                if ($command->getId() === 'EXTEND') {
                    usleep(150000);
                }
                return $reply;
            }
        };
        $lock = (new LockFactory(new DlockdStore(new \Predis\Client($late))))->createLock('k', 5.0);
        $this->assertTrue($lock->acquire(false));
        $lock->refresh();
        $keyEnds = microtime(true) + $lock->getRemainingLifetime();
        $remaining = $this->dlock->info('k')['remaining_ms'];
        $leaseEnds = microtime(true) + ($remaining + 1) / 1000; // no earlier than it ends
        $this->assertLessThanOrEqual(4850, $remaining);
        $this->assertLessThanOrEqual($leaseEnds, $keyEnds, "the Key's lifetime ends after dlockd's lease");
        $lock->release();
    }

    /**
     * A lock of 0.3 s not refreshed ends with its TTL: the Lock knows it, another takes
     * it; release() then throws nothing and leaves the new holder's lock alone, and
     * refresh() is a LockConflictedException.
     *
     * @dataProvider clients
     */
    public function testUnrefreshedLockExpires(string $kind): void
    {
        $factory = $this->factory($kind);
        $lock = $factory->createLock('e', 0.3);
        $alone = $factory->createLock('e2', 0.3);
        $this->assertTrue($lock->acquire(false));
        $this->assertTrue($alone->acquire(false));
        $this->assertLessThanOrEqual(300, $this->dlock->info('e')['remaining_ms']);
        usleep(300000 + 200000 * Servers::slack());
        $this->assertTrue($lock->isExpired());
        $this->assertFalse($lock->isAcquired());
        $this->assertSame('free', $this->dlock->info('e')['state']);
        $other = $this->factory($kind)->createLock('e', 10);
        $this->assertTrue($other->acquire(false));
        $fence = $this->dlock->info('e')['fence'];

        $lock->release();
        $alone->release();
        $this->assertTrue($other->isAcquired());
        $info = $this->dlock->info('e');
        $this->assertSame('held', $info['state']);
        $this->assertSame($fence, $info['fence']);
        $this->assertSame('free', $this->dlock->info('e2')['state']);
        try {
            $lock->refresh();
            $this->fail('refresh() of a lock another holds');
        } catch (LockConflictedException) {
        }
        $this->assertTrue($other->isAcquired());
        $other->release();
    }

    /**
     * The store's locks are detached leases: the connection that took one closing
     * leaves it held until its TTL; another process may release it by its Key.
     *
     * @dataProvider clients
     */
    public function testLocksOutliveTheirConnection(string $kind): void
    {
        $factory = $this->factory($kind, $conn);
        $lock = $factory->createLock('d', 0.8, false);
        $key = new Key('d2');
        $byKey = $factory->createLockFromKey($key, 10, false);
        $before = microtime(true);
        $this->assertTrue($lock->acquire(false));
        $this->assertTrue($byKey->acquire(false));
        $kind === 'predis' ? $conn->disconnect() : $conn->close();
        usleep(100000);
        $this->assertSame(0, $this->locksInfo()['session_locks']);
        $info = $this->dlock->info('d');
        $this->assertSame('held', $info['state']);
        $this->assertLessThanOrEqual(800 - 100, $info['remaining_ms']);

        // Released elsewhere, by the Key (as a queued job would get it, serialized).
        $elsewhere = $this->factory($kind)->createLockFromKey(unserialize(serialize($key)), 10, false);
        $this->assertTrue($elsewhere->isAcquired());
        $elsewhere->release();
        $this->assertSame('free', $this->dlock->info('d2')['state']);

        // Held until its TTL (set after $before), free after it.
        while (($state = $this->dlock->info('d')['state']) === 'held' && microtime(true) < $before + 2.0 * Servers::slack()) {
            usleep(5000);
        }
        $this->assertSame('free', $state);
        $this->assertGreaterThanOrEqual(0.8 - 0.002, microtime(true) - $before);
    }

    /**
     * dlockd unreachable: Symfony's LockAcquiringException, its cause the package's
     * Unavailable, from acquire() blocking or not.
     *
     * @dataProvider clients
     */
    public function testUnreachableDlockdIsALockAcquiringException(string $kind): void
    {
        $factory = $this->factory($kind);
        $this->keep[0]->stop();
        foreach ([false, true] as $blocking) {
            try {
                $factory->createLock('u', 10, false)->acquire($blocking);
                $this->fail('acquire() with dlockd stopped');
            } catch (LockAcquiringException $e) {
                $this->assertInstanceOf(Unavailable::class, $e->getPrevious());
            }
        }
    }

    /** dlockd's INFO locks section, the integer fields. */
    private function locksInfo(): array
    {
        preg_match_all('/^(\w+):(\d+)\r?$/m', $this->redis->rawCommand('INFO', 'locks'), $m);
        return array_map('intval', array_combine($m[1], $m[2]));
    }
}
