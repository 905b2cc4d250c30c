<?php

declare(strict_types=1);

namespace Dlock\Tests;

use Dlock\AuthFailed;
use Dlock\Client;
use Dlock\CommandError;
use Dlock\Internal\Session;
use Dlock\InvalidArgument;
use Dlock\Leadership;
use Dlock\LockLost;
use Dlock\NotAcquired;
use Dlock\Unavailable;
use Dlock\Tests\Support\Child;
use Dlock\Tests\Support\Helpers;
use Dlock\Tests\Support\WatchedPair;
use Dlock\Tests\Support\Process;
use Dlock\Tests\Support\Servers;
use PHPUnit\Framework\TestCase;

/**
 * Leader election: Client::lead(), elect() and its Leadership, leader() and observe(),
 * against one redis-server and dlockd for the class, over phpredis and predis. Other
 * candidates run in processes of their own (tests/fixtures/elect_candidate.php), so
 * that one can die by SIGKILL and another wait for its turn while the test watches.
 */
final class ElectionTest extends TestCase
{
    use Helpers;
    use WatchedPair;

    private const HEX32 = '/^[0-9a-f]{32}$/';


    private function client(string $kind): Client
    {
        return new Client(Servers::client($kind, self::$port));
    }

    private function candidate(string $kind, string $name): Child
    {
        return new Child('elect_candidate.php', $kind, (string) self::$port, $name);
    }

    /** The term in a candidate's "LEADING term t" answer. */
    private static function term(string $answer): int
    {
        return (int) explode(' ', $answer)[1];
    }

    /** The time at the end of a candidate's answer (its microtime(true)). */
    private static function answeredAt(string $answer): float
    {
        return (float) substr($answer, strrpos($answer, ' ') + 1);
    }

    /** dlockd's INFO connected_clients. */
    private function connectedClients(): int
    {
        $this->assertSame(1, preg_match('/^connected_clients:(\d+)\r?$/m', self::$watch->rawCommand('INFO', 'clients'), $m));
        return (int) $m[1];
    }

    /** Waits until $n clients wait in dlockd (an ELECT parked until the leader goes). */
    private function waitForWaiters(int $n): void
    {
        $deadline = microtime(true) + 10 * Servers::slack();
        while (preg_match('/^blocked_clients:(\d+)\r?$/m', self::$watch->rawCommand('INFO', 'clients'), $m) !== 1
            || (int) $m[1] < $n) {
            $this->assertLessThan($deadline, microtime(true), "not $n waiting candidates");
            usleep(5000);
        }
    }

    /**
     * lead() runs the callable with the term (an int above 0) and the Leadership, while
     * leader() shows its value and term (named arguments: value:); it resigns as the
     * callable returns, and returns what the callable returned. The next term is larger.
     * @dataProvider clients
     */
    public function testLeadRunsTheCallableWhileLeading(string $kind): void
    {
        $c = $this->client($kind);
        $other = $this->client($kind);
        $name = $this->name('lead');
        $seen = null;
        $result = $c->lead($name, function (int $term, Leadership $l) use ($other, $name, &$seen): string {
            $seen = [$term, $l->term(), $l->name(), $l->value(), $other->leader($name)];
            $this->assertMatchesRegularExpression(self::HEX32, $l->token());
            $this->assertTrue($l->isLeading());
            return 'done';
        }, value: '10.0.0.7:8080', ttlMs: 10000);
        $this->assertSame('done', $result);
        [$term, $lterm, $lname, $value, $leader] = $seen;
        $this->assertGreaterThan(0, $term);
        $this->assertSame([$term, $name, '10.0.0.7:8080'], [$lterm, $lname, $value]);
        $this->assertIsArray($leader);
        $this->assertSame('10.0.0.7:8080', $leader['value']);
        $this->assertSame($term, $leader['term']);
        $this->assertIsString($leader['holder']);
        $this->assertGreaterThan(0, $leader['remaining_ms']);
        $this->assertLessThanOrEqual(10000, $leader['remaining_ms']);
        $this->assertNull($other->leader($name), 'still leading after lead() returned');
        $this->assertNull($c->leader($name));

        $next = $other->lead($name, fn (int $t) => $t);
        $this->assertGreaterThan($term, $next);
        $this->assertSame('', $c->lead($name, fn (int $t, Leadership $l) => $l->value()), 'the default value');
        $this->assertSame(0, Session::count(), 'a leadership left in the shutdown guard');
    }

