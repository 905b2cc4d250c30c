"""Faults, each against servers of the test's own: dlockd down at connect and mid-wait,
the lock servers down (Unavailable; NoQuorum with two of three), a lock lost under its
holder while the lock server was paused, a draining dlockd, and a worker process
killed inside its ``with`` block. Time bounds are upper bounds times
DLOCK_TEST_SLACK."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis
import redis.asyncio

import dlock
import dlock.asyncio
from conftest import PACKAGE, eventually, free_port, slack


def timed(fn, *a, **kw):
    t = time.monotonic()
    try:
        return fn(*a, **kw), None, time.monotonic() - t
    except BaseException as e:  # noqa: BLE001 - returned for the test to check
        return None, e, time.monotonic() - t


def test_dlockd_down_at_connect():
    port = free_port()
    c = dlock.Client(redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1))
    for call in (lambda: c.acquire("x", wait=5), lambda: c.info("x"), lambda: c.stock("s").status()):
        _, e, took = timed(call)
        assert isinstance(e, dlock.Unavailable), e
        assert took < 1 * slack()


def test_dlockd_killed_mid_wait(own, name):
    p = own.pair()
    c = p.client()
    holder = c.acquire(name)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=timed(c.acquire, name, wait=10)))
    t.start()
    time.sleep(0.3)
    killed = time.monotonic()
    p.dlockd.kill()
    t.join(10)
    _, e, _ = result["r"]
    assert isinstance(e, dlock.Unavailable), e
    assert time.monotonic() - killed < 1 * slack()
    # The holder's connection went with dlockd: its release says it no longer holds.
    assert holder.release() is False


def test_dlockd_hung_mid_wait(own, name):
    """dlockd stopped (SIGSTOP), its connections open: the wait ends with the read
    timeout, raised by the wait for that one reply: WAIT + socket_timeout, no later."""
    p = own.pair()
    c = p.client(socket_timeout=0.5)
    holder = c.acquire(name)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=timed(c.acquire, name, wait=1)))
    t.start()
    time.sleep(0.1)
    p.dlockd.pause()
    t.join(10)
    p.dlockd.resume()
    _, e, took = result["r"]
    assert isinstance(e, dlock.Unavailable), e
    assert 1.4 < took < 1.5 + 1 * slack()
    holder.release()


def test_lock_server_down(own, name):
    p = own.pair()
    c = p.client()
    held = c.acquire(name + ":held")
    p.redis.stop()
    for call in (
        lambda: c.acquire(name),
        lambda: c.lock(name, wait=1),
        lambda: c.info(name),
        lambda: c.stock(name).status(),
        lambda: c.acquire(name, detached=True),
        held.held,
    ):
        _, e, took = timed(call)
        assert type(e) is dlock.Unavailable, e
        assert "UNAVAILABLE" in str(e)
        assert took < 2 * slack()
    # An -UNAVAILABLE reply leaves the connection usable: the session lock is still
    # dlockd's to release, which the release asks of it (and fails to: Unavailable).
    with pytest.raises(dlock.Unavailable):
        held.release()


def test_no_quorum(own, name):
    ports = [own.redis() for _ in range(3)]
    _, dport = own.dlockd([port for _, port in ports])
    c = dlock.Client(redis.Redis(port=dport, socket_timeout=5))
    with c.lock(name):
        pass
    ports[0][0].stop()
    with c.lock(name):  # two of three: a quorum
        pass
    ports[1][0].stop()
    _, e, took = timed(c.acquire, name)
    assert isinstance(e, dlock.NoQuorum) and isinstance(e, dlock.Unavailable), e
    assert took < 2 * slack()
    with pytest.raises(dlock.NoQuorum):
        c.info(name)


def test_lock_lost_while_the_lock_server_is_paused(own, name):
    """TTL 1 s, the lock server paused 2.5 s: dlockd's renewals cannot reach it, the
    lease runs out, dlockd closes the holder's connection. The end of the block raises
    LockLost; a lock released by hand answers False.

    Meanwhile a raw session lock of the application's, taken on the one pooled
    connection of another redis.Redis, is lost too: dlockd closes that connection,
    and the package's next command goes out on a new one (test_args has the case of
    a command that reads the -LOST: it is sent again)."""
    p = own.pair()
    c = p.client()
    r = p.redis_client(max_connections=1)
    raw = dlock.Client(r)
    with pytest.raises(dlock.LockLost):
        with c.lock(name, ttl=1) as lk:
            lk2 = c.acquire(name + ":2", ttl=1)
            assert r.execute_command("LOCK", name + ":raw", "TTL", 1000)
            p.redis.pause()
            time.sleep(2.5)
            p.redis.resume()
    assert lk.released and lk.held() is False
    assert lk2.held() is False
    assert lk2.release() is False
    assert raw.info(name + ":raw")["state"] == "free"
    # The client goes on: new connections, new locks.
    with c.lock(name, wait=2) as again:
        assert again.held()


def test_draining_dlockd(own, name):
    p = own.pair()
    d, port = own.dlockd([p.redis_port], "--shutdown-timeout", "5000")
    c = dlock.Client(redis.Redis(port=port, socket_timeout=5))
    holder = c.acquire(name)  # keeps the drain going
    waiting = {}
    t = threading.Thread(target=lambda: waiting.update(r=timed(c.acquire, name, wait=10)))
    t.start()
    time.sleep(0.2)
    os.kill(d.pid, signal.SIGTERM)  # the drain
    t.join(10)
    _, e, took = waiting["r"]
    assert isinstance(e, dlock.Unavailable) and "SHUTDOWN" in str(e), e
    assert holder.release() is True  # the drain keeps serving what is held
    d.stop()


WORKER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import dlock, redis
client = dlock.Client(redis.Redis(port=int(sys.argv[2])))
with client.lock(sys.argv[3], ttl=30):
    print("held", flush=True)
    time.sleep(60)
"""


