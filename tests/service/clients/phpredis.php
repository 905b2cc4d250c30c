<?php
// dlockd through phpredis (Debian's php-redis), as a PHP request would use it:
// rawCommand for the lock commands, a read timeout longer than WAIT.
// Usage: php phpredis.php PORT. Exit 0 when every check held, 1 otherwise.
define('CHECK_SCRIPT', 'phpredis');
require __DIR__ . '/check.php';

$port = (int)$argv[1];
$a = new Redis();
check($a->connect('127.0.0.1', $port, 5.0), 'connect');
// A blocked LOCK answers only when served: the read timeout must exceed WAIT.
$a->setOption(Redis::OPT_READ_TIMEOUT, 10.0);
check($a->ping() !== false, 'ping');
$info = $a->info();
check(isset($info['loading']) && $info['loading'] == 0, 'INFO loading:0');

$r = $a->rawCommand('LOCK', 'php:name', 'TTL', '5000');
check(is_array($r) && count($r) == 3 && strlen($r[0]) == 32 && $r[1] >= 1, 'LOCK reply');
list($token, $fence, $validity) = $r;

$b = new Redis();
check($b->connect('127.0.0.1', $port, 5.0), 'connect b');
$b->setOption(Redis::OPT_READ_TIMEOUT, 10.0);
check($b->rawCommand('LOCK', 'php:name') === false, 'second LOCK is nil (false)');

$info = $a->rawCommand('LOCKINFO', 'php:name');
check($info[0] == 'state' && $info[1] == 'held' && $info[7] == $fence, 'LOCKINFO held');

check($b->rawCommand('UNLOCK', 'php:name', str_repeat('0', 32)) === 0, 'UNLOCK wrong token');
check($a->rawCommand('UNLOCK', 'php:name', $token) === 1, 'UNLOCK');

// DETACHED, as a request with a persistent connection should take a lock.
$r = $a->rawCommand('LOCK', 'php:job', 'TTL', '10000', 'DETACHED');
check(is_array($r), 'LOCK DETACHED');
$a->close();
check($b->rawCommand('UNLOCK', 'php:job', $r[0]) === 1, 'detached lock kept after close');

// A wait served when a detached lease runs out (its holder never came back) ...
$t0 = microtime(true);
$c = new Redis();
check($c->connect('127.0.0.1', $port, 5.0), 'connect c');
$lease = $c->rawCommand('LOCK', 'php:lease', 'TTL', '500', 'DETACHED');
check(is_array($lease), 'LOCK lease');
$r = $b->rawCommand('LOCK', 'php:lease', 'WAIT', '5000');
$ms = (microtime(true) - $t0) * 1000;
check(is_array($r) && $r[1] > $lease[1] && $ms >= 400, "LOCK WAIT served at the lease's end ($ms ms)");
check($b->rawCommand('UNLOCK', 'php:lease', $r[0]) === 1, 'UNLOCK lease');
$c->close();

// ... and one after the end of the holder's connection (the holder's request died).
$c = new Redis();
check($c->connect('127.0.0.1', $port, 5.0), 'connect c');
$held = $c->rawCommand('LOCK', 'php:name');
check(is_array($held), 'LOCK by c');
$c->close(); // the session lock goes with the connection
$t0 = microtime(true);
$r = $b->rawCommand('LOCK', 'php:name', 'WAIT', '5000');
check(is_array($r) && $r[1] > $held[1], 'LOCK WAIT after the holder left');
printf("FIG dlockd_phpredis_wait_after_close_ms %d ms\n", (microtime(true) - $t0) * 1000);
check($b->rawCommand('UNLOCK', 'php:name', $r[0]) === 1, 'UNLOCK b');

try {
    $b->rawCommand('LOCK', 'php:name', 'TTL', '1');
    $err = $b->getLastError();
    check($err !== null && strpos($err, 'TTL must be') !== false, "TTL error: $err");
} catch (RedisException $e) {
    check(strpos($e->getMessage(), 'TTL must be') !== false, 'TTL error: ' . $e->getMessage());
}
echo "phpredis: all checks passed\n";
