<?php
/*
 * buyer.php: one buyer of dlock-bench's PHP flash sales (W5/php-recipe, W5/php-dlockd,
 * W5/php-stock; W5/peer-php-spin and W5/peer-php-sleep). The bench starts 20 (50) of
 * these at once; each buys one unit at a time until it finds the stock gone, one of
 * these ways:
 *
 *   recipe  what PHP code does without a lock service: SET lock token NX EX 10,
 *           usleep(1000) between refused tries, release by a Lua compare-and-delete;
 *   peer-spin, peer-sleep  the same recipe with W5/lock's unit (GET the stock, SET it
 *           one lower, INCR the sold counter) and usleep(1000) or usleep(100000), the
 *           sleep most examples of the recipe show: W5/lock's PHP peers;
 *   dlockd  LOCK name WAIT 5000 sent to dlockd, UNLOCK name token after;
 *   stock   no lock: STOCK RESERVE name 1 WAIT 5000 sent to dlockd, then STOCK COMMIT
 *           name id; the sale is over for this buyer when RESERVE answers nil (no
 *           unsold unit left).
 *
 * With a lock the stock is read (GET) and decremented (DECR; a peer: SET, and INCR of
 * KEY_PREFIX sold) on the redis-server itself, so a lock that let two buyers in at once would show as units sold beyond the
 * stock, which the bench counts; with stock, the bench counts the units dlockd's STOCK
 * STATUS says are sold against the buyers' purchases.
 *
 * usage: php buyer.php MODE HOST PORT PASSWORD DB DLOCKD_PORT KEY_PREFIX NAME ID
 *   KEY_PREFIX  prefix of this sale's keys on the redis-server (stock, ready, go, and
 *               the recipe's lock key)
 *   NAME        the lock name given to dlockd (dlockd adds its own key prefix), or the
 *               SKU for stock
 *
 * Start: the buyer connects, runs one warm-up cycle on a lock of its own (so that
 * connecting and the servers' script caches are not in the figures), INCRs the
 * "ready" key and blocks in BLPOP on "go" until the bench pushes one element per
 * buyer. At the end it prints one line on stdout:
 *   bought N last_sale_ns T retries R max_wait_ns W
 * with T the CLOCK_MONOTONIC time (hrtime) of its last purchase, R its refused
 * attempts (recipe, peers: SET NX refusals; dlockd: LOCK replies of nil; stock: 0) and W its
 * longest time to get the lock (stock: the reservation). Any failure is one line on
 * stderr and exit status 1.
 */
declare(strict_types=1);

function fail(string $msg): void
{
    fwrite(STDERR, "buyer.php: $msg\n");
    exit(1);
}

if ($argc !== 10) {
    fail('usage: buyer.php recipe|dlockd|stock|peer-spin|peer-sleep HOST PORT PASSWORD DB ' .
        'DLOCKD_PORT KEY_PREFIX NAME ID');
}
[, $mode, $host, $port, $password, $db, $dport, $prefix, $name, $id] = $argv;
/* The recipe's sleep after a refused SET NX, in microseconds; 0: not the recipe. */
$sleepUs = ['recipe' => 1000, 'peer-spin' => 1000, 'peer-sleep' => 100000][$mode] ?? 0;
$peer = $mode === 'peer-spin' || $mode === 'peer-sleep';
if ($sleepUs === 0 && $mode !== 'dlockd' && $mode !== 'stock') {
    fail("unknown mode '$mode'");
}
if (!class_exists('Redis')) {
    fail('the Redis class is missing: install php-redis');
}

/* A read timeout above every wait here (BLPOP's 30 s, LOCK's 5 s): a shorter one would
 * turn a long wait into a connection error. */
function connect_to(string $host, int $port): Redis
{
    $r = new Redis();
    if (!$r->connect($host, $port, 5.0)) {
        fail("cannot connect to $host:$port");
    }
    $r->setOption(Redis::OPT_READ_TIMEOUT, 60);
    return $r;
}

