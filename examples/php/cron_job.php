<?php
// cron_job.php: run a job on one machine of a fleet at a time, through dlockd.
//
//   php cron_job.php [--dlockd HOST:PORT] [--redis HOST:PORT] [--steps N] [--step-ms MS] [JOB]
//
// Every machine's crontab starts this at the same minute; the lock decides which one
// runs JOB (default "nightly-report"). The others find it taken and exit 0 quietly:
// that is the normal case, not an error. The job here is a stand-in: N steps (default
// 3) of MS milliseconds (default 1000), each recorded on the Redis at --redis (default
// 127.0.0.1:6379) with the lock's fence: RPUSH JOB:steps "fence pid step". Replace
// job_step() with the real work.
//
// The lock comes from dlockd through the dlock package (clients/php). Without a wait
// it is tried once: a machine that comes second has nothing to wait for. The lock is a
// session lock: dlockd renews it while this process's connection is
// open, however long the job runs, and releases it when the connection closes. So the
// job holds it exactly as long as this process lives: a run that dies (an exception,
// a SIGKILL, the OOM killer, a reboot of the machine) frees it for the next run at
// once, and none holds it past its end. Nothing here renews or releases by hand.
//
// Exit status: 0 the job ran here, or runs elsewhere; 1 the job failed; 2 usage; 75
// dlockd or the lock servers could not be reached, so nobody may have run it: worth
// an alert (with one line on stderr that says why).

const EXIT_TEMPFAIL = 75;

// The lock client (with Composer, its autoloader loads it instead).
require __DIR__ . '/../../clients/php/autoload.php';

function address(string $s, int $default_port): array
{
    if ($s !== '' && $s[0] === '/') {
        return [$s, 0]; // a unix socket
    }
    $i = strrpos($s, ':');
    return $i === false ? [$s, $default_port] : [substr($s, 0, $i), (int)substr($s, $i + 1)];
}

// One step of the job. It gets the fence so that it can hand it to what it writes: a
// resource that keeps the largest fence it has seen can refuse a stale run.
function job_step(Redis $out, string $job, int $fence, int $step, int $step_ms): void
{
    usleep($step_ms * 1000);
    $out->rPush("$job:steps", sprintf('%d %d %d', $fence, getmypid(), $step));
    printf("%s: step %d done (fence %d)\n", $job, $step, $fence);
}

function usage(): never
{
    fwrite(STDERR, "usage: php cron_job.php [--dlockd HOST:PORT] [--redis HOST:PORT] " .
        "[--steps N] [--step-ms MS] [JOB]\n");
    exit(2);
}

// Options before or after JOB: --name VALUE or --name=VALUE.
$env = getenv('DLOCKD');
$opts = ['dlockd' => $env !== false && $env !== '' ? $env : '127.0.0.1:7379',
    'redis' => '127.0.0.1:6379', 'steps' => '3', 'step-ms' => '1000'];
$jobs = [];
for ($i = 1; $i < count($argv); $i++) {
    if (strncmp($argv[$i], '--', 2) != 0) {
        $jobs[] = $argv[$i];
        continue;
    }
    [$name, $value] = array_pad(explode('=', substr($argv[$i], 2), 2), 2, null);
    if (!array_key_exists($name, $opts)) {
        usage();
    }
    $opts[$name] = $value ?? $argv[++$i] ?? usage();
}
if (count($jobs) > 1 || !ctype_digit($opts['steps']) || !ctype_digit($opts['step-ms'])) {
    usage();
}
$dlockd = $opts['dlockd'];
$redis = $opts['redis'];
$steps = (int)$opts['steps'];
$step_ms = (int)$opts['step-ms'];
$job = $jobs[0] ?? 'nightly-report';

[$host, $port] = address($dlockd, 7379);
try {
    $dlock = Dlock\Client::connect(($port === 0 ? "dlockd+unix://$host" : "dlockd://$host:$port") . '?timeout=5');
    $lock = $dlock->lock($job, ttlMs: 60000, label: 'cron ' . gethostname());
} catch (Dlock\Exception $e) {
    // dlockd refused the connection or dropped it (Dlock\Unavailable), its lock servers
    // could not decide (Dlock\NoQuorum, an Unavailable: nobody can tell whether another
    // machine runs the job), or a mistake in the setup (a password: Dlock\AuthFailed).
    fwrite(STDERR, "$job: dlockd at $dlockd: {$e->getMessage()}; job not run\n");
    exit($e instanceof Dlock\Unavailable ? EXIT_TEMPFAIL : 1);
}
if ($lock === null) {
    exit(0); // another machine runs it: nothing to do, nothing to say
}
printf("%s: running here (fence %d)\n", $job, $lock->fence);

[$host, $port] = address($redis, 6379);
$out = new Redis();
try {
    $out->connect($host, $port, 2.0);
    for ($step = 1; $step <= $steps; $step++) {
        job_step($out, $job, $lock->fence, $step, $step_ms);
    }
} catch (RedisException $e) {
    fwrite(STDERR, "$job: failed: {$e->getMessage()}\n");
    exit(1); // the lock goes with the connection
}
// Not needed (the end of the process closes the connection, which releases the lock),
// but it lets the next run in before this process has finished exiting. The job ran:
// a release that fails (dlockd or its lock server gone meanwhile) is worth a line, not
// a failed run, since the lock ends with the connection or its lease all the same.
try {
    $lock->release();
} catch (Dlock\Exception $e) {
    fwrite(STDERR, "$job: release: {$e->getMessage()}; " .
        "the lock ends with this connection (or its lease)\n");
}
printf("%s: done\n", $job);
exit(0);
