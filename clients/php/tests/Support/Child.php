<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

/**
 * A PHP script of tests/fixtures in a process of its own, driven by lines on its stdin
 * and answering lines on its stdout (its stderr goes there too, so that a PHP error is
 * seen in the answers). Killed, if still running, when the object goes.
 */
final class Child
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes;
    private string $buffer = '';
    /** Everything read so far, for failure messages. */
    private string $seen = '';
    public readonly int $pid;

    public function __construct(string $script, string ...$args)
    {
        $proc = proc_open(
            ['timeout', (string) (60 * Servers::slack()), PHP_BINARY, dirname(__DIR__) . "/fixtures/$script", ...$args],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['redirect', 1]],
            $pipes
        );
        if ($proc === false) {
            throw new \RuntimeException("cannot start $script");
        }
        $this->proc = $proc;
        $this->pipes = $pipes;
        stream_set_blocking($pipes[1], false);
        // timeout(1) runs PHP as its child: the PID to signal is PHP's.
        $this->pid = $this->phpPid(proc_get_status($proc)['pid']);
    }

    public function send(string $line): void
    {
        fwrite($this->pipes[0], "$line\n");
        fflush($this->pipes[0]);
    }

    /** The next line it prints, or a RuntimeException after $timeoutS seconds (times the slack). */
    public function line(float $timeoutS = 10.0): string
    {
        $deadline = microtime(true) + $timeoutS * Servers::slack();
        while (($nl = strpos($this->buffer, "\n")) === false) {
            $left = $deadline - microtime(true);
            if ($left <= 0) {
                throw new \RuntimeException("no line from the child within {$timeoutS} s; it said: $this->seen");
            }
            $r = [$this->pipes[1]];
            $w = $e = null;
            if (stream_select($r, $w, $e, (int) $left, (int) (fmod($left, 1.0) * 1e6)) > 0) {
                $chunk = (string) fread($this->pipes[1], 65536);
                if ($chunk === '' && feof($this->pipes[1])) {
                    throw new \RuntimeException("the child ended; it said: $this->seen");
                }
                $this->buffer .= $chunk;
                $this->seen .= $chunk;
            }
        }
        $line = substr($this->buffer, 0, $nl);
        $this->buffer = substr($this->buffer, $nl + 1);
        return $line;
    }

    /** Sends $line and returns the answer, which must start with $expect and a space. */
    public function ask(string $line, string $expect, float $timeoutS = 10.0): string
    {
        $this->send($line);
        $answer = $this->line($timeoutS);
        if (!str_starts_with($answer, "$expect ")) {
            throw new \RuntimeException("'$line' was answered '$answer', not '$expect ...'; the child said: $this->seen");
        }
        return $answer;
    }

    /** SIGKILL, as a crash or the OOM killer ends a process: nothing runs on its way out. */
    public function kill(): void
    {
        posix_kill($this->pid, SIGKILL);
        $this->close();
    }

    /** Ends its stdin (the fixture's end) and waits for it. */
    public function close(): void
    {
        if ($this->proc === null) {
            return;
        }
        foreach ($this->pipes as $p) {
            fclose($p);
        }
        proc_close($this->proc);
        $this->proc = null;
    }

    public function __destruct()
    {
        if ($this->proc !== null) {
            proc_terminate($this->proc, SIGKILL);
            posix_kill($this->pid, SIGKILL);
            $this->close();
        }
    }

    /** The PID of timeout(1)'s child, PHP (the only one), once it has started. */
    private function phpPid(int $timeoutPid): int
    {
        $deadline = microtime(true) + 5 * Servers::slack();
        while (microtime(true) < $deadline) {
            $children = @file_get_contents("/proc/$timeoutPid/task/$timeoutPid/children");
            if ($children !== false && trim($children) !== '') {
                return (int) explode(' ', trim($children))[0];
            }
            usleep(2000);
        }
        throw new \RuntimeException('the fixture did not start');
    }
}
