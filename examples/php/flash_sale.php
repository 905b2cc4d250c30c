<?php
// flash_sale.php: sell a limited stock to many concurrent PHP buyers through dlockd,
// never one unit too many.
//
//   php flash_sale.php [OPTIONS] stock N    put N units on the shelf (and forget past sales)
//   php flash_sale.php [OPTIONS] buy        one buyer: buy until the stock is gone
//   php flash_sale.php [OPTIONS] report     check the sale, print a RESULT line
//
// OPTIONS, before or after the command: --dlockd HOST:PORT (default $DLOCKD, else
// 127.0.0.1:7379), --redis HOST:PORT (the shop's database, where the stock lives;
// default 127.0.0.1:6379), --item ITEM (default sku-1), --wait MS (how long one LOCK
// waits, default 10000), --ttl MS (default 30000), --stall (buy: take the lock once,
// print "HOLDING ..." and stay inside the critical section until killed, as a request
// stuck in a slow call), --stall-at N (buy: the same, in the first critical section
// that finds at most N units left), --killed-at US (report: the wall-clock time, in
// microseconds, a holder was killed: how long the lock took to pass on).
//
// Each purchase is what one web request of the shop would do, through the dlock
// package (clients/php):
//
//     $dlock->synchronized('sale:ITEM', fn: GET stock:ITEM -> if > 0: SET stock - 1,
//                          waitMs: WAIT)
//
// GET then SET is a read-modify-write: two buyers without the lock would read the same
// stock and both sell that unit. Every critical section also appends one line to the
// list sales:ITEM ("unit fence pid acquired_us done_us"; unit 0: found sold out), so that
// `report` can check afterwards what the lock promises: sold == stock, nothing oversold,
// no unit sold twice, sections that never overlap, fences that strictly increase.
//
// The lock is a session lock (the package's default): dlockd renews it while this
// process's connection is open and releases it the moment the connection closes, so a
// buyer that dies inside its critical section (a fatal error, a SIGKILL, an OOM kill)
// frees the lock at once instead of making everyone wait for its lease to end. On a
// PHP-FPM worker's persistent connection the package's shutdown function releases it
// at the end of the request, however the request ends.
//
// Exit status: 0 done (buy: sold out; report: every check passed), 1 a check failed or
// a call failed, 2 usage, 75 dlockd, a lock server or the shop's Redis unavailable (try
// later), with one line on stderr that says which.

const EXIT_TEMPFAIL = 75;

function usage(): never
{
    fwrite(STDERR, "usage: php flash_sale.php [--dlockd HOST:PORT] [--redis HOST:PORT] [--item ITEM]\n" .
        "         [--wait MS] [--ttl MS] [--stall | --stall-at N] [--killed-at US]\n" .
        "         stock N | buy | report\n");
    exit(2);
}

// "host:port" to [host, port]; a path starting with "/" is a unix socket ([path, 0]).
function address(string $s, int $default_port): array
{
    if ($s !== '' && $s[0] === '/') {
        return [$s, 0];
    }
    $i = strrpos($s, ':');
    if ($i === false) {
        return [$s, $default_port];
    }
    return [substr($s, 0, $i), (int)substr($s, $i + 1)];
}

function now_us(): int
{
    return (int)(microtime(true) * 1e6);
}

// A connection to $what at $addr, or exit 75: the sale cannot go on without it.
function connect_to(string $what, string $addr, int $default_port): Redis
{
    [$host, $port] = address($addr, $default_port);
    $r = new Redis();
    try {
        $r->connect($host, $port, 2.0);
    } catch (RedisException $e) {
        fwrite(STDERR, "flash_sale: $what at $addr: {$e->getMessage()}\n");
        exit(EXIT_TEMPFAIL);
    }
    return $r;
}

// The lock client (clients/php, the dlock/dlock package; with Composer, its autoloader
// loads it instead). Client::connect() picks phpredis.
require __DIR__ . '/../../clients/php/autoload.php';

function dlockd_connect(array $o): Dlock\Client
{
    [$host, $port] = address($o['dlockd'], 7379);
    $url = $port === 0 ? "dlockd+unix://$host" : "dlockd://$host:$port";
    try {
        // connect(), not persistent: the connection, and with it any session lock,
        // ends with this process however it ends. A waiting LOCK raises the read
        // timeout by its WAIT for its own call; timeout=2 is for everything else.
        return Dlock\Client::connect("$url?timeout=2");
    } catch (Dlock\Exception $e) {
        fwrite(STDERR, "flash_sale: dlockd at {$o['dlockd']}: {$e->getMessage()}\n");
        exit(exit_status($e));
    }
}

