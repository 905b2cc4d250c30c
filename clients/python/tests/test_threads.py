"""Threads sharing one redis.Redis (one pool): each session lock on a connection of its
own, so no thread ever gets "this connection already holds lock", and the lock excludes
as it should: never two holders inside at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dlock


def run_jobs(client: dlock.Client, name: str, jobs: int = 40, threads: int = 8, **lock_kw):
    inside = 0
    most = 0
    fences = []
    mu = threading.Lock()

    def job(i: int) -> int:
        nonlocal inside, most
        with client.lock(name, **lock_kw) as lk:
            with mu:
                inside += 1
                most = max(most, inside)
                fences.append(lk.fence)
            time.sleep(0.002)
            with mu:
                inside -= 1
        return i

    with ThreadPoolExecutor(threads) as ex:
        done = list(ex.map(job, range(jobs)))  # re-raises the first error of any job
    return done, most, fences


def test_eight_threads_one_redis(pair, name):
    r = pair.redis_client()
    client = dlock.Client(r)
    done, most, fences = run_jobs(client, name, ttl=10, wait=20)
    assert done == list(range(40))
    assert most == 1
    # Each holder's fence is greater than every earlier holder's.
    assert fences == sorted(fences) and len(set(fences)) == 40
    assert client.info(name)["state"] == "free"
    # Every connection went back to the pool; none more than the threads.
    pool = r.connection_pool
    assert not pool._in_use_connections and len(pool._available_connections) <= 8 + 1
    pool.disconnect()


def test_eight_threads_fair_waits(pair, name):
    client = pair.client()
    done, most, fences = run_jobs(client, name, ttl=5, wait=dlock.FOREVER, fair=True)
    assert most == 1 and len(done) == 40


def test_threads_with_detached_locks(pair, name):
    client = pair.client()
    done, most, _ = run_jobs(client, name, ttl=5, wait=20, detached=True)
    assert most == 1 and len(done) == 40
