#!/usr/bin/python3
"""cron_job.py: run a job on one machine of a fleet at a time, through dlockd.

    cron_job.py [--dlockd HOST:PORT] [--redis HOST:PORT] [--steps N] [--step-ms MS] [JOB]

Every machine's crontab starts this at the same minute; the lock decides which one runs
JOB (default "nightly-report"). The others find it taken and exit 0 quietly: that is
the normal case, not an error. The job here is a stand-in: N steps (default 3) of MS
milliseconds (default 1000), each recorded on the Redis at --redis (default
127.0.0.1:6379) with the lock's fence: RPUSH JOB:steps "fence pid step". Replace
job_step() with the real work.

The lock comes from dlockd through the dlock package (clients/python). Without a wait
it is tried once: a machine that comes second has nothing to wait for. The lock is a
session lock: dlockd renews it while this process's connection is open, however long
the job runs, and releases it when the connection closes. So the job holds it exactly
as long as this process lives: a run that dies (an exception, SIGKILL, the OOM killer,
a reboot of the machine) frees it for the next run at once, and none holds it past its
end. Nothing here renews by hand.

Exit status: 0 the job ran here, or runs elsewhere; 1 the job failed; 2 usage; 75
dlockd or the lock servers could not be reached, so nobody may have run it: worth an
alert (with one line on stderr that says why).
"""
import argparse
import os
import socket
import sys
import time

# common.py (beside this file) puts the dlock package of this source tree on sys.path
# first: dlock is imported after it.
from common import count, dlockd_client, exit_status, redis_client

import dlock
import redis


def job_step(out, job, fence, step, step_ms):
    """One step of the job. It gets the fence so that it can hand it to what it writes:
    a resource that keeps the largest fence it has seen can refuse a stale run."""
    time.sleep(step_ms / 1000)
    out.rpush(f"{job}:steps", f"{fence} {os.getpid()} {step}")
    print(f"{job}: step {step} done (fence {fence})", flush=True)


def main():
    p = argparse.ArgumentParser(description="Run a job on one machine at a time.")
    p.add_argument("--dlockd", default=os.environ.get("DLOCKD") or "127.0.0.1:7379",
                   help="dlockd's HOST:PORT or unix socket (default $DLOCKD, else 127.0.0.1:7379)")
    p.add_argument("--redis", default="127.0.0.1:6379", help="where the job writes")
    p.add_argument("--steps", type=count, default=3)
    p.add_argument("--step-ms", type=count, default=1000)
    p.add_argument("job", nargs="?", default="nightly-report")
    args = p.parse_args()
    job = args.job

    try:
        # Connected at once: a dlockd that refuses the connection fails here.
        client = dlockd_client(args.dlockd)
        # No wait: tried once. None when another machine holds it.
        lock = client.acquire(job, ttl=60, label=f"cron {socket.gethostname()}")
    except dlock.DlockError as e:
        # dlockd refused the connection or dropped it (dlock.Unavailable), its lock
        # servers could not decide (dlock.NoQuorum, an Unavailable: nobody can tell
        # whether another machine runs the job), or a mistake in the setup (a password:
        # dlock.AuthFailed).
        print(f"{job}: dlockd at {args.dlockd}: {e}; job not run", file=sys.stderr)
        return exit_status(e)
    if lock is None:
        return 0  # another machine runs it: nothing to do, nothing to say
    print(f"{job}: running here (fence {lock.fence})", flush=True)

    out = redis_client(args.redis)
    try:
        # Leaving the block releases the lock. Not needed (the end of the process closes
        # the connection, which releases it), but it lets the next run in before this
        # process has finished exiting.
        with lock:
            for step in range(1, args.steps + 1):
                job_step(out, job, lock.fence, step, args.step_ms)
    except redis.exceptions.RedisError as e:
        print(f"{job}: failed: {e}", file=sys.stderr)
        return 1
    except dlock.LockLost as e:
        # The job ran, but the lock was gone by its end (dlockd's renewal failed, or an
        # operator broke it): another run may have overlapped this one, which is what
        # the fence handed to every write lets the resource refuse. Worth a line.
        print(f"{job}: {e}", file=sys.stderr)
    except dlock.DlockError as e:
        # The job ran and the release could not reach dlockd (or its lock servers): a
        # line, not a failed run, since the lock ends with the connection or its lease
        # all the same.
        print(f"{job}: release: {e}; the lock ends with this connection (or its lease)",
              file=sys.stderr)
    print(f"{job}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