    /**
     * A callable that throws: the leadership is resigned (leader() null at once) and the
     * callable's own exception comes out of lead().
     * @dataProvider clients
     */
    public function testLeadResignsWhenTheCallableThrows(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('lead-throws');
        $thrown = new \RuntimeException('the callable failed');
        try {
            $c->lead($name, function (int $term) use ($c, $name, $thrown): void {
                $this->assertSame($term, $c->leader($name)['term']);
                throw $thrown;
            });
            $this->fail('lead() returned');
        } catch (\RuntimeException $e) {
            $this->assertSame($thrown, $e);
        }
        $this->assertNull($c->leader($name));
        $this->assertInstanceOf(Leadership::class, $l = $c->elect($name, waitMs: 0), 'not resigned');
        $this->assertTrue($l->resign());
    }

    /**
     * While one leads, another's lead() with waitMs 0 (or a short wait) is NotAcquired,
     * without running its callable; elect() answers null likewise.
     * @dataProvider clients
     */
    public function testLeadNotElectedWithinTheWait(string $kind): void
    {
        $a = $this->client($kind);
        $b = $this->client($kind);
        $name = $this->name('not-elected');
        $leading = $a->elect($name, 'a');
        $this->assertInstanceOf(Leadership::class, $leading);
        $ran = false;
        $e = $this->throws(NotAcquired::class, fn () => $b->lead($name, function () use (&$ran): void {
            $ran = true;
        }, waitMs: 0));
        $this->assertStringContainsString($name, $e->getMessage());
        $t = hrtime(true);
        $this->throws(NotAcquired::class, fn () => $b->lead($name, fn () => null, waitMs: 200));
        $this->assertGreaterThanOrEqual(190, self::ms($t));
        $this->assertFalse($ran);
        $this->assertNull($b->elect($name, waitMs: 0));
        $this->assertSame('a', $b->leader($name)['value']);
        $this->assertSame($leading->term(), $b->leader($name)['term']);
        $this->assertTrue($leading->resign());
    }

    /**
     * elect(), then proclaim(): leader() shows the new value in the same term (spaces
     * and an empty value too); resign() is true once, then false without asking (it is
     * idempotent); leader() is null after it, isLeading() false, and proclaim() a
     * LockLost.
     * @dataProvider clients
     */
    public function testElectProclaimResign(string $kind): void
    {
        $c = $this->client($kind);
        $other = $this->client($kind);
        $name = $this->name('proclaim');
        $l = $c->elect($name, 'first', ttlMs: 5000, waitMs: 0);
        $this->assertInstanceOf(Leadership::class, $l);
        $term = $l->term();
        $this->assertSame(['first', $term], [$other->leader($name)['value'], $other->leader($name)['term']]);
        foreach (['second value, with spaces', '', str_repeat('v', 1024)] as $value) {
            $l->proclaim($value);
            $this->assertSame($value, $l->value());
            $leader = $other->leader($name);
            $this->assertSame([$value, $term], [$leader['value'], $leader['term']]);
        }
        $this->throws(InvalidArgument::class, fn () => $l->proclaim(str_repeat('v', 1025)));
        $this->throws(InvalidArgument::class, fn () => $l->proclaim("a\0b"));
        $this->assertTrue($l->isLeading());
        $this->assertTrue($l->resign());
        $this->assertNull($other->leader($name));
        $this->assertFalse($l->resign());
        $this->assertFalse($l->resign());
        $this->assertFalse($l->isLeading());
        $e = $this->throws(LockLost::class, fn () => $l->proclaim('after'));
        $this->assertStringContainsString($name, $e->getMessage());
        $this->assertNull($other->leader($name));
        $this->assertSame(0, Session::count());
    }

