<?php

declare(strict_types=1);

namespace Dlock\Tests\Support;

/** A process a test started (redis-server, dlockd, php), stopped by PID. */
final class Process
{
    /** @param resource $proc */
    public function __construct(private $proc, public readonly int $pid, public readonly string $log)
    {
    }

    public static function start(array $argv, string $log): self
    {
        $proc = proc_open($argv, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $log, 'a'], 2 => ['file', $log, 'a']], $pipes);
        if ($proc === false) {
            throw new \RuntimeException('cannot start ' . implode(' ', $argv));
        }
        return new self($proc, proc_get_status($proc)['pid'], $log);
    }

    public function running(): bool
    {
        return $this->proc !== null && proc_get_status($this->proc)['running'];
    }

    /** SIGKILL: as the OOM killer or a crash ends it, with nothing run on its way out. */
    public function kill(): void
    {
        $this->stop(SIGKILL);
    }

    /** Stops it with $signal and waits for it to end. */
    public function stop(int $signal = SIGTERM): void
    {
        if ($this->proc === null) {
            return;
        }
        posix_kill($this->pid, SIGCONT);
        posix_kill($this->pid, $signal);
        $deadline = microtime(true) + 10;
        while (proc_get_status($this->proc)['running'] && microtime(true) < $deadline) {
            usleep(5000);
        }
        if (proc_get_status($this->proc)['running']) {
            posix_kill($this->pid, SIGKILL);
        }
        proc_close($this->proc);
        $this->proc = null;
        @unlink($this->log);
    }

    /** SIGSTOP: a process that keeps its sockets open and answers nothing. */
    public function pause(): void
    {
        posix_kill($this->pid, SIGSTOP);
    }

    public function resume(): void
    {
        posix_kill($this->pid, SIGCONT);
    }

    public function __destruct()
    {
        $this->stop();
    }
}
