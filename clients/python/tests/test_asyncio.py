"""dlock.asyncio.Client over redis.asyncio: the same locks, tasks sharing one client,
and cancelled waits that leave no lock and no waiter behind."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import redis

import dlock
import dlock.asyncio
from conftest import slack


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30 * slack()))


def dlockd_info(pair) -> dict:
    r = redis.Redis(port=pair.port, socket_timeout=5)
    try:
        return r.execute_command("INFO")
    finally:
        r.close()
        r.connection_pool.disconnect()


async def until(pred, within: float) -> bool:
    deadline = time.monotonic() + within * slack()
    while time.monotonic() < deadline:
        if await pred():
            return True
        await asyncio.sleep(0.02)
    return await pred()


def test_lock(pair, name):
    async def main():
        c = pair.aio_client()
        async with c.lock(name, ttl=10, wait=5) as lk:
            assert isinstance(lk, dlock.asyncio.Lock)
            assert re.fullmatch(r"[0-9a-f]{32}", lk.token) and isinstance(lk.fence, int)
            assert 9 < lk.validity <= 10
            assert await lk.held()
            assert (await c.info(name))["state"] == "held"
            assert await c.acquire(name) is None  # another connection: refused, no error
            assert await lk.extend(20)
            assert (await c.info(name))["remaining_ms"] > 15000
        assert (await c.info(name))["state"] == "free"
        assert await lk.release() is False
        lk = await c.lock(name)  # awaited rather than entered
        assert await lk.release() is True
        await c.redis.connection_pool.disconnect()

    run(main())


def test_not_acquired(pair, name):
    async def main():
        c = pair.aio_client()
        holder = await c.acquire(name)
        with pytest.raises(dlock.NotAcquired):
            async with c.lock(name, wait=0.2):
                pytest.fail("entered a block whose lock another holds")
        t = time.monotonic()
        assert await c.acquire(name, wait=0.3) is None
        assert 0.25 < time.monotonic() - t < 0.3 + 1 * slack()
        asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(holder.release()))
        async with c.lock(name, wait=dlock.FOREVER) as lk:
            assert lk.fence > holder.fence
        with pytest.raises(dlock.InvalidArgument):
            await c.acquire(name, wait=-1)

    run(main())


def test_read_timeout_raised_for_the_wait_only(pair, name):
    async def main():
        c = pair.aio_client(socket_timeout=0.3)
        holder = await c.acquire(name)
        t = time.monotonic()
        assert await c.acquire(name, wait=1) is None
        assert 0.9 < time.monotonic() - t < 1 + 1 * slack()
        for conn in c.redis.connection_pool._available_connections:
            assert conn.socket_timeout == 0.3
        assert await holder.release()

    run(main())


def test_tasks_share_one_client(pair, name):
    async def main():
        c = pair.aio_client()
        inside = most = 0
        fences = []

        async def job(i):
            nonlocal inside, most
            async with c.lock(name, ttl=10, wait=20) as lk:
                inside += 1
                most = max(most, inside)
                fences.append(lk.fence)
                await asyncio.sleep(0.002)
                inside -= 1
            return i

        sem = asyncio.Semaphore(8)  # 8 at a time, 40 jobs

        async def bounded(i):
            async with sem:
                return await job(i)

        done = await asyncio.gather(*(bounded(i) for i in range(40)))
        assert done == list(range(40)) and most == 1
        assert fences == sorted(fences) and len(set(fences)) == 40
        assert (await c.info(name))["state"] == "free"
        assert not c.redis.connection_pool._in_use_connections

    run(main())


def test_cancelled_wait_leaves_nothing(pair, name):
    """A wait cut short by wait_for, and one by task.cancel(): afterwards dlockd has no
    waiter of the name and gives the lock to nobody when the holder releases."""

    async def main():
        c = pair.aio_client()
        holder = await c.acquire(name)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.acquire(name, wait=10), 0.3)

        async def enter():
            async with c.lock(name, wait=10):
                pytest.fail("entered")

        task = asyncio.create_task(enter())

        async def parked():
            return dlockd_info(pair)["waiting_locks"] == 1

        assert await until(parked, 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        async def no_waiters():
            info = dlockd_info(pair)
            return info["waiting_locks"] == 0 and info["session_locks"] == 1

        assert await until(no_waiters, 1)
        assert not c.redis.connection_pool._in_use_connections - {holder._conn}
        assert await holder.release()
        await asyncio.sleep(0.1)
        assert (await c.info(name))["state"] == "free"
        assert dlockd_info(pair)["session_locks"] == 0
        async with c.lock(name) as lk:  # the pool goes on
            assert await lk.held()

    run(main())


def test_timeout_context_cancels_the_wait(pair, name):
    async def main():
        c = pair.aio_client()
        holder = await c.acquire(name)
        t = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await c.lock(name, wait=dlock.FOREVER)
        assert time.monotonic() - t < 0.2 + 1 * slack()
        assert await holder.release()
        await asyncio.sleep(0.1)
        assert (await c.info(name))["state"] == "free"

    run(main())


def test_lost_at_the_end_of_the_block(pair, name):
    async def main():
        c = pair.aio_client()
        other = pair.client()
        with pytest.raises(dlock.LockLost):
            async with c.lock(name, ttl=1) as lk:
                assert other.adopt(name, lk.token).release()
                await asyncio.sleep(0.5)
        assert await lk.held() is False

    run(main())


def test_semaphore_and_stock(pair, name):
    async def main():
        c = pair.aio_client()
        sem = c.semaphore(name, 2)
        a = await sem.acquire()
        async with sem as p:
            assert await p.held() and (await c.info(name))["shared"] == 2
            assert await sem.acquire() is None
            with pytest.raises(dlock.NotAcquired):
                async with sem.permit(wait=0.1):
                    pass
        assert await a.release()
        assert (await c.info(name))["state"] == "free"

        st = c.stock(name)
        assert (await st.set(2))["available"] == 2
        r = await st.reserve(2, lease=10)
        with pytest.raises(dlock.OutOfStock) as e:
            await st.reserve(1)
        assert e.value.sold_out is False
        asyncio.get_running_loop().call_later(0.2, lambda: asyncio.ensure_future(r.cancel()))
        async with await st.reserve(1, wait=5) as r2:
            assert await r2.commit()
        assert (await st.status())["sold"] == 1
        with pytest.raises(dlock.OutOfStock) as e:
            await st.reserve(2)
        assert e.value.sold_out is True
        assert await st.reservation(r.id).commit() is False

    run(main())


def test_detached_and_shared(pair, name):
    async def main():
        c = pair.aio_client()
        d = await c.acquire(name, ttl=5, detached=True)
        assert d.detached and await d.held()
        assert await c.adopt(name, d.token).release()
        assert await d.release() is False
        a = await c.acquire(name, shared=True)
        b = await c.acquire(name, shared=True)
        info = await c.info(name)
        assert info["shared"] == 2 and isinstance(info["holder"], list)
        await a.release()
        await b.release()

    run(main())


def test_dlockd_down(own, name):
    async def main():
        p = own.pair()
        c = p.aio_client()
        holder = await c.acquire(name)
        waiter = asyncio.create_task(c.acquire(name, wait=10))
        await asyncio.sleep(0.3)
        killed = time.monotonic()
        p.dlockd.kill()
        with pytest.raises(dlock.Unavailable):
            await waiter
        assert time.monotonic() - killed < 1 * slack()
        assert await holder.release() is False
        with pytest.raises(dlock.Unavailable):
            await c.acquire(name)
        with pytest.raises(dlock.Unavailable):
            await c.info(name)

    run(main())


def test_lock_server_down(own, name):
    async def main():
        p = own.pair()
        c = p.aio_client()
        p.redis.stop()
        with pytest.raises(dlock.Unavailable, match="UNAVAILABLE"):
            await c.acquire(name)
        with pytest.raises(dlock.Unavailable):
            await c.stock(name).status()

    run(main())


def test_dropped_locks_give_their_connections_back(pair, name):
    """Two session locks dropped without release() from a pool of two connections,
    one collected in the loop's thread and one from another thread: dlockd releases
    both, and the pool has its connections for the next command."""

    async def main():
        c = pair.aio_client(max_connections=2)
        a = await c.acquire(name + ":a")
        b = await c.acquire(name + ":b")
        del a  # collected here, in the loop's thread
        await asyncio.to_thread(b.__del__)  # as the collector would in another thread

        async def both_free():
            return all([(await c.info(name + k))["state"] == "free" for k in (":a", ":b")])

        assert await until(both_free, 1)
        assert not c.redis.connection_pool._in_use_connections
        await c.redis.connection_pool.disconnect()

    run(main())


def test_a_cancelled_release_gives_its_connection_back(pair, name):
    """release() cancelled at each of its awaits in turn, its UNLOCK answered 0 (so
    that the connection goes back disconnected): never a connection lost to the
    pool."""

    async def main():
        c = pair.aio_client()
        other = pair.client()
        pool = c.redis.connection_pool
        for k in range(30):
            lk = await c.acquire(f"{name}:{k}")
            assert other.adopt(f"{name}:{k}", lk.token).release()
            task = asyncio.create_task(lk.release())
            for _ in range(k):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            # Cancelled before it began, release() left the lock (and its connection)
            # as they were; else the connection is back.
            assert pool._in_use_connections <= {lk._conn} - {None}, f"a connection lost at step {k}"
            assert await lk.release() is False
            assert not pool._in_use_connections
        other.redis.connection_pool.disconnect()
        await pool.disconnect()

    run(main())


class Interrupt(BaseException):
    """Stands for a KeyboardInterrupt (which asyncio and pytest take for their own)."""


def test_an_interrupt_before_the_lock_is_made(pair, name, monkeypatch):
    async def main():
        c = pair.aio_client(max_connections=1)

        def interrupted(self, *args, **kwargs):
            raise Interrupt

        with monkeypatch.context() as m:
            m.setattr(dlock.asyncio.Lock, "__init__", interrupted)
            with pytest.raises(Interrupt):
                await c.acquire(name)

        async def free():
            return (await c.info(name))["state"] == "free"

        assert await until(free, 1)
        await c.redis.connection_pool.disconnect()

    run(main())


def test_a_lock_adopted_outside_the_loop(pair, name):
    """adopt() is no coroutine: a Lock made outside any loop works in the loop that
    uses it (its asyncio.Lock is made there)."""
    c = pair.aio_client()
    taken = pair.client().acquire(name, detached=True)
    lk = c.adopt(name, taken.token, taken.fence)

    async def main():
        assert await lk.held()
        assert await lk.release() is True and lk.released
        await c.redis.connection_pool.disconnect()

    run(main())
