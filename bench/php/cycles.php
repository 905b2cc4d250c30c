<?php
/*
 * cycles.php: what the PHP package (clients/php) costs a lock + unlock cycle, for
 * dlock-bench's W5/php-raw and W5/php-package (and their -predis twins).
 *
 * One process, one connection to dlockd, and two ways of making the same cycle on it:
 *
 *   raw      LOCK name TTL 30000, then UNLOCK name token, each one rawCommand()
 *            (predis: executeRaw()), with the least checking a caller would do;
 *   package  $dlock->lock(name, ttlMs: 30000), then $lock->release().
 *
 * Both send the same two commands and read the same two replies, so the difference
 * is the package's own PHP work: argument checks, reply checks, the Lock object and
 * its session bookkeeping. The rounds alternate (raw, package, raw, ...) so that a
 * burst of other work on the machine falls on both kinds alike.
 *
 * Every cycle uses the same name. Both kinds then do the same work on the same keys
 * of the servers, which never grow, and a cycle that left the lock held would make the
 * next LOCK come back nil, which fails the run.
 *
 * usage: php cycles.php phpredis|predis DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP
 *   PACKAGE_DIR  the package (its autoload.php); predis comes from its vendor/ when it
 *                has one, else from Debian's php-predis
 *   ROUNDS       rounds of each kind; CYCLES per round; WARMUP cycles of each kind
 *                first, not timed (class loading, the first reply's allocations)
 *
 * It prints one line per round pair on stdout:
 *   round I raw_ns T package_ns U
 * with T and U the hrtime of each round's CYCLES cycles. Anything that is not a
 * granted LOCK and an UNLOCK of 1 (true) is one line on stderr and exit status 1.
 */
declare(strict_types=1);

function fail(string $msg): void
{
    fwrite(STDERR, "cycles.php: $msg\n");
    exit(1);
}

if ($argc !== 8) {
    fail('usage: cycles.php phpredis|predis DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP');
}
[, $client, $port, $pkg, $name, $rounds, $cycles, $warmup] = $argv;
[$rounds, $cycles, $warmup] = [(int)$rounds, (int)$cycles, (int)$warmup];
if ($rounds < 1 || $cycles < 1 || $warmup < 0) {
    fail('ROUNDS and CYCLES must be at least 1, WARMUP at least 0');
}
if (!is_file("$pkg/autoload.php")) {
    fail("$pkg/autoload.php is missing (set \$DLOCK_BENCH_PHP_PACKAGE_DIR)");
}
require "$pkg/autoload.php";

const TTL = '30000';

/*
 * The connection, and the raw cycle on it as a closure: a closure call costs the
 * same for both kinds, so it stays out of the difference.
 */
if ($client === 'phpredis') {
    if (!class_exists('Redis')) {
        fail('the Redis class is missing: install php-redis');
    }
    $redis = new Redis();
    try {
        if (!$redis->connect('127.0.0.1', (int)$port, 5.0)) {
            fail("cannot connect to dlockd on port $port");
        }
    } catch (RedisException $e) {
        fail("cannot connect to dlockd on port $port: " . $e->getMessage());
    }
    $raw = static function (string $name) use ($redis): void {
        $l = $redis->rawCommand('LOCK', $name, 'TTL', TTL);
        if (!is_array($l)) {
            fail('raw LOCK not granted: ' . var_export($l, true) . ' ' . ($redis->getLastError() ?? ''));
        }
        $u = $redis->rawCommand('UNLOCK', $name, $l[0]);
        if ($u !== 1) {
            fail('raw UNLOCK replied ' . var_export($u, true) . ' ' . ($redis->getLastError() ?? ''));
        }
    };
} elseif ($client === 'predis') {
    $autoload = is_file("$pkg/vendor/autoload.php") ? "$pkg/vendor/autoload.php"
        : '/usr/share/php/Predis/autoload.php';
    if (!is_file($autoload)) {
        fail("predis is missing: $autoload (Debian: php-predis)");
    }
    require $autoload;
    $redis = new Predis\Client(['host' => '127.0.0.1', 'port' => (int)$port, 'timeout' => 5.0]);
    try {
        $redis->connect();
    } catch (Predis\CommunicationException $e) {
        fail("cannot connect to dlockd on port $port: " . $e->getMessage());
    }
    $raw = static function (string $name) use ($redis): void {
        $l = $redis->executeRaw(['LOCK', $name, 'TTL', TTL], $error);
        if ($error || !is_array($l)) {
            fail('raw LOCK not granted: ' . var_export($l, true));
        }
        $u = $redis->executeRaw(['UNLOCK', $name, $l[0]], $error);
        if ($error || $u !== 1) {
            fail('raw UNLOCK replied ' . var_export($u, true));
        }
    };
} else {
    fail("unknown client '$client'");
}

$dlock = new Dlock\Client($redis);
$package = static function (string $name) use ($dlock): void {
    $lock = $dlock->lock($name, ttlMs: (int)TTL);
    if ($lock === null) {
        fail('package lock() not granted');
    }
    if ($lock->release() !== true) {
        fail('package release() returned false');
    }
};

/* One round of $n cycles of $cycle: its time in ns. */
function round_ns(Closure $cycle, string $name, int $n): int
{
    $t0 = hrtime(true);
    for ($i = 0; $i < $n; $i++) {
        $cycle($name);
    }
    return hrtime(true) - $t0;
}

try {
    round_ns($raw, $name, $warmup);
    round_ns($package, $name, $warmup);
    $out = '';
    for ($r = 1; $r <= $rounds; $r++) {
        $rawNs = round_ns($raw, $name, $cycles);
        $packageNs = round_ns($package, $name, $cycles);
        $out .= "round $r raw_ns $rawNs package_ns $packageNs\n";
    }
    /* Printed at the end, so that no write sits between the rounds. */
    echo $out;
} catch (Throwable $e) {
    fail(get_class($e) . ': ' . $e->getMessage());
}
