"""cycles.py: what the Python package (clients/python) costs a lock + unlock cycle,
for dlock-bench's W5/py-raw and W5/py-package.

One process, and two ways of making the same cycle through redis-py to dlockd:

  raw      LOCK name TTL 30000, then UNLOCK name token, each one execute_command()
           on a redis.Redis with single_connection_client=True, with the least
           checking a caller would do;
  package  client.acquire(name, ttl=30), then lock.release(), with
           client = dlock.Client(redis.Redis(...)) on a pool of its own, in which the
           package takes one connection for each session lock and gives it back.

Both send the same two commands and read the same two replies, each on one
connection of its own that stays open, so the difference is the package's own
Python work: argument checks, reply checks, the Lock object, taking the connection
from the pool and giving it back. The rounds alternate (raw, package, raw, ...) so
that a burst of other work on the machine falls on both kinds alike.

Every cycle uses the same name. Both kinds then do the same work on the same keys
of the servers, which never grow, and a cycle that left the lock held would make the
next LOCK come back nil, which fails the run.

usage: python3 cycles.py redis-py DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP
  PACKAGE_DIR  the directory that holds the package `dlock` (clients/python)
  ROUNDS       rounds of each kind; CYCLES per round; WARMUP cycles of each kind
               first, not timed (imports, the first connections and replies)

It prints one line per round pair on stdout:
  round I raw_ns T package_ns U
with T and U the perf_counter_ns() time of each round's CYCLES cycles. Anything that
is not a granted LOCK and an UNLOCK of 1 (True) is one line on stderr and exit
status 1.
"""

import os
import sys
import time

TTL_MS = 30000


def fail(msg):
    sys.stderr.write(f"cycles.py: {msg}\n")
    sys.exit(1)


def main(argv):
    if len(argv) != 8:
        fail("usage: cycles.py redis-py DLOCKD_PORT PACKAGE_DIR NAME ROUNDS CYCLES WARMUP")
    client, port, pkg, name = argv[1], int(argv[2]), argv[3], argv[4]
    rounds, cycles, warmup = int(argv[5]), int(argv[6]), int(argv[7])
    if client != "redis-py":
        fail(f"unknown client '{client}'")
    if rounds < 1 or cycles < 1 or warmup < 0:
        fail("ROUNDS and CYCLES must be at least 1, WARMUP at least 0")
    if not os.path.isfile(os.path.join(pkg, "dlock", "__init__.py")):
        fail(f"{pkg}/dlock/__init__.py is missing (set $DLOCK_BENCH_PY_PACKAGE_DIR)")
    try:
        import redis
    except ImportError as e:
        fail(f"redis-py is missing for {sys.executable}: {e} (Debian: python3-redis)")
    # The package of PACKAGE_DIR, before any installed one.
    sys.path.insert(0, pkg)
    import dlock

    def connect(**kw):
        r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0, socket_connect_timeout=5.0, **kw)
        try:
            r.ping()
        except redis.RedisError as e:
            fail(f"cannot connect to dlockd on port {port}: {e}")
        return r

    r = connect(single_connection_client=True)
    # The raw cycle and the package's, each a function: a call costs the same for
    # both kinds, so it stays out of the difference.
    def raw(name):
        lk = r.execute_command("LOCK", name, "TTL", TTL_MS)
        if not isinstance(lk, list):
            fail(f"raw LOCK not granted: {lk!r}")
        u = r.execute_command("UNLOCK", name, lk[0])
        if u != 1:
            fail(f"raw UNLOCK replied {u!r}")

    dl = dlock.Client(connect())

    def package(name):
        lk = dl.acquire(name, ttl=TTL_MS / 1000)
        if lk is None:
            fail("package acquire() not granted")
        if lk.release() is not True:
            fail("package release() returned False")

    def round_ns(cycle, n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            cycle(name)
        return time.perf_counter_ns() - t0

    round_ns(raw, warmup)
    round_ns(package, warmup)
    out = []
    for i in range(1, rounds + 1):
        raw_ns = round_ns(raw, cycles)
        package_ns = round_ns(package, cycles)
        out.append(f"round {i} raw_ns {raw_ns} package_ns {package_ns}\n")
    # Printed at the end, so that no write sits between the rounds.
    sys.stdout.write("".join(out))


if __name__ == "__main__":
    try:
        main(sys.argv)
    except SystemExit:
        raise
    except BaseException as e:
        fail(f"{type(e).__name__}: {e}")
