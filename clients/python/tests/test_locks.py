"""Locks, semaphores, stock and LOCKINFO through the blocking client, against one
redis-server and one dlockd of this module's."""

from __future__ import annotations

import re
import threading
import time

import pytest
import redis

import dlock
from conftest import eventually, slack


def test_lock_in_a_with_block(client, name):
    with client.lock(name, ttl=10, wait=5) as lk:
        assert isinstance(lk, dlock.Lock)
        assert isinstance(lk.token, str) and re.fullmatch(r"[0-9a-f]{32}", lk.token)
        assert isinstance(lk.fence, int) and lk.fence > 0
        assert 9 < lk.validity <= 10
        assert lk.name == name and not lk.detached
        assert lk.held() is True
        info = client.info(name)
        assert info["state"] == "held" and info["fence"] == lk.fence
        assert isinstance(info["holder"], str) and 0 < info["remaining_ms"] <= 10000
    assert lk.released and lk.held() is False
    assert lk.release() is False
    info = client.info(name)
    assert info == {"state": "free", "holder": None, "remaining_ms": 0, "fence": lk.fence}


def test_not_acquired(client, name):
    holder = client.acquire(name)
    try:
        with pytest.raises(dlock.NotAcquired, match=re.escape(repr(name))):
            with client.lock(name):
                pytest.fail("entered a block whose lock another holds")
        assert client.acquire(name) is None
        t = time.monotonic()
        assert client.acquire(name, wait=0.3) is None
        assert 0.25 < time.monotonic() - t < 0.3 + 1 * slack()
    finally:
        assert holder.release() is True
    with client.lock(name) as lk:
        assert lk.fence > holder.fence


def test_a_waiter_is_served_at_release(client, name):
    holder = client.acquire(name)
    threading.Timer(0.2, holder.release).start()
    t = time.monotonic()
    with client.lock(name, wait=10) as lk:
        assert time.monotonic() - t < 0.2 + 1 * slack()
        assert lk.fence > holder.fence


def test_each_session_lock_has_a_connection_of_its_own(pair, name):
    r = pair.redis_client()
    c = dlock.Client(r)
    pool = r.connection_pool
    a = c.acquire(name)
    b = c.acquire(name + ":b")
    # The same thread, the same client: a second LOCK of the name goes out on another
    # connection, so it is refused (None), not "this connection already holds lock".
    assert c.acquire(name) is None
    assert len(pool._in_use_connections) == 2
    assert a.release() and b.release()
    assert len(pool._in_use_connections) == 0
    # Released cleanly: the connections went back to the pool, connected.
    assert all(conn._sock is not None for conn in pool._available_connections)
    pool.disconnect()


def test_the_read_timeout_is_raised_for_a_wait_only(pair, name):
    r = pair.redis_client(socket_timeout=0.3)
    c = dlock.Client(r)
    holder = c.acquire(name)
    t = time.monotonic()
    assert c.acquire(name, wait=1.0) is None  # a wait longer than socket_timeout
    assert 0.9 < time.monotonic() - t < 1 + 1 * slack()
    for conn in r.connection_pool._available_connections:
        if conn._sock is not None:
            assert conn._sock.gettimeout() == 0.3
    assert holder.release()
    r.connection_pool.disconnect()


def test_extend_and_held(client, name):
    with client.lock(name, ttl=2) as lk:
        assert lk.extend(20) is True
        assert client.info(name)["remaining_ms"] > 15000
        with pytest.raises(dlock.CommandError, match="at least 1000 ms"):
            lk.extend(0.5)  # dlockd's floor for a session lock
        assert lk.held() is True
        with pytest.raises(dlock.InvalidArgument):
            lk.extend(0)
    assert lk.extend(10) is False


def test_exception_in_the_block(client, name):
    with pytest.raises(KeyError):
        with client.lock(name):
            raise KeyError("x")
    assert client.info(name)["state"] == "free"


def test_release_in_the_block(client, name):
    with client.lock(name) as lk:
        assert lk.release() is True
    assert client.info(name)["state"] == "free"


def test_lost_under_its_holder(client, pair, name):
    """Another client releases the lock with its token: dlockd's renewal finds it lost
    and closes the holder's connection; the end of the block says so."""
    other = pair.client()
    with pytest.raises(dlock.LockLost, match="lost before the end of the block"):
        with client.lock(name, ttl=1) as lk:
            assert other.adopt(name, lk.token).release() is True
            time.sleep(0.5)  # past a renewal (every TTL/3)
    assert lk.held() is False
    # The lost connection went back to the pool closed, not with a -LOST in it.
    with client.lock(name) as again:
        assert again.held()


