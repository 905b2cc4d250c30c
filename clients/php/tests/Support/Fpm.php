<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

/**
 * A real php-fpm for the tests (Debian's php-fpm8.2: /usr/sbin/php-fpm*, or
 * $DLOCK_PHP_FPM), in the foreground, with its default php.ini (so with phpredis) and a
 * configuration of its own in a temporary directory: one pool of one worker that never
 * retires (pm = static, pm.max_children = 1, pm.max_requests = 0), so that every
 * request runs in the same process and finds its persistent connections again; errors
 * shown in the response, as text. Requests go through cgi-fcgi (Debian's libfcgi-bin),
 * as a web server's FastCGI. The configuration is test_dlockd_php.c's.
 *
 * Stopped (master and worker) when the object goes.
 */
final class Fpm
{
    private Process $proc;
    private string $addr;

    private function __construct(private string $dir, private string $cgiFcgi)
    {
    }

    /** php-fpm and cgi-fcgi, or a RuntimeException that names what is missing. */
    public static function tools(): array
    {
        $fpm = getenv('DLOCK_PHP_FPM') ?: (glob('/usr/sbin/php-fpm[0-9]*')[0] ?? null);
        if ($fpm === null || !is_executable($fpm)) {
            throw new \RuntimeException('php-fpm is missing: apt-get install php-fpm, or set $DLOCK_PHP_FPM');
        }
        foreach (explode(':', getenv('PATH') ?: '/usr/bin:/bin') as $d) {
            if (is_executable("$d/cgi-fcgi")) {
                return [$fpm, "$d/cgi-fcgi"];
            }
        }
        throw new \RuntimeException('cgi-fcgi is missing: apt-get install libfcgi-bin');
    }

    public static function start(): self
    {
        [$exe, $cgi] = self::tools();
        $dir = sys_get_temp_dir() . '/dlock-php-fpm-' . bin2hex(random_bytes(4));
        mkdir($dir);
        $f = new self($dir, $cgi);
        for ($try = 0; $try < 3; $try++) {
            $port = Servers::freePort();
            $f->addr = "127.0.0.1:$port";
            file_put_contents("$dir/fpm.conf", implode("\n", [
                '[global]', "error_log = $dir/fpm.log", 'daemonize = no', "pid = $dir/fpm.pid",
                '[dlock]', "listen = $f->addr", 'pm = static', 'pm.max_children = 1', 'pm.max_requests = 0',
                'request_terminate_timeout = 30', 'php_admin_flag[display_errors] = on',
                'php_admin_flag[html_errors] = off', 'php_admin_flag[log_errors] = off', '',
            ]));
            // -R: a test run as root (CI's containers) may start it; a pool without
            // `user` then runs as the caller.
            $f->proc = Process::start([$exe, '-F', '-R', '-y', "$dir/fpm.conf"], "$dir/fpm.out");
            $deadline = microtime(true) + 10 * Servers::slack();
            while (microtime(true) < $deadline && $f->proc->running()) {
                $s = @stream_socket_client("tcp://$f->addr", $errno, $errstr, 0.2);
                if ($s !== false) {
                    fclose($s);
                    return $f;
                }
                usleep(10000);
            }
            $log = @file_get_contents("$dir/fpm.log");
            $f->proc->stop();
        }
        throw new \RuntimeException("php-fpm did not start; its log: $log");
    }

    /**
     * One request of tests/fixtures/$script with $query as its query string: the
     * response, headers and body. cgi-fcgi failing, or no response within 10 s (times
     * the slack), is a RuntimeException.
     */
    public function request(array $query, string $script = 'fpm_request.php'): string
    {
        $env = ['SCRIPT_FILENAME' => dirname(__DIR__) . "/fixtures/$script", 'REQUEST_METHOD' => 'GET',
            'QUERY_STRING' => http_build_query($query), 'PATH' => getenv('PATH') ?: '/usr/bin:/bin'];
        $p = proc_open([$this->cgiFcgi, '-bind', '-connect', $this->addr],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        if ($p === false) {
            throw new \RuntimeException('cannot start cgi-fcgi');
        }
        $out = ['', ''];
        stream_set_blocking($pipes[1], false);
        stream_set_blocking($pipes[2], false);
        $deadline = microtime(true) + 10 * Servers::slack();
        while (!feof($pipes[1]) || !feof($pipes[2])) {
            $left = $deadline - microtime(true);
            if ($left <= 0) {
                proc_terminate($p, SIGKILL);
                proc_close($p);
                throw new \RuntimeException("no response from php-fpm within 10 s: $out[0]$out[1]");
            }
            $r = array_filter([1 => $pipes[1], 2 => $pipes[2]], fn ($s) => !feof($s));
            $w = $e = null;
            if (stream_select($r, $w, $e, (int) $left, 100000) > 0) {
                foreach ($r as $i => $s) {
                    $out[$i - 1] .= (string) fread($s, 65536);
                }
            }
        }
        fclose($pipes[1]);
        fclose($pipes[2]);
        $status = proc_close($p);
        if ($status !== 0) {
            throw new \RuntimeException("cgi-fcgi exited $status: $out[0]$out[1]");
        }
        return $out[0];
    }

    /** Stops php-fpm: SIGTERM ends the master and its worker, and the worker's connections. */
    public function stop(): void
    {
        $this->proc->stop();
    }

    public function __destruct()
    {
        $this->proc->stop();
        array_map('unlink', glob("$this->dir/*") ?: []);
        @rmdir($this->dir);
    }
}