try {
    $r = connect_to($host, (int)$port);
    if ($password !== '') {
        $r->auth($password);
    }
    if ((int)$db !== 0) {
        $r->select((int)$db);
    }
    $d = $sleepUs > 0 ? null : connect_to('127.0.0.1', (int)$dport);

    $stockKey = $prefix . 'stock';
    $lockKey = $prefix . 'recipe-lock';
    /* Compare-and-delete: release only the lock this buyer still holds. */
    $release = "if redis.call('get', KEYS[1]) == ARGV[1] then\n" .
        "  return redis.call('del', KEYS[1])\n" .
        "end\n" .
        "return 0\n";

    /* One cycle on a lock of its own, not counted. */
    if ($sleepUs > 0) {
        $token = bin2hex(random_bytes(16));
        $r->set("$lockKey:warm:$id", $token, ['nx', 'ex' => 10]);
        $r->eval($release, ["$lockKey:warm:$id", $token], 1);
    } elseif ($mode === 'stock') {
        $d->rawCommand('STOCK', 'SET', "$name:warm:$id", '1');
        $res = $d->rawCommand('STOCK', 'RESERVE', "$name:warm:$id", '1');
        if (!is_string($res) || $d->rawCommand('STOCK', 'COMMIT', "$name:warm:$id", $res) !== 1) {
            fail('warm-up STOCK RESERVE/COMMIT through dlockd failed: ' .
                ($d->getLastError() ?? '?'));
        }
    } else {
        $l = $d->rawCommand('LOCK', "$name:warm:$id", 'WAIT', '5000');
        if (!is_array($l) || $d->rawCommand('UNLOCK', "$name:warm:$id", $l[0]) !== 1) {
            fail('warm-up LOCK/UNLOCK through dlockd failed: ' . ($d->getLastError() ?? '?'));
        }
    }

    $r->incr($prefix . 'ready');
    if ($r->blPop([$prefix . 'go'], 30) === []) {
        fail('no start signal within 30 s');
    }

    $bought = 0;
    $retries = 0;
    $lastSale = 0;
    $maxWait = 0;
    while ($mode === 'stock') {
        $t0 = hrtime(true);
        $d->clearLastError();
        $res = $d->rawCommand('STOCK', 'RESERVE', $name, '1', 'WAIT', '5000');
        if ($d->getLastError() !== null) {
            fail('STOCK RESERVE: ' . $d->getLastError());
        }
        if (!is_string($res)) {
            break; /* nil: nothing unsold is left */
        }
        $maxWait = max($maxWait, hrtime(true) - $t0);
        $c = $d->rawCommand('STOCK', 'COMMIT', $name, $res);
        if ($c !== 1) {
            fail('STOCK COMMIT replied ' . var_export($c, true) . ': ' . ($d->getLastError() ?? ''));
        }
        $bought++;
        $lastSale = hrtime(true);
    }
    while ($mode !== 'stock') {
        $t0 = hrtime(true);
        if ($sleepUs > 0) {
            $token = bin2hex(random_bytes(16));
            while (!$r->set($lockKey, $token, ['nx', 'ex' => 10])) {
                $retries++;
                usleep($sleepUs);
            }
        } else {
            for (;;) {
                $d->clearLastError();
                $l = $d->rawCommand('LOCK', $name, 'WAIT', '5000');
                if (is_array($l)) {
                    $token = $l[0];
                    break;
                }
                if ($d->getLastError() !== null) {
                    fail('LOCK: ' . $d->getLastError());
                }
                $retries++; /* nil: not granted within WAIT */
            }
        }
        $maxWait = max($maxWait, hrtime(true) - $t0);

        $stock = (int)$r->get($stockKey);
        if ($stock > 0 && $peer) {
            $r->set($stockKey, (string)($stock - 1));
            $r->incr($prefix . 'sold');
        } elseif ($stock > 0) {
            $r->decr($stockKey);
        }
        if ($stock > 0) {
            $bought++;
            $lastSale = hrtime(true);
        }

        if ($sleepUs > 0) {
            $r->eval($release, [$lockKey, $token], 1);
        } else {
            $u = $d->rawCommand('UNLOCK', $name, $token);
            if ($u !== 1) {
                fail('UNLOCK replied ' . var_export($u, true) . ': ' . ($d->getLastError() ?? ''));
            }
        }
        if ($stock <= 0) {
            break;
        }
    }
    printf("bought %d last_sale_ns %d retries %d max_wait_ns %d\n", $bought, $lastSale, $retries,
        $maxWait);
} catch (RedisException $e) {
    fail($e->getMessage());
}