    /**
     * A deposed leader: another connection breaks the leadership (UNLOCK with its token).
     * isLeading() is false, proclaim() a LockLost, and the next leader's term is larger;
     * lead() whose callable learned it returns normally, one whose callable did not is
     * a LockLost.
     * @dataProvider clients
     */
    public function testDeposedLeader(string $kind): void
    {
        $c = $this->client($kind);
        $other = $this->client($kind);
        $name = $this->name('deposed');
        $l = $c->elect($name, 'a', ttlMs: 2000, waitMs: 0);
        $this->assertTrue($other->adopt($name, $l->token())->release());
        $this->assertFalse($l->isLeading());
        $this->throws(LockLost::class, fn () => $l->proclaim('b'));
        $this->assertFalse($l->resign());
        $next = $other->elect($name, 'b', waitMs: 0);
        $this->assertGreaterThan($l->term(), $next->term());
        $this->assertTrue($next->resign());

        $this->assertSame('knew', $c->lead($name, function (int $term, Leadership $l) use ($other, $name): string {
            $this->assertTrue($other->adopt($name, $l->token())->release());
            $this->assertFalse($l->isLeading());
            return 'knew';
        }));
        $e = $this->throws(LockLost::class, fn () => $c->lead($name, function (int $term, Leadership $l) use ($other, $name): void {
            $this->assertTrue($other->adopt($name, $l->token())->release());
        }));
        $this->assertStringContainsString($name, $e->getMessage());
        $this->assertInstanceOf(Leadership::class, $again = $c->elect($name, waitMs: 0));
        $this->assertTrue($again->resign());
    }

    /**
     * A Leadership dropped while leading resigns (its destructor), and the shutdown
     * guard resigns one still held at the end of the request without closing the
     * connection (a persistent one stays usable). A resigned one's destructor sends
     * nothing.
     * @dataProvider clients
     */
    public function testDroppedLeadershipResigns(string $kind): void
    {
        $redis = Servers::client($kind, self::$port);
        $c = new Client($redis);
        $other = $this->client($kind);
        $name = $this->name('dropped');
        $l = $c->elect($name, 'dropped', waitMs: 0);
        $this->assertSame('dropped', $other->leader($name)['value']);
        $this->assertSame(1, Session::count());
        unset($l);
        $this->assertNull($other->leader($name), 'not resigned when dropped');
        $this->assertSame(0, Session::count());
        $c->elect($name, 'anonymous');
        $this->assertNull($other->leader($name), 'a leadership nobody kept still leads');

        $id = $redis instanceof \Redis ? $redis->rawCommand('CLIENT', 'ID') : $redis->executeRaw(['CLIENT', 'ID']);
        $kept = $c->elect($name, 'kept');
        $lock = $c->lock($this->name('with-it'));
        $this->assertSame(2, Session::count());
        Session::releaseAll();
        $this->assertNull($other->leader($name), 'the shutdown guard did not resign it');
        $this->assertFalse($kept->resign());
        $this->assertFalse($lock->release());
        $this->assertSame($id, $redis instanceof \Redis ? $redis->rawCommand('CLIENT', 'ID') : $redis->executeRaw(['CLIENT', 'ID']));

        $resigned = $c->elect($name, 'resigned');
        $this->assertTrue($resigned->resign());
        $after = $other->elect($name, 'other', waitMs: 0);
        unset($resigned);
        $this->assertSame('other', $other->leader($name)['value'], "a resigned leadership's destructor touched the next one");
        $this->assertTrue($after->resign());
    }

    /**
     * Arguments checked before anything is sent, and dlockd's floor for a leadership's
     * TTL (1000 ms) as a CommandError.
     */
    public function testArguments(): void
    {
        $c = $this->client('phpredis');
        $this->throws(InvalidArgument::class, fn () => $c->elect(''));
        $this->throws(InvalidArgument::class, fn () => $c->elect('x', str_repeat('v', 1025)));
        $this->throws(InvalidArgument::class, fn () => $c->elect('x', waitMs: -1));
        $this->throws(InvalidArgument::class, fn () => $c->lead('x', fn () => null, ttlMs: 0));
        $this->throws(InvalidArgument::class, fn () => $c->leader(''));
        $this->throws(InvalidArgument::class, fn () => $c->observe('x', fn () => false, 0.0));
        $this->throws(InvalidArgument::class, fn () => $c->observe('', fn () => false));
        $e = $this->throws(CommandError::class, fn () => $c->elect($this->name('short'), ttlMs: 999));
        $this->assertStringContainsString('1000', $e->getMessage());
        $this->assertSame(0, Session::count());
    }