function shop_connect(array $o): Redis
{
    return connect_to("the shop's Redis", $o['redis'], 6379);
}

// 75 (try later) when dlockd or the lock servers could not decide (Dlock\Unavailable,
// and Dlock\NoQuorum, one of them); 1 for any other error (Dlock\AuthFailed, a
// Dlock\CommandError: a mistake here or in the setup, which a retry would repeat).
function exit_status(Dlock\Exception $e): int
{
    return $e instanceof Dlock\Unavailable ? EXIT_TEMPFAIL : 1;
}

// One purchase, as one request of the shop would make it. Returns true when a unit was
// sold, false when the stock is gone, null when the lock did not come within WAIT (the
// shop would answer "busy, try again").
function buy_one(Dlock\Client $dlock, Redis $shop, array $o, ?int $stall_at): ?bool
{
    $item = $o['item'];
    try {
        // The lock is held while the function runs, and released however it ends
        // (an exception, a fatal error: by the package's shutdown function).
        return $dlock->synchronized("sale:$item", function (Dlock\Lock $lock) use ($shop, $item, $stall_at) {
            $acquired = now_us();
            $left = (int)$shop->get("stock:$item");
            if ($stall_at !== null && $left <= $stall_at) {
                // The demo kills this process here, holding the lock.
                printf("HOLDING fence=%d pid=%d left=%d\n", $lock->fence, getmypid(), $left);
                fflush(STDOUT);
                sleep(3600);
            }
            if ($left > 0) {
                $shop->set("stock:$item", $left - 1);
            }
            $shop->rPush("sales:$item",
                sprintf('%d %d %d %d %d', max($left, 0), $lock->fence, getmypid(), $acquired, now_us()));
            return $left > 0;
        }, ttlMs: $o['ttl'], waitMs: $o['wait'], label: 'php buyer ' . getmypid());
    } catch (Dlock\NotAcquired) {
        return null;
    } catch (Dlock\LockLost $e) {
        // The section ran, but the lock was found gone at its end (dlockd's renewal
        // failed): another buyer may have overlapped this one. report says so.
        fwrite(STDERR, "flash_sale: {$e->getMessage()}\n");
        return true;
    } catch (Dlock\Exception $e) {
        fwrite(STDERR, "flash_sale: sale:$item: {$e->getMessage()}\n");
        exit(exit_status($e));
    }
}

function buy(array $o, ?int $stall_at): int
{
    $dlock = dlockd_connect($o);
    $shop = shop_connect($o);
    $sold = 0;
    $busy = 0;
    for (;;) {
        $r = buy_one($dlock, $shop, $o, $stall_at);
        if ($r === false) {
            break;
        }
        if ($r === null) {
            // Nobody released within WAIT: a buyer stuck in a slow call holds it.
            if (++$busy == 3) {
                fwrite(STDERR, "flash_sale: no turn in 3 waits of {$o['wait']} ms; giving up\n");
                return 1;
            }
            continue;
        }
        $sold++;
    }
    printf("buyer %d: bought %d\n", getmypid(), $sold);
    return 0;
}

function stock(array $o, int $n): int
{
    $shop = shop_connect($o);
    $shop->del("sales:{$o['item']}");
    $shop->mSet(["stock:{$o['item']}" => $n, "stock:{$o['item']}:initial" => $n]);
    printf("stock:%s = %d\n", $o['item'], $n);
    return 0;
}

