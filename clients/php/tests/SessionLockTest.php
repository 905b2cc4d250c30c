<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\Client;
use Dlock\Lock;
use Dlock\LockLost;
use Dlock\Tests\Support\Helpers;
use Dlock\Tests\Support\WatchedPair;
use Dlock\Tests\Support\Servers;
use PHPUnit\Framework\TestCase;

/**
 * Session locks that end without their holder's release: lost (unlocked elsewhere with
 * their token, which dlockd's renewal finds), held past their MAXHOLD, and the locks of
 * a process that forked, whose child's exit must leave them alone. One redis-server and
 * dlockd for the class; the tests run over phpredis and predis.
 */
final class SessionLockTest extends TestCase
{
    use Helpers;
    use WatchedPair;


    /** LOCKINFO $name as dlockd answers the tests' own connection: field => value. */
    private function lockInfo(string $name): array
    {
        $reply = self::$watch->rawCommand('LOCKINFO', $name);
        $this->assertIsArray($reply);
        $info = [];
        for ($i = 0; $i + 1 < count($reply); $i += 2) {
            $info[$reply[$i]] = $reply[$i + 1];
        }
        return $info;
    }

    private function state(string $name): string
    {
        return $this->lockInfo($name)['state'];
    }

    /** dlockd's INFO locks section, the integer fields. */
    private function locksInfo(): array
    {
        preg_match_all('/^(\w+):(\d+)\r?$/m', self::$watch->rawCommand('INFO', 'locks'), $m);
        return array_map('intval', array_combine($m[1], $m[2]));
    }

    /**
     * Another connection UNLOCKs $lock with its token; then waits until dlockd's renewal
     * has found it lost and dlockd has ended the session of $redis's connection: its
     * -LOST is written, and it holds no session lock any more (CLIENT LIST's locks=0).
     */
    private function loseElsewhere(Lock $lock, Client $other, \Redis|\Predis\Client $redis): void
    {
        $id = $redis instanceof \Redis ? $redis->rawCommand('CLIENT', 'ID') : $redis->executeRaw(['CLIENT', 'ID']);
        $this->assertIsInt($id);
        $lost = $this->locksInfo()['session_locks_lost'];
        $this->assertTrue($other->adopt($lock->name, $lock->token)->release());
        $deadline = microtime(true) + 3 * Servers::slack();
        while ($this->locksInfo()['session_locks_lost'] === $lost
            || preg_match('/ locks=[1-9]/', (string) self::$watch->rawCommand('CLIENT', 'LIST', 'ID', (string) $id)) === 1) {
            $this->assertLessThan($deadline, microtime(true), 'dlockd did not find the lock lost');
            usleep(10000);
        }
    }

    /**
     * A session lock S lost under its holder does not leak into the holder's other calls:
     * dlockd closes the connection after a -LOST, and the command sent next, which dlockd
     * never ran, is sent again on a new connection. So the detached lock D of the same
     * connection is released (true, and free), S's release is false, and the Client goes
     * on (lock, info) without a LockLost. With synchronized() on S, its end is a LockLost,
     * and D is released as well after it.
     * @dataProvider clients
     */
    public function testLostLockDoesNotLeakIntoOtherCalls(string $kind): void
    {
        $redis = Servers::client($kind, self::$port);
        $c = new Client($redis);
        $other = new Client(Servers::client($kind, self::$port));
        $d = $c->lock($dn = $this->name('lost-d'), ttlMs: 30000, detached: true);
        $s = $c->lock($sn = $this->name('lost-s'), ttlMs: 1000);
        $this->assertContainsOnlyInstancesOf(Lock::class, [$d, $s]);
        $this->loseElsewhere($s, $other, $redis);
        $this->assertTrue($d->release(), "the -LOST of '$sn' was read as UNLOCK '$dn''s reply");
        $this->assertSame('free', $this->state($dn));
        $this->assertFalse($s->release());
        $this->assertFalse($s->isHeld());
        $new = $c->lock($sn);
        $this->assertInstanceOf(Lock::class, $new);
        $this->assertSame('held', $c->info($sn)['state']);
        $this->assertTrue($new->release());

        $d = $c->lock($dn, ttlMs: 30000, detached: true);
        $e = $this->throws(LockLost::class, fn () => $c->synchronized($sn, function (Lock $l) use ($other, $redis): string {
            $this->loseElsewhere($l, $other, $redis);
            return 'ran';
        }, ttlMs: 1000));
        $this->assertStringContainsString($sn, $e->getMessage());
        $this->assertTrue($d->release());
        $this->assertSame('free', $c->info($dn)['state']);
        $new = $c->lock($sn);
        $this->assertInstanceOf(Lock::class, $new);
        $this->assertTrue($new->release());
        $this->assertSame('free', $this->state($sn));
    }

