#!/usr/bin/python3
"""cron_job.py: run a job on one machine of a fleet at a time, through dlockd.

    cron_job.py [--dlockd HOST:PORT] [--redis HOST:PORT] [--steps N] [--step-ms MS] [JOB]

Every machine's crontab starts this at the same minute; the lock decides which one runs
JOB (default "nightly-report"). The others find it taken and exit 0 quietly: that is
the normal case, not an error. The job is a stand-in: N steps (default 3) of MS
milliseconds (default 1000), each recorded on the Redis at --redis with the lock's
fence: RPUSH JOB:steps "fence pid step". Replace job_step() with the real work.

LOCK without WAIT tries once: a machine that comes second has nothing to wait for. The
lock is a session lock: dlockd renews it while this process's connection is open and
releases it when the connection closes, so the job holds it exactly as long as this
process lives. A run that dies (an exception, SIGKILL, the OOM killer) frees it for the
next run at once; nothing here renews or releases by hand.

Exit status: 0 the job ran here, or runs elsewhere; 1 the job failed; 2 usage; 75
dlockd or the lock servers could not be reached, so nobody may have run it: worth an
alert.
"""
import argparse
import os
import socket
import sys
import time

import redis

EXIT_TEMPFAIL = 75


def address(s, default_port):
    if s.startswith("/"):
        return {"unix_socket_path": s}
    host, _, port = s.rpartition(":")
    return {"host": host or s, "port": int(port) if host else default_port}


def job_step(out, job, fence, step, step_ms):
    """One step of the job. It gets the fence so that it can hand it to what it writes:
    a resource that keeps the largest fence it has seen can refuse a stale run."""
    time.sleep(step_ms / 1000)
    out.rpush(f"{job}:steps", f"{fence} {os.getpid()} {step}")
    print(f"{job}: step {step} done (fence {fence})", flush=True)


def main():
    p = argparse.ArgumentParser(description="Run a job on one machine at a time.")
    p.add_argument("--dlockd", default=os.environ.get("DLOCKD") or "127.0.0.1:7379")
    p.add_argument("--redis", default="127.0.0.1:6379", help="where the job writes")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--step-ms", type=int, default=1000)
    p.add_argument("job", nargs="?", default="nightly-report")
    args = p.parse_args()
    job = args.job

    try:
        # The lock lives as long as this connection: keep one (no pool) for the whole
        # run. single_connection_client connects at once, so a dlockd that refuses the
        # connection fails here.
        lockd = redis.Redis(**address(args.dlockd, 7379), socket_connect_timeout=2,
                            socket_timeout=5, single_connection_client=True)
        lock = lockd.execute_command("LOCK", job, "TTL", 60000, "LABEL",
                                     f"cron {socket.gethostname()}")
    except redis.exceptions.ConnectionError as e:
        print(f"{job}: dlockd at {args.dlockd}: {e}; job not run", file=sys.stderr)
        return EXIT_TEMPFAIL
    except redis.exceptions.ResponseError as e:
        # -NOQUORUM, -UNAVAILABLE: nobody can tell whether another machine runs the job.
        print(f"{job}: {e}; job not run", file=sys.stderr)
        return EXIT_TEMPFAIL if str(e).startswith(("NOQUORUM", "UNAVAILABLE")) else 1
    if lock is None:
        return 0  # another machine runs it: nothing to do, nothing to say
    token, fence, _ = lock
    print(f"{job}: running here (fence {fence})", flush=True)

    out = redis.Redis(**address(args.redis, 6379), socket_connect_timeout=2, socket_timeout=5)
    try:
        for step in range(1, args.steps + 1):
            job_step(out, job, fence, step, args.step_ms)
    except redis.exceptions.RedisError as e:
        print(f"{job}: failed: {e}", file=sys.stderr)
        return 1  # the lock goes with the connection
    # Not needed (the process's end closes the connection, which releases the lock),
    # but it lets the next run in before this process has finished exiting. The job
    # ran: an UNLOCK that fails is worth a line, not a failed run.
    try:
        lockd.execute_command("UNLOCK", job, token)
    except redis.exceptions.RedisError as e:
        print(f"{job}: UNLOCK: {e}; the lock ends with this connection (or its lease)",
              file=sys.stderr)
    print(f"{job}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