def test_shared_holders(client, name):
    a = client.acquire(name, shared=True)
    b = client.acquire(name, shared=True)
    assert a and b
    info = client.info(name)
    assert info["shared"] == 2 and isinstance(info["holder"], list) and len(info["holder"]) == 2
    assert all(isinstance(h, str) for h in info["holder"])
    assert client.acquire(name) is None
    assert a.release() and b.release()


def test_detached_and_adopted(client, pair, name):
    lk = client.acquire(name, ttl=10, detached=True, label="cron@host-1")
    assert lk.detached and lk.held()
    info = client.info(name)
    assert "cron@host-1" in info["holder"]
    other = pair.client().adopt(name, lk.token, lk.fence)
    assert other.held() and other.extend(20)
    assert other.release() is True
    assert lk.release() is False
    short = client.acquire(name, ttl=0.05, detached=True)
    time.sleep(0.1)
    assert short.held() is False


def test_odd_names(client):
    for n in ["a\r\nb", "line\nbreak", "with space", "ünïcödé:λ", "x" * 4096, b"raw\xffbytes"]:
        with client.lock(n) as lk:
            assert client.info(n)["state"] == "held"
            assert client.acquire(n) is None
            assert lk.held()
        assert client.info(n)["state"] == "free"


def test_huge_name_is_refused_before_sending(client):
    with pytest.raises(dlock.InvalidArgument):
        client.lock("n" * 65536, wait=1)
    with pytest.raises(dlock.InvalidArgument):
        client.acquire(b"n" * 4097)


def test_waits(client, name):
    holder = client.acquire(name)
    t = time.monotonic()
    assert client.acquire(name, wait=0) is None  # tries once
    assert time.monotonic() - t < 0.5 * slack()
    with pytest.raises(dlock.InvalidArgument):
        client.acquire(name, wait=-1)
    with pytest.raises(dlock.InvalidArgument):
        client.lock(name, wait=-0.5)
    threading.Timer(0.2, holder.release).start()
    with client.lock(name, wait=dlock.FOREVER) as lk:
        assert lk.fence > holder.fence


def test_decoded_responses(pair, name):
    c = pair.client(decode_responses=True)
    with c.lock(name) as lk:
        assert isinstance(lk.token, str) and len(lk.token) == 32
        assert c.info(name)["state"] == "held"
    assert c.stock(name).status()["stock"] == 0


def test_label_and_max_hold(pair, name):
    c = dlock.Client(pair.redis_client(), label="worker-7", max_hold=60)
    with c.lock(name):
        assert "worker-7" in c.info(name)["holder"]
    short = dlock.Client(pair.redis_client(), max_hold=0.3)
    with pytest.raises(dlock.LockLost):
        with short.lock(name, ttl=1):
            # Past MAXHOLD: released, and the connection closed.
            assert eventually(lambda: c.info(name)["state"] == "free", 2)


def test_semaphore(client, name):
    sem = client.semaphore(name, 2)
    a, b = sem.acquire(), sem.acquire()
    assert a and b and a.token != b.token
    assert sem.acquire() is None
    with pytest.raises(dlock.NotAcquired, match="2 permits"):
        with sem.permit():
            pass
    with pytest.raises(dlock.NotAcquired):
        with sem:
            pass
    assert client.info(name)["shared"] == 2
    assert a.release()
    with sem as p:
        assert p.held() and client.info(name)["shared"] == 2
        with pytest.raises(dlock.NotAcquired):
            with sem:
                pass
    assert p.released
    c = sem.acquire()
    threading.Timer(0.2, b.release).start()
    t = time.monotonic()
    with sem.permit(wait=5) as q:
        assert q.held() and time.monotonic() - t > 0.15
    assert c.release()
    assert client.info(name)["state"] == "free"


def test_semaphore_threads(pair, name):
    c = pair.client()
    sem = c.semaphore(name, 3, wait=10)
    inside, most, errors = [0], [0], []
    mu = threading.Lock()

    def job():
        try:
            with sem:
                with mu:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.01)
                with mu:
                    inside[0] -= 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=job) for _ in range(6) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and most[0] <= 3


def test_stock(client, pair, name):
    st = client.stock(name)
    assert st.status() == dict.fromkeys(("stock", "available", "reserved", "sold", "reservations", "waiters"), 0)
    assert st.set(5)["available"] == 5
    assert st.add(-1)["stock"] == 4
    r = st.reserve(3, lease=10)
    assert isinstance(r.id, str) and len(r.id) == 32 and r.qty == 3
    with pytest.raises(dlock.OutOfStock) as e:
        st.reserve(2)
    assert e.value.sold_out is False and e.value.state["available"] == 1
    assert isinstance(e.value, dlock.NotAcquired)
    assert r.extend(20) is True
    # Committed from another client, by its id, as a payment callback would.
    assert pair.client().stock(name).reservation(r.id).commit() is True
    assert r.commit() is True  # again: counts nothing more
    assert r.cancel() is False
    with pytest.raises(dlock.OutOfStock) as e:
        st.reserve(2)
    assert e.value.sold_out is True and e.value.state["sold"] == 3
    with pytest.raises(dlock.CommandError):
        st.set(2)  # below sold + reserved
    # A reservation in a with block goes back unless committed.
    with st.reserve(1) as r2:
        assert st.status()["available"] == 0
    assert r2.settled and st.status()["available"] == 1
    # A waiting reserve is served by a cancel.
    r3 = st.reserve(1)
    threading.Timer(0.2, r3.cancel).start()
    r4 = st.reserve(1, wait=5)
    assert r4.commit() and st.status()["sold"] == 4