function report(array $o, ?int $killed_at): int
{
    $shop = shop_connect($o);
    $initial = (int)$shop->get("stock:{$o['item']}:initial");
    $left = (int)$shop->get("stock:{$o['item']}");
    $lines = $shop->lRange("sales:{$o['item']}", 0, -1);
    $sold = 0;
    $doubles = 0;
    $overlaps = 0;
    $fence_drops = 0;
    $seen = [];
    $buyers = [];
    $prev = null;
    $after_kill_us = -1;
    foreach ($lines as $line) {
        [$unit, $fence, $pid, $acquired, $done] = array_map('intval', explode(' ', $line));
        if ($unit > 0) {
            $sold++;
            $buyers[$pid] = ($buyers[$pid] ?? 0) + 1;
            if (isset($seen[$unit])) {
                $doubles++;
            }
            $seen[$unit] = true;
        }
        if ($prev !== null) {
            // The list is in critical-section order (each line is pushed inside the lock).
            if ($acquired < $prev[4]) {
                $overlaps++;
            }
            if ($fence <= $prev[1]) {
                $fence_drops++;
            }
        }
        if ($killed_at !== null && $after_kill_us < 0 && $acquired >= $killed_at) {
            $after_kill_us = $acquired - $killed_at;
        }
        $prev = [$unit, $fence, $pid, $acquired, $done];
    }
    $oversold = max(0, $sold - $initial);
    $ok = count($lines) > 0 && $sold == $initial && $left == 0 && $doubles == 0 &&
        $overlaps == 0 && $fence_drops == 0;
    printf("sold %d of %d to %d buyers: oversold %d, units sold twice %d, stock left %d\n",
        $sold, $initial, count($buyers), $oversold, $doubles, $left);
    printf("%d critical sections, overlapping %d, fences strictly increasing: %s\n",
        count($lines), $overlaps, $fence_drops ? 'no' : 'yes');
    printf("RESULT ok=%s sold=%d stock=%d oversold=%d doubles=%d left=%d sections=%d " .
        "overlaps=%d fences_increasing=%s buyers=%d after_kill_us=%d\n",
        $ok ? 'yes' : 'no', $sold, $initial, $oversold, $doubles, $left, count($lines),
        $overlaps, $fence_drops ? 'no' : 'yes', count($buyers), $after_kill_us);
    return $ok ? 0 : 1;
}

// Options before or after the command: --name VALUE, --name=VALUE, or a flag.
function parse_args(array $argv, array $valued, array $flags): array
{
    $opts = [];
    $args = [];
    for ($i = 1; $i < count($argv); $i++) {
        $a = $argv[$i];
        if (strncmp($a, '--', 2) != 0) {
            $args[] = $a;
            continue;
        }
        [$name, $value] = array_pad(explode('=', substr($a, 2), 2), 2, null);
        if (in_array($name, $flags, true) && $value === null) {
            $opts[$name] = true;
        } elseif (in_array($name, $valued, true)) {
            $value ??= $argv[++$i] ?? usage();
            $opts[$name] = $value;
        } else {
            usage();
        }
    }
    return [$opts, $args];
}

$env = getenv('DLOCKD');
$o = ['dlockd' => $env !== false && $env !== '' ? $env : '127.0.0.1:7379',
    'redis' => '127.0.0.1:6379', 'item' => 'sku-1', 'wait' => 10000, 'ttl' => 30000];
[$opts, $args] = parse_args($argv, ['dlockd', 'redis', 'item', 'wait', 'ttl', 'killed-at', 'stall-at'],
    ['stall']);
foreach (['dlockd', 'redis', 'item'] as $k) {
    if (isset($opts[$k])) {
        $o[$k] = $opts[$k];
    }
}
foreach (['wait', 'ttl', 'killed-at', 'stall-at'] as $k) {
    if (isset($opts[$k]) && !ctype_digit($opts[$k])) {
        usage();
    }
}
foreach (['wait', 'ttl'] as $k) {
    if (isset($opts[$k])) {
        $o[$k] = (int)$opts[$k];
    }
}
// The lock calls handle their own failures (buy_one); what is left to catch here is
// the shop's Redis failing mid-sale (a buyer's section, once its lock was released),
// which ends the run as its failure to connect would.
try {
    switch ($args[0] ?? '') {
        case 'stock':
            if (count($args) != 2 || !ctype_digit($args[1])) {
                usage();
            }
            exit(stock($o, (int)$args[1]));
        case 'buy':
            $stall_at = isset($opts['stall']) ? PHP_INT_MAX : null;
            if (isset($opts['stall-at'])) {
                $stall_at = (int)$opts['stall-at'];
            }
            exit(buy($o, $stall_at));
        case 'report':
            exit(report($o, isset($opts['killed-at']) ? (int)$opts['killed-at'] : null));
        default:
            usage();
    }
} catch (RedisException $e) {
    fwrite(STDERR, "flash_sale: the shop's Redis at {$o['redis']}: {$e->getMessage()}\n");
    exit(EXIT_TEMPFAIL);
}
