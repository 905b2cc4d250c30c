"""The asyncio client's connection layer: as dlock._pool over redis.asyncio, and a wait
that a cancelled task leaves without a lock or a parked waiter.
"""

from __future__ import annotations

import asyncio as _aio
import contextlib
from typing import Any, Iterator, List, Optional, Tuple

import redis.exceptions as rx

from . import _args
from ._errors import LockLost

def in_step(e: BaseException) -> bool:
    return bool(getattr(e, "_in_step", False))


def broken(e: BaseException) -> bool:
    return isinstance(e, LockLost) or type(e.__cause__) is rx.ConnectionError


def connected(conn: Any) -> bool:
    return conn is not None and bool(getattr(conn, "is_connected", False))


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


async def exchange(conn: Any, args: List[bytes], wait_ms: int = 0) -> Any:
    """Sends one command on ``conn`` and returns its reply, undecoded; the read timeout
    raised by ``wait_ms`` for this reply alone (see dlock._client._exchange). A
    cancellation disconnects the connection (redis-py does, and so does this)."""
    with _no_stray_cancels():
        return await exchange_once(conn, args, wait_ms)


async def exchange_once(conn: Any, args: List[bytes], wait_ms: int) -> Any:
    base = conn.socket_timeout
    raised = False
    try:
        await conn.send_command(*args)
        if wait_ms != 0 and base:
            _set_read_timeout(conn, None if wait_ms < 0 else base + wait_ms / 1000)
            raised = True
        return await conn.read_response(disable_decoding=True)
    except (rx.RedisError, OSError) as e:
        err, in_step = _args.failure(e)
        err._in_step = in_step  # type: ignore[attr-defined]
        if not in_step:
            await _disconnect(conn)
        raise err from e
    except BaseException:
        await _disconnect(conn)
        raise
    finally:
        if raised:
            _set_read_timeout(conn, base)


class Pool:
    """The redis.asyncio connection pool, as the package uses it."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    async def take(self, command: bytes) -> Any:
        try:
            with _no_stray_cancels():
                return await self.pool.get_connection(command.decode())
        except (rx.RedisError, OSError) as e:
            err, _ = _args.failure(e)
            raise err from e

    async def give(self, conn: Any, clean: bool = True) -> None:
        with _no_stray_cancels():
            if not clean:
                await _disconnect(conn)
            await self.pool.release(conn)

    async def call(self, args: List[bytes], wait_ms: int = 0) -> Any:
        for attempt in (0, 1):
            conn = await self.take(args[0])
            try:
                reply = await exchange(conn, args, wait_ms)
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

    async def acquire(self, args: List[bytes], wait_ms: int, detached: bool) -> Tuple[Any, Optional[Any]]:
        command = (b" ".join(args[:2]) if args[0] == b"SEM" else args[0]).decode()
        if detached:
            return _args.grant(await self.call(args, wait_ms), command), None
        for attempt in (0, 1):
            conn = await self.take(args[0])
            try:
                grant = _args.grant(await exchange(conn, args, wait_ms), command)
            except LockLost:
                await self.give(conn, clean=False)
                if attempt == 0:
                    continue
                raise
            except BaseException as e:
                # A cancelled wait included: the connection is closed, so dlockd drops
                # the waiter (and releases what it granted as the task was cancelled).
                await self.give(conn, clean=in_step(e))
                raise
            if grant is None:
                await self.give(conn)
                return None, None
            return grant, conn
        raise AssertionError("unreachable")