def test_info_of_a_name_never_used(client, name):
    assert client.info(name) == {"state": "free", "holder": None, "remaining_ms": 0, "fence": 0}


def test_a_dropped_lock_is_released(client, name):
    lk = client.acquire(name)
    assert lk is not None
    del lk  # garbage: its connection closes, and dlockd releases the lock
    assert eventually(lambda: client.info(name)["state"] == "free", 1)


def test_user_commands_on_the_same_redis(client, name):
    """The application's own commands share the pool with the package's."""
    r: redis.Redis = client.redis
    with client.lock(name):
        assert r.ping() is True
        assert r.execute_command("LOCKINFO", name)[1] == b"held"


def test_a_lock_collected_while_the_pool_is_locked(pair, name):
    """The collector may run a dropped Lock's __del__ in a thread that holds the redis
    pool's lock (inside get_connection, say), which is not reentrant: __del__ must not
    take it. Here another thread holds it while __del__ runs: __del__ returns all the
    same, and its connection is back in the pool (of one) for the next command."""
    r = pair.redis_client(max_connections=1)
    c = dlock.Client(r)
    lk = c.acquire(name)
    done = threading.Event()

    def collect():
        lk.__del__()
        done.set()

    with r.connection_pool._lock:
        t = threading.Thread(target=collect)
        t.start()
        returned = done.wait(2 * slack())
    t.join()
    assert returned, "__del__ waited for the pool's lock"
    assert eventually(lambda: c.info(name)["state"] == "free", 1)
    assert lk.release() is False
    r.connection_pool.disconnect()


def test_a_detached_release_that_failed_can_be_tried_again(own, name):
    """The lock server refuses dlockd for a moment (a password set, its connections
    killed): release() raises Unavailable, and the lock, still held, is neither said
    released nor given up: held() asks dlockd, and release() again frees it."""
    p = own.pair()
    c = p.client()
    lk = c.acquire(name, ttl=60, detached=True)
    server = redis.Redis(port=p.redis_port)
    server.config_set("requirepass", "x")
    server.execute_command("CLIENT", "KILL", "TYPE", "normal")
    with pytest.raises(dlock.Unavailable):
        lk.release()
    assert not lk.released
    redis.Redis(port=p.redis_port, password="x").config_set("requirepass", "")

    def answers(call):
        try:
            return call()
        except dlock.Unavailable:
            return False  # dlockd not yet connected to the lock server again

    assert eventually(lambda: answers(lk.held), 2)
    assert lk.release() is True and lk.released
    assert c.info(name)["state"] == "free"


class Interrupt(BaseException):
    """Stands for a KeyboardInterrupt (which pytest would take for its own)."""


def test_an_interrupt_before_the_lock_is_made(pair, name, monkeypatch):
    """An interrupt between the grant and the Lock that holds it: the connection goes
    back to the pool (of one) closed, and dlockd releases the grant."""
    r = pair.redis_client(max_connections=1)
    c = dlock.Client(r)

    def interrupted(self, *args, **kwargs):
        raise Interrupt

    with monkeypatch.context() as m:
        m.setattr(dlock.Lock, "__init__", interrupted)
        with pytest.raises(Interrupt):
            c.acquire(name)
    assert eventually(lambda: c.info(name)["state"] == "free", 1)
    r.connection_pool.disconnect()


def test_a_pool_exhausted_by_held_locks(pair, name):
    r = pair.redis_client(max_connections=1)
    c = dlock.Client(r)
    with c.lock(name):
        with pytest.raises(dlock.PoolExhausted, match="max_connections") as e:
            c.info(name)
        assert not isinstance(e.value, dlock.Unavailable)
    assert c.info(name)["state"] == "free"
    r.connection_pool.disconnect()


def test_read_only_attributes(client, name):
    with client.lock(name) as lk:
        for attr in ("name", "token", "fence", "validity", "detached", "released"):
            with pytest.raises(AttributeError):
                setattr(lk, attr, None)
    assert repr(client).startswith("<dlock.Client dlockd at 127.0.0.1:")