    /**
     * Failover: a leader in another process is SIGKILLed (nothing runs on its way out);
     * a candidate waiting in another process leads within 1 s, far below the TTL of
     * 10000 ms (dlockd resigns a leadership when its connection closes), with a larger
     * term; and this process, waiting in elect(), follows that one likewise.
     * @dataProvider clients
     */
    public function testFailoverWhenTheLeaderIsKilled(string $kind): void
    {
        $name = $this->name('failover');
        $leader = $this->candidate($kind, $name);
        $first = self::term($leader->ask('elect first', 'LEADING'));
        $this->assertGreaterThan(0, $first);
        $waiting = $this->candidate($kind, $name);
        $waiting->send('elect second');
        $this->waitForWaiters(1);
        $c = $this->client($kind);
        $this->assertSame('first', $c->leader($name)['value']);

        $killed = microtime(true);
        $leader->kill();
        $answer = $waiting->line();
        $this->assertStringStartsWith('LEADING ', $answer);
        $this->assertLessThan(1.0 * Servers::slack(), self::answeredAt($answer) - $killed, 'the next leader waited for the lease');
        $second = self::term($answer);
        $this->assertGreaterThan($first, $second);
        $this->assertSame(['second', $second], [$c->leader($name)['value'], $c->leader($name)['term']]);

        // This process campaigns; the second leader dies while it waits.
        $killer = Process::start(['sh', '-c', 'sleep 0.3; kill -KILL ' . $waiting->pid], tempnam(sys_get_temp_dir(), 'dlock-php-kill-'));
        $t = hrtime(true);
        $mine = $c->elect($name, 'third', ttlMs: 10000, waitMs: 5000 * Servers::slack());
        $waited = self::ms($t);
        $this->assertInstanceOf(Leadership::class, $mine);
        $this->assertGreaterThan($second, $mine->term());
        $this->assertGreaterThanOrEqual(250, $waited);
        $this->assertLessThan(1300 * Servers::slack(), $waited, 'the next leader waited for the lease');
        $this->assertSame('third', $c->leader($name)['value']);
        $this->assertTrue($mine->resign());
        $killer->stop();
        $waiting->close();
    }

    /**
     * observe() hears the state now (no one: term 0, value null), then each change in
     * order as another process elects, proclaims, resigns and elects again (each step
     * taken once the previous one was heard), terms never decreasing and the new term
     * larger than the first; it stops when the callable returns false.
     * @dataProvider clients
     */
    public function testObserveFollowsTheLeadership(string $kind): void
    {
        $c = $this->client($kind);
        $name = $this->name('observe');
        $child = $this->candidate($kind, $name);
        $steps = ['elect a', 'proclaim b c', 'resign', 'elect d'];
        $heard = [];
        $c->observe($name, function (int $term, ?string $value) use (&$heard, &$steps, $child): bool {
            $heard[] = [$term, $value];
            if ($steps === []) {
                return false;
            }
            $child->send(array_shift($steps));
            return true;
        }, 20.0 * Servers::slack());
        $this->assertCount(5, $heard, json_encode($heard));
        [[$t0, $v0], [$t1, $v1], [$t2, $v2], [$t3, $v3], [$t4, $v4]] = $heard;
        $this->assertSame([0, null], [$t0, $v0]);
        $this->assertGreaterThan(0, $t1);
        $this->assertSame('a', $v1);
        $this->assertSame([$t1, 'b c'], [$t2, $v2], 'the proclaimed value in the same term');
        $this->assertSame([0, null], [$t3, $v3], 'no one after the resignation');
        $this->assertGreaterThan($t1, $t4);
        $this->assertSame('d', $v4);
        $this->assertSame(['LEADING', 'PROCLAIMED', 'RESIGNED', 'LEADING'], array_map(
            fn () => explode(' ', $child->line())[0],
            range(1, 4)
        ));
        $this->assertSame($t4, $c->leader($name)['term']);
        $child->close();
    }

