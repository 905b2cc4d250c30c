<?php
// dlockd's TLS port through phpredis (Debian's php-redis): a tls:// host, the server
// verified against the test's CA through the stream context.
// Usage: php phpredis_tls.php PORT CA OTHER_CA. Exit 0 when every check held, 1 otherwise.
define('CHECK_SCRIPT', 'phpredis tls');
require __DIR__ . '/check.php';

$port = (int)$argv[1];
$ctx = ['stream' => ['verify_peer' => true, 'verify_peer_name' => true,
                     'peer_name' => 'localhost', 'cafile' => $argv[2]]];
$a = new Redis();
check($a->connect('tls://127.0.0.1', $port, 5.0, NULL, 0, 10.0, $ctx), 'connect');
check($a->ping() !== false, 'ping');
$r = $a->rawCommand('LOCK', 'phptls:name', 'TTL', '5000');
check(is_array($r) && count($r) == 3 && strlen($r[0]) == 32 && $r[1] >= 1, 'LOCK reply');
$b = new Redis();
check($b->connect('tls://127.0.0.1', $port, 5.0, NULL, 0, 10.0, $ctx), 'connect b');
check($b->rawCommand('LOCK', 'phptls:name') === false, 'second LOCK is nil (false)');
check($a->rawCommand('UNLOCK', 'phptls:name', $r[0]) === 1, 'UNLOCK');
$a->close();
$b->close();

// A CA that did not sign the server's certificate: the connection is refused.
$bad = ['stream' => ['verify_peer' => true, 'cafile' => $argv[3]]];
$c = new Redis();
$ok = false;
try {
    $ok = @$c->connect('tls://127.0.0.1', $port, 5.0, NULL, 0, 10.0, $bad) && $c->ping();
} catch (RedisException $e) {
    $ok = false;
}
check(!$ok, 'a server not verified is refused');
echo "phpredis tls: all checks passed\n";
