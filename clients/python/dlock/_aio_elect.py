"""The asyncio client's leader election: as dlock._elect, with coroutines, over
redis.asyncio and its PubSub.
"""

from __future__ import annotations

import asyncio as _aio
import os
from typing import Any, AsyncIterator, Optional

from . import _args
from ._aio_pool import _no_stray_cancels
from ._args import Name
from ._errors import io_error, take_failure
from ._leader import Leader, LeadershipBase, ObserverBase, channel, deadline, value_bytes

__all__ = ["Leadership", "Observer", "Leader"]


class Leadership(LeadershipBase):
    """A leadership won with ``dlock.asyncio.Client.elect()``, as ``dlock.Leadership``
    but with coroutines: ``await lead.proclaim(value)``, ``await lead.is_leading()``,
    ``await lead.resign()``, ``async with``. Read-only attributes: ``name``,
    ``token``, ``term``, ``value``, ``validity``, ``resigned``."""

    _prefix = "dlock.asyncio"

    async def proclaim(self, value: Name) -> None:
        """As ``dlock.Leadership.proclaim()``: :class:`LockLost` when no longer the
        leader."""
        raw = value_bytes(value)
        seat = self._seat
        async with seat._guard():
            if seat._released or seat._session_over():
                raise self._not_leading()
            if not await seat._session_call(self._proclaim_args(raw)):
                raise self._not_leading()
            self._value = _args.text(raw)

    async def is_leading(self) -> bool:
        """As ``dlock.Leadership.is_leading()``: CHECK, read-only."""
        return bool(await self._seat.held())

    async def resign(self) -> bool:
        """As ``dlock.Leadership.resign()``: True, or False when already gone."""
        return bool(await self._seat.release())

    async def __aenter__(self) -> "Leadership":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._seat.__aexit__(exc_type, exc, tb)


class Observer(ObserverBase):
    """As ``dlock.Observer``, over redis.asyncio: an async iterator of
    :class:`Leader`, and an async context manager that unsubscribes at its end::

        async with client.observe("scheduler") as changes:
            async for leader in changes:
                route_to(leader.value)

    It subscribes at ``async with`` (or at its first read), and the state of that
    moment comes first. ``await get(timeout)`` waits at most ``timeout`` seconds
    (None when none came); a read cancelled leaves the observer as it was.
    ``await close()`` may come from another task of its loop, and ends a read under
    way (``get()`` returns None, the iteration stops). A connection that breaks
    closes the observer, and the read raises :class:`Unavailable`.
    """

    _prefix = "dlock.asyncio"

    def __init__(self, redis_client: Any, pool: Any, name: bytes) -> None:
        super().__init__(name)
        self._redis = redis_client
        self._pool = pool
        self._pid = os.getpid()
        self._pubsub: Any = None
        self._loop: Optional[_aio.AbstractEventLoop] = None
        # Made at its first use, in the loop that uses it (before Python 3.10 an
        # asyncio.Lock binds to the loop current when it is made).
        self._mu: Optional[_aio.Lock] = None

    def _guard(self) -> _aio.Lock:
        if self._mu is None:
            self._mu = _aio.Lock()
        return self._mu

    async def _subscribe(self) -> None:
        """SUBSCRIBE, once; under the guard."""
        if self._pubsub is not None or self._closed:
            return
        self._loop = _aio.get_running_loop()
        self._pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            with _no_stray_cancels():
                # The connections of locks and observers collected without a release
                # go back first: redis-py's PubSub takes its connection directly.
                await self._pool._give_orphans()
                await self._pubsub.subscribe(channel(self._name))
        except BaseException as e:
            # Whatever cut it short, a subscription half made is not kept.
            self._closed = True
            await self._drop()
            if io_error(e):
                raise take_failure(e, self._pool.pool) from e
            raise

    async def _drop(self) -> None:
        """The subscription's connection closed and back in the pool; under the
        guard."""
        ps = self._pubsub
        conn = getattr(ps, "connection", None)
        if conn is not None:
            ps.connection = None
            conn.clear_connect_callbacks()
            await self._pool.give(conn, clean=False)

    def _wake(self) -> None:
        """Ends the read under way in another task: its transport closes under it."""
        writer = getattr(getattr(self._pubsub, "connection", None), "_writer", None)
        if writer is not None:
            writer.close()

    async def get(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """As ``dlock.Observer.get()``: the next change within ``timeout`` seconds
        (None: without end), or None when none came or the observer is closed."""
        until = deadline(timeout)
        async with self._guard():
            await self._subscribe()
            for wait in self._polls(until):
                try:
                    with _no_stray_cancels():
                        message = await self._pubsub.get_message(timeout=wait)
                    change = self._news(message)
                except _aio.CancelledError:
                    raise  # the subscription stands: what was not read is read next time
                except BaseException as e:
                    err = self._failed_read(e)
                    if err is None:
                        return None  # close() ended the read
                    await self._drop()
                    raise err
                if change is not None:
                    return change
        return None

    async def close(self) -> None:
        """Unsubscribes: closes the subscription's connection (back in the pool). A
        read under way in another task ends with None."""
        self._closed = True
        mu = self._guard()
        if mu.locked():
            self._wake()
        async with mu:
            await self._drop()

    def __aiter__(self) -> AsyncIterator[Leader]:
        return self

    async def __anext__(self) -> Leader:
        change = await self.get()
        if change is None:
            raise StopAsyncIteration
        return change

    async def __aenter__(self) -> "Observer":
        async with self._guard():
            await self._subscribe()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __del__(self) -> None:
        # Dropped without close(): its transport is closed by its loop and the
        # connection goes back to the pool at the pool's next use, as a lock's does.
        try:
            ps = self._pubsub
            conn = getattr(ps, "connection", None)
            if conn is not None:
                ps.connection = None
                conn.clear_connect_callbacks()
                if os.getpid() == self._pid and self._loop is not None:
                    self._pool.orphan(conn, self._loop)
        except Exception:
            pass
