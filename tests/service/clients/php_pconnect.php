<?php
// One request of a PHP-FPM worker that takes a session lock from dlockd on a persistent
// connection (pconnect), for test_dlockd_php: the worker keeps the connection after the
// request, so what the request leaves held stays held. The query string says what to do:
//
//   port=P       dlockd's port on 127.0.0.1
//   name=N       the lock (none: only report the process and the connection)
//   ttl=MS       LOCK's TTL (default 2000); maxhold=MS adds MAXHOLD MS
//   shutdown=1   the documented guard: a shutdown function that UNLOCKs the token, which
//                runs after a fatal error too (a `finally` block does not)
//   finally=1    UNLOCK in a `finally` block after the critical section (without it,
//                nothing UNLOCKs but the shutdown function, if any)
//   fatal=KIND   die inside the critical section: "undefined" calls an undefined
//                function (an uncaught Error, which runs `finally` blocks on its way
//                out), "memory" exhausts memory_limit (a fatal error proper, which
//                skips them)
//
// It prints, one a line: "PID n" (the worker), "CLIENT id" (dlockd's id of the
// connection: the same id in two requests is the same connection), then "LOCKED token
// fence", "NIL" or "ERROR message", and what released the lock: "FINALLY UNLOCK r" or
// "SHUTDOWN UNLOCK r" (r: UNLOCK's reply).

header('Content-Type: text/plain');
// No output buffer: each line goes out when printed, before a fatal error that would
// drop what a buffer holds.
while (ob_get_level() > 0) {
    ob_end_flush();
}
$port = (int)($_GET['port'] ?? 0);
$name = $_GET['name'] ?? '';

function out(string $line): void
{
    echo $line, "\n";
    flush();
}

// A lock command; a failure printed as ERROR (phpredis throws for some error replies,
// and returns false with getLastError() set for others).
function call(Redis $r, string ...$args)
{
    $r->clearLastError();
    try {
        $reply = $r->rawCommand(...$args);
    } catch (RedisException $e) {
        out('ERROR ' . $e->getMessage());
        return false;
    }
    if ($r->getLastError() !== null) {
        out('ERROR ' . $r->getLastError());
        return false;
    }
    return $reply;
}

$redis = new Redis();
try {
    $redis->pconnect('127.0.0.1', $port, 2.0);
} catch (RedisException $e) {
    out('ERROR connect: ' . $e->getMessage());
    exit;
}
out('PID ' . getmypid());
out('CLIENT ' . call($redis, 'CLIENT', 'ID'));
if ($name === '') {
    exit;
}

$args = ['LOCK', $name, 'TTL', $_GET['ttl'] ?? '2000'];
if (isset($_GET['maxhold'])) {
    $args[] = 'MAXHOLD';
    $args[] = $_GET['maxhold'];
}
$lock = call($redis, ...$args);
if ($lock === false) {
    exit;
}
if ($lock === null) {
    out('NIL');
    exit;
}
[$token, $fence] = $lock;
out("LOCKED $token $fence");

$held = true;
if (($_GET['shutdown'] ?? '') === '1') {
    register_shutdown_function(function () use ($redis, $name, $token, &$held): void {
        if ($held) {
            out('SHUTDOWN UNLOCK ' . var_export(call($redis, 'UNLOCK', $name, $token), true));
        }
    });
}
// The critical section.
function section(string $fatal): void
{
    if ($fatal === 'undefined') {
        no_such_function();
    } elseif ($fatal === 'memory') {
        ini_set('memory_limit', '16M');
        $blocks = [];
        for (;;) {
            $blocks[] = str_repeat('x', 1 << 20);
        }
    }
}

if (($_GET['finally'] ?? '') !== '1') {
    section($_GET['fatal'] ?? '');
    exit; // the lock stays with the connection, as a request that forgot to UNLOCK
}
try {
    section($_GET['fatal'] ?? '');
} finally {
    $held = false;
    out('FINALLY UNLOCK ' . var_export(call($redis, 'UNLOCK', $name, $token), true));
}