    /**
     * MAXHOLD, given to lock() or as the URL's default (?maxhold=): a session lock of TTL
     * 1000 ms with a MAXHOLD of 1500 ms is held past its TTL (its lease renewed beyond
     * the 1000 ms it was granted with), then released by dlockd at 1.5 s (counted in INFO
     * session_locks_maxhold, not as lost), which closes its connection; the Client then
     * goes on on a new one. Over both clients at once: one wait for the four locks.
     */
    public function testMaxHold(): void
    {
        $port = self::$port;
        $before = $this->locksInfo();
        $held = [];
        foreach (['phpredis', 'predis'] as $kind) {
            $given = new Client(Servers::client($kind, $port));
            $byUrl = Client::connect("dlockd://127.0.0.1:$port?client=$kind&maxhold=1500");
            $t = hrtime(true);
            $lock = $given->lock($this->name('maxhold'), ttlMs: 1000, maxHoldMs: 1500);
            $held["$kind, maxHoldMs"] = [$given, $lock, $t, hrtime(true)];
            $t = hrtime(true);
            $lock = $byUrl->lock($this->name('maxhold-url'), ttlMs: 1000);
            $held["$kind, ?maxhold"] = [$byUrl, $lock, $t, hrtime(true)];
        }
        // For each lock: when LOCKINFO first read it free, in ms from before its lock();
        // and the latest end of lease a read of it held showed, in ms from its grant.
        $freed = $leaseEnd = [];
        $deadline = microtime(true) + (1500 + 2000 * Servers::slack()) / 1000;
        while (count($freed) < count($held)) {
            foreach ($held as $what => [, $lock, $t, $granted]) {
                $this->assertInstanceOf(Lock::class, $lock, $what);
                if (isset($freed[$what])) {
                    continue;
                }
                $asked = self::ms($granted);
                $info = $this->lockInfo($lock->name);
                if ($info['state'] === 'free') {
                    $freed[$what] = self::ms($t);
                } else {
                    $leaseEnd[$what] = max($leaseEnd[$what] ?? 0, $asked + $info['remaining_ms']);
                }
            }
            $this->assertLessThan($deadline, microtime(true), 'not released at its MAXHOLD: ' . json_encode($freed));
            usleep(10000);
        }
        foreach ($freed as $what => $ms) {
            $this->assertGreaterThanOrEqual(1500, $ms, "$what: released before its MAXHOLD");
            $this->assertGreaterThan(1000 + 20, $leaseEnd[$what] ?? 0, "$what: its lease was not renewed");
        }
        $after = $this->locksInfo();
        $this->assertSame($before['session_locks_maxhold'] + 4, $after['session_locks_maxhold']);
        $this->assertSame($before['session_locks_lost'], $after['session_locks_lost'], 'renewed past the TTL');

        foreach ($held as $what => [$c, $lock]) {
            $new = $c->lock($name = $this->name('after-maxhold'));
            $this->assertInstanceOf(Lock::class, $new, $what);
            $this->assertSame('held', $c->info($name)['state']);
            $this->assertTrue($new->release(), $what);
            $this->assertFalse($lock->release(), $what);
        }
    }

    /**
     * The shutdown guard releases only the locks of the process that took them: a child
     * forked by a holder (tests/fixtures/session_fork.php) exits, its shutdown functions
     * run on the connection it shares with its parent, and the parent's lock is still
     * held after (CHECK), until the parent releases it.
     * @dataProvider clients
     */
    public function testForkedChildLeavesTheParentsLocks(string $kind): void
    {
        $name = $this->name('fork');
        $p = proc_open(
            ['timeout', (string) (20 * Servers::slack()), PHP_BINARY, __DIR__ . '/fixtures/session_fork.php',
                $kind, (string) self::$port, $name],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $pipes
        );
        $this->assertIsResource($p);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($p), $out . $err);
        $this->assertSame("LOCKED\nCHILD 0\nHELD 1\nRELEASED 1\n", $out . $err);
        $this->assertSame('free', $this->state($name));
    }
}