    /**
     * observe() with a timeout returns when it passes (no exception), having heard the
     * state once; the callable's exception comes out of it; a client that leads may
     * observe itself (observe() has a connection of its own) and goes on leading after.
     * @dataProvider clients
     */
    public function testObserveTimeoutExceptionAndOwnLeadership(string $kind): void
    {
        $c = $this->client($kind);
        $c->leader('nobody'); // connected (predis connects at the first command)
        $before = $this->connectedClients();
        $name = $this->name('observe-own');
        $heard = [];
        $t = hrtime(true);
        $c->observe($name, function (int $term, ?string $value) use (&$heard): void {
            $heard[] = [$term, $value];
        }, 0.3);
        $took = self::ms($t);
        $this->assertSame([[0, null]], $heard);
        $this->assertGreaterThanOrEqual(290, $took);
        $this->assertLessThan(1500 * Servers::slack(), $took);

        $l = $c->elect($name, 'me');
        $thrown = new \DomainException('stop here');
        try {
            $c->observe($name, function (int $term, ?string $value) use ($l, $thrown): void {
                $this->assertSame([$l->term(), 'me'], [$term, $value]);
                throw $thrown;
            });
            $this->fail('observe() returned');
        } catch (\DomainException $e) {
            $this->assertSame($thrown, $e);
        }
        $this->assertTrue($l->isLeading());
        $l->proclaim('still me');
        $this->assertSame('still me', $c->leader($name)['value']);
        $this->assertTrue($l->resign());
        // Every observer's connection was closed.
        $deadline = microtime(true) + 3 * Servers::slack();
        while ($this->connectedClients() > $before) {
            $this->assertLessThan($deadline, microtime(true), 'an observer connection left open');
            usleep(10000);
        }
    }

    /** observe() on a client made by Client::connect() opens its subscriber from the URL. */
    public function testObserveOverAUrlClient(): void
    {
        foreach (['phpredis', 'predis'] as $kind) {
            $c = Client::connect('dlockd://127.0.0.1:' . self::$port . "?client=$kind&persistent=1&name=observer");
            $name = $this->name('observe-url');
            $l = $c->elect($name, $kind);
            $heard = null;
            $c->observe($name, function (int $term, ?string $value) use (&$heard): bool {
                $heard = [$term, $value];
                return false;
            });
            $this->assertSame([$l->term(), $kind], $heard, $kind);
            $this->assertTrue($l->resign());
        }
    }

    /**
     * observe() on a dlockd of its own that requires a password: a client given an
     * authenticated \Redis or Predis\Client observes (its connection is opened with the
     * same password), an unauthenticated one is AuthFailed; dlockd killed while one
     * observes is Unavailable, as soon as the connection breaks.
     * @dataProvider clients
     */
    public function testObserveAuthenticationAndDlockdKilled(string $kind): void
    {
        $password = 'elect-' . bin2hex(random_bytes(4));
        [$dlockd, $port, $redis] = Servers::pairWithPassword($password);
        if ($kind === 'predis') {
            $given = new \Predis\Client(['host' => '127.0.0.1', 'port' => $port, 'password' => $password]);
        } else {
            $given = Servers::phpredis($port);
            $this->assertTrue($given->auth($password));
        }
        $c = new Client($given);
        $name = $this->name('observe-auth');
        $l = $c->elect($name, 'authenticated');
        $heard = null;
        $c->observe($name, function (int $term, ?string $value) use (&$heard): bool {
            $heard = [$term, $value];
            return false;
        }, 5.0);
        $this->assertSame([$l->term(), 'authenticated'], $heard);

        $anonymous = new Client(Servers::client($kind, $port));
        $e = $this->throws(AuthFailed::class, fn () => $anonymous->observe($name, fn () => false, 5.0));
        $this->assertStringContainsString('NOAUTH', $e->getMessage());

        $t = hrtime(true);
        $e = $this->throws(Unavailable::class, fn () => $c->observe($name, function () use ($dlockd): void {
            $dlockd->kill();
        }, 10.0 * Servers::slack()));
        $this->assertLessThan(2000 * Servers::slack(), self::ms($t));
        $this->throws(Unavailable::class, fn () => $c->observe($name, fn () => false));
        $redis->stop();
    }
}
