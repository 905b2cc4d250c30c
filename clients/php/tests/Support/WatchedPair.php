<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

/**
 * A test case's redis-server and dlockd, one pair for the class, with a phpredis
 * connection of the tests' own to dlockd (for LOCKINFO, INFO, CLIENT LIST and raw
 * commands), and the clients every test runs over: phpredis, then predis.
 */
trait WatchedPair
{
    private static ?Process $redis = null;
    private static ?Process $dlockd = null;
    private static int $port = 0;
    private static ?\Redis $watch = null;

    public static function setUpBeforeClass(): void
    {
        [self::$dlockd, self::$port, self::$redis] = Servers::pair();
        self::$watch = Servers::phpredis(self::$port);
    }

    public static function tearDownAfterClass(): void
    {
        self::$watch = null;
        self::$dlockd?->stop();
        self::$redis?->stop();
    }

    public function clients(): iterable
    {
        yield 'phpredis' => ['phpredis'];
        yield 'predis' => ['predis'];
    }
}