def test_worker_killed_inside_with(pair, name):
    w = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(PACKAGE), str(pair.port), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = w.stdout.readline()
        assert line == "held\n", w.stderr.read()
        c = pair.client()
        assert c.acquire(name) is None
        w.kill()
        killed = time.monotonic()
        lk = c.acquire(name, wait=5 * slack())
        assert lk is not None
        assert time.monotonic() - killed < 1 * slack()
        assert lk.release()
    finally:
        w.kill()
        w.wait()
        w.stdout.close()
        w.stderr.close()


def test_pool_survives_faults(own, name):
    """After dlockd is restarted, the same client works again (its pooled connections
    reconnect), and a lock taken before the restart reports that it is gone."""
    p = own.pair()
    c = p.client()
    before = c.acquire(name, ttl=1)
    port = p.port
    p.dlockd.kill()
    own.dlockd([p.redis_port], at=port)
    assert before.held() is False
    assert eventually(lambda: c.acquire(name + ":new") is not None, 2)


def test_a_session_lock_does_not_move_to_a_new_connection(own, name):
    """redis-py's health check (a PING before a command) and its retries connect again
    when the PING fails, and would send the lock's command on the new connection: a
    session that holds nothing. With dlockd SIGKILLed and started again, EXTEND by
    token would succeed there, and the Lock would claim a session lock that nothing
    renews. It is lost instead, in both clients."""
    p = own.pair()
    kw = {"health_check_interval": 0.01, "retry_on_timeout": True}
    c = p.client(**kw)

    async def main():
        ac = p.aio_client(**kw)
        alk = await ac.acquire(name + ":aio", ttl=5)
        lk = c.acquire(name, ttl=5)
        p.dlockd.kill()
        own.dlockd([p.redis_port], at=p.port)
        assert lk.extend(5) is False
        assert lk.held() is False and "lost" in repr(lk)
        assert await alk.extend(5) is False
        assert await alk.held() is False and "lost" in repr(alk)
        assert lk.release() is False and await alk.release() is False
        await ac.redis.connection_pool.disconnect()

    asyncio.run(main())


def test_a_hung_dlockd_without_a_socket_timeout(own, name, monkeypatch):
    """A redis client without socket_timeout (redis-py's default) and dlockd stopped
    (SIGSTOP) while a lock() waits: the wait ends with Unavailable the margin after it
    (_args.HUNG_MARGIN, shortened here), in both clients, rather than never. And
    from_url's PING finds a hung dlockd at once."""
    monkeypatch.setattr(dlock._args, "HUNG_MARGIN", 0.5, raising=False)
    p = own.pair()
    c = dlock.Client(redis.Redis(port=p.port))
    holder = c.acquire(name)
    results = {}

    async def aio_wait():
        ac = dlock.asyncio.Client(redis.asyncio.Redis(port=p.port))
        try:
            return await ac.acquire(name, wait=0.5)
        finally:
            await ac.redis.connection_pool.disconnect()

    threads = [
        threading.Thread(target=lambda: results.update(sync=timed(c.acquire, name, wait=0.5))),
        threading.Thread(target=lambda: results.update(aio=timed(asyncio.run, aio_wait()))),
    ]
    for t in threads:
        t.start()
    info = redis.Redis(port=p.port, socket_timeout=5)
    assert eventually(lambda: info.execute_command("INFO")["waiting_locks"] == 2, 2)
    p.dlockd.pause()
    for t in threads:
        t.join(10 * slack())
        assert not t.is_alive(), "a wait outlived its bound"
    for which in ("sync", "aio"):
        _, e, took = results[which]
        assert isinstance(e, dlock.Unavailable), (which, e)
        assert 0.9 < took < 1 + 1 * slack(), (which, took)
    t0 = time.monotonic()
    with pytest.raises(dlock.Unavailable):
        dlock.Client.from_url(f"dlockd://127.0.0.1:{p.port}?timeout=0.3")
    assert time.monotonic() - t0 < 0.3 + 1 * slack()
    p.dlockd.resume()
    assert holder.release() is True
