"""The asyncio client's connection layer: as dlock._pool over redis.asyncio, and a wait
that a cancelled task leaves without a lock or a parked waiter.
"""

from __future__ import annotations

import asyncio as _aio
import contextlib
from typing import Any, Callable, Iterator, List, Optional

import redis.exceptions as rx

from . import _args
from ._base import PoolBase, Request
from ._errors import LockLost, failed, in_step, take_failure


def _set_read_timeout(conn: Any, timeout: Optional[float]) -> None:
    """The read timeout of one redis.asyncio connection: its own and its parser's
    (redis-py 4 applies both to a read)."""
    conn.socket_timeout = timeout
    parser = getattr(conn, "_parser", None)
    buffer = getattr(parser, "_buffer", None)
    if buffer is not None and hasattr(buffer, "socket_timeout"):
        buffer.socket_timeout = timeout
    if parser is not None and hasattr(parser, "_socket_timeout"):
        parser._socket_timeout = timeout


@contextlib.contextmanager
def _no_stray_cancels() -> Iterator[None]:
    """Undoes the cancellation requests that redis-py's timeouts leave on the task.

    redis-py 4's async_timeout (4.0) cancels the task to end a read that timed out,
    and turns the CancelledError into a timeout, but leaves the task's count of
    cancellation requests raised (Python 3.11's Task.cancelling(); it never calls
    uncancel()). Every pooled connection's readiness check is such a read (a timeout
    of 0), so after a few commands an ``asyncio.timeout()`` block would no longer see
    its own cancellation as its timeout, and raise CancelledError where it should
    raise TimeoutError. Whatever ends without a CancelledError leaves the count as
    it found it; a CancelledError (a cancellation for real) leaves it alone.
    """
    task = _aio.current_task()
    if task is None or not hasattr(task, "uncancel"):
        yield
        return
    before = task.cancelling()

    def restore() -> None:
        while task.cancelling() > before:
            task.uncancel()

    try:
        yield
    except _aio.CancelledError:
        raise
    except BaseException:
        restore()
        raise
    restore()


async def _disconnect(conn: Any) -> None:
    try:
        await conn.disconnect()
    except Exception:
        pass


async def exchange(conn: Any, args: List[bytes], wait: Optional[int] = None, own: bool = False) -> Any:
    """Sends one command on ``conn`` and returns its reply, undecoded; ``wait`` and
    ``own`` as in dlock._pool.exchange. A cancellation disconnects the connection
    (redis-py does, and so does this)."""
    with _no_stray_cancels():
        return await exchange_once(conn, args, wait, own)


async def exchange_once(conn: Any, args: List[bytes], wait: Optional[int], own: bool) -> Any:
    base = conn.socket_timeout
    timeout = _args.read_timeout(base or None, wait)
    raised = False
    try:
        if own:
            await conn.send_packed_command(conn.pack_command(*args), check_health=False)
        else:
            await conn.send_command(*args)
        if timeout != (base or None):
            _set_read_timeout(conn, timeout)
            raised = True
        return await conn.read_response(disable_decoding=True)
    except (rx.RedisError, OSError) as e:
        err = failed(e)
        if not in_step(err):
            await _disconnect(conn)
        raise err from e
    except BaseException:
        await _disconnect(conn)
        raise
    finally:
        if raised:
            _set_read_timeout(conn, base)


class Pool(PoolBase):
    """The redis.asyncio connection pool, as the package uses it."""

    _link = "_writer"  # a connection's stream writer

    def orphan(self, conn: Any, loop: Any) -> None:
        """The connection of a lock collected without release(), from whatever thread
        the collector ran in: its transport closed by ``loop`` (a transport is not to
        be closed from another thread), which makes dlockd release the lock, and the
        connection given back to the pool by the next take() or give(). Takes no
        lock."""
        self._orphans.append(conn)
        writer = conn._writer
        if writer is not None and not loop.is_closed():
            loop.call_soon_threadsafe(writer.close)

    async def _give_orphans(self) -> None:
        while self._orphans:
            conn = self._orphans.popleft()
            try:
                await _disconnect(conn)
            finally:
                await self.pool.release(conn)

    async def take(self, command: bytes) -> Any:
        with _no_stray_cancels():
            await self._give_orphans()
        try:
            with _no_stray_cancels():
                return await self.pool.get_connection(command.decode())
        except (rx.RedisError, OSError) as e:
            raise take_failure(e, self.pool) from e

    async def give(self, conn: Any, clean: bool = True) -> None:
        with _no_stray_cancels():
            try:
                if not clean:
                    await _disconnect(conn)
            finally:
                # Given back even when a cancellation cut the disconnect short (its
                # transport is closed by then).
                await self.pool.release(conn)
            await self._give_orphans()

    async def call(
        self, args: List[bytes], wait: Optional[int] = None, hold: Optional[Callable[[Any, Any], Any]] = None
    ) -> Any:
        """As dlock._pool.Pool.call. A cancelled wait included: the connection is
        closed, so dlockd drops the waiter (and releases what it granted as the task
        was cancelled)."""
        for attempt in (0, 1):
            conn = await self.take(args[0])
            try:
                reply = await exchange(conn, args, wait)
                if hold is not None:
                    reply = hold(reply, conn)
                    if reply is not None:
                        return reply
            except LockLost:
                await self.give(conn, clean=False)
                if attempt == 0:
                    continue
                raise
            except BaseException as e:
                await self.give(conn, clean=in_step(e))
                raise
            await self.give(conn)
            return reply
        raise AssertionError("unreachable")

    async def acquire(self, req: Request) -> Any:
        if req.detached:
            return req.hold(await self.call(req.args, req.wait), None)
        return await self.call(req.args, req.wait, req.hold)
