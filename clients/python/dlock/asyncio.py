"""The asyncio client: ``dlock.asyncio.Client`` over ``redis.asyncio``, with the API of
``dlock.Client`` in coroutines::

    client = dlock.asyncio.Client(redis.asyncio.Redis(port=7379))
    async with client.lock("order:42", ttl=10, wait=5) as lock:
        ...

As in the blocking client, a session lock takes a connection of its own from the
pool for as long as it is held, so tasks may share one Client. A task cancelled while
it waits for a lock (``asyncio.wait_for``, ``asyncio.timeout``, ``task.cancel()``)
holds nothing afterwards: its connection is closed, which makes dlockd drop the waiter
and release a grant that came in meanwhile.
"""

from __future__ import annotations

import asyncio as _aio
import weakref
from typing import Any, Awaitable, Callable, Dict, Generator, Generic, List, Optional, Protocol, TypeVar

import redis.asyncio

from . import _args
from ._aio_elect import Leader, Leadership, Observer
from ._aio_pool import Pool, exchange
from ._args import DEFAULT_TTL, FOREVER, Name
from ._base import (
    ClientBase,
    LockBase,
    ReservationBase,
    SemaphoreBase,
    StockBase,
    answered,
    block_end,
    check_client,
    pong,
)
from ._errors import NotAcquired, broken, in_step
from ._leader import SeatMixin, leader_info, not_elected

__all__ = [
    "Client",
    "Lock",
    "Semaphore",
    "Stock",
    "Reservation",
    "Acquiring",
    "Leadership",
    "Observer",
    "Leader",
]


class _Held(Protocol):
    """What Acquiring hands out: a Lock or a Leadership, each ended by its own
    ``async with`` exit."""

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


_H = TypeVar("_H", bound=_Held)


class Lock(LockBase):
    """A lock (or a semaphore's permit) held from dlockd, as ``dlock.Lock`` but with
    coroutines: ``await lock.release()``, ``await lock.extend(ttl)``,
    ``await lock.held()``, ``async with lock:``. Read-only attributes: ``name``,
    ``token``, ``fence``, ``validity`` (seconds left at the grant), ``detached``,
    ``released``."""

    _prefix = "dlock.asyncio"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Made at its first use, in the loop that uses it: before Python 3.10 an
        # asyncio.Lock binds to the loop current when it is made (adopt() is not a
        # coroutine, and may run outside any loop).
        self._mutex: Optional[_aio.Lock] = None
        # The loop of a session lock's connection: the one to close it (__del__).
        self._loop = _aio.get_running_loop() if self._conn is not None else None

    def _guard(self) -> _aio.Lock:
        if self._mutex is None:
            self._mutex = _aio.Lock()
        return self._mutex

    async def _lose(self, clean: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.give(conn, clean=clean)

    async def _ask(self, args: List[bytes], command: Optional[str] = None) -> bool:
        """As dlock.Lock._ask."""
        if self._detached:
            return _args.boolean(await self._pool.call(args), command or args[0].decode())
        return await self._session_call(args, command)

    async def _session_call(self, args: List[bytes], command: Optional[str] = None) -> bool:
        if not self._linked(self._conn):
            await self._lose()
            return False
        try:
            return _args.boolean(await exchange(self._conn, args, own=True), command or args[0].decode())
        except BaseException as e:
            if in_step(e):
                raise
            await self._lose()
            if broken(e):
                return False
            raise

    async def release(self) -> bool:
        """As ``dlock.Lock.release()``: True, or False when it was no longer held."""
        async with self._guard():
            if not self._unlocking():
                return False
            held = False
            try:
                held = await self._ask(self._unlock_args(), "UNLOCK")
                self._released = True
                return held
            finally:
                await self._lose(clean=held)

    async def extend(self, ttl: float) -> bool:
        """As ``dlock.Lock.extend()``: the lease set to ``ttl`` seconds from now."""
        args = self._extend_args(ttl)
        async with self._guard():
            if self._released or self._session_over():
                return False
            return await self._ask(args)

    async def held(self) -> bool:
        """As ``dlock.Lock.held()``: CHECK, read-only."""
        async with self._guard():
            if self._released or self._session_over():
                return False
            return await self._ask(self._check_args())

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._released:
            return
        with block_end(exc_type):
            if not await self.release() and exc_type is None:
                raise self._lost()

    def _orphan(self, conn: Any) -> None:
        # Its transport is closed by the loop of the session lock's connection.
        self._pool.orphan(conn, self._loop)


class LeaderSeat(SeatMixin, Lock):
    """The session lock a Leadership is kept in: RESIGN rather than UNLOCK."""


class Acquiring(Generic[_H]):
    """What ``Client.lock()``, ``Semaphore.permit()`` and ``Client.elect()`` return:
    awaitable (the Lock, or the Leadership; or NotAcquired) and an async context
    manager (held for the block, released or resigned at its end)."""

    __slots__ = ("_factory", "_lock")

    def __init__(self, factory: Callable[[], Awaitable[_H]]) -> None:
        self._factory = factory
        self._lock: Optional[_H] = None

    def __await__(self) -> Generator[Any, None, _H]:
        return self._factory().__await__()

    async def __aenter__(self) -> _H:
        self._lock = await self._factory()
        return self._lock

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(exc_type, exc, tb)


class Semaphore(SemaphoreBase):
    """As ``dlock.Semaphore``: ``await sem.acquire()`` (a permit or None),
    ``async with sem.permit(...) as p``, ``async with sem as p``."""

    _prefix = "dlock.asyncio"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._held: "weakref.WeakKeyDictionary[Any, List[Lock]]" = weakref.WeakKeyDictionary()

    async def acquire(
        self,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        *,
        fair: Optional[bool] = None,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> Optional[Lock]:
        return await self._client._pool.acquire(self._request(ttl, wait, fair, detached, max_hold, label))

    def permit(
        self,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        *,
        fair: Optional[bool] = None,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> Acquiring[Lock]:
        req = self._request(ttl, wait, fair, detached, max_hold, label)  # checked at once

        async def take() -> Lock:
            p = await self._client._pool.acquire(req)
            if p is None:
                raise self._none_free(wait)
            return p

        return Acquiring(take)

    async def __aenter__(self) -> Lock:
        p = await self.permit()
        self._held.setdefault(_aio.current_task(), []).append(p)
        return p

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._held[_aio.current_task()].pop().__aexit__(exc_type, exc, tb)


class Reservation(ReservationBase):
    """As ``dlock.Reservation``, with coroutines; ``async with`` cancels it at the end
    of the block unless it was committed (or canceled)."""

    _prefix = "dlock.asyncio"

    async def _call(self, args: List[bytes]) -> bool:
        return answered(args, await self._pool.call(args))

    async def commit(self) -> bool:
        ok = await self._call(self._command(b"COMMIT"))
        self._settled = True
        return ok

    async def cancel(self) -> bool:
        ok = await self._call(self._command(b"CANCEL"))
        self._settled = True
        return ok

    async def extend(self, lease: float) -> bool:
        return await self._call(self._extend_args(lease))

    async def __aenter__(self) -> "Reservation":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._settled:
            return
        with block_end(exc_type):
            await self.cancel()


class Stock(StockBase):
    """As ``dlock.Stock``, with coroutines."""

    _prefix = "dlock.asyncio"
    _Reservation = Reservation

    async def _call(self, args: List[bytes]) -> Dict[str, int]:
        return self._state(args, await self._pool.call(args))

    async def set(self, qty: int) -> Dict[str, int]:
        return await self._call(self._set_args(qty))

    async def add(self, delta: int) -> Dict[str, int]:
        return await self._call(self._add_args(delta))

    async def status(self) -> Dict[str, int]:
        return await self._call(self._command(b"STATUS"))

    async def reserve(self, qty: int, lease: float = DEFAULT_TTL, wait: float = 0) -> Reservation:
        args, wait_ms = _args.reserve_command(self._sku, qty, lease, wait)
        r = self._reserved(args, await self._pool.call(args, wait_ms))
        if r is None:
            raise self._refused(args, await self.status())
        return r


class Client(ClientBase):
    """``dlock.Client`` over ``redis.asyncio.Redis``: the same methods, as coroutines
    (``lock()`` returns an :class:`Acquiring`: awaitable, and an async context
    manager)."""

    _prefix = "dlock.asyncio"
    _Lock = Lock
    _Semaphore = Semaphore
    _Stock = Stock
    _Seat = LeaderSeat
    _Leadership = Leadership

    def __init__(
        self,
        redis_client: "redis.asyncio.Redis",
        *,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> None:
        pool = check_client(redis_client, asyncio=True)
        super().__init__(redis_client, Pool(pool), max_hold, label)

    @classmethod
    def from_url(cls, url: str, **redis_kwargs: Any) -> "Client":
        """A client for a dlockd URL (as ``dlock.Client.from_url``). It connects when
        first used (``await client.ping()`` to connect now); ``await client.close()``
        closes its connections."""
        return cls._by_url(url, redis.asyncio.Redis, redis_kwargs)[0]

    async def ping(self) -> None:
        """A PING to dlockd (connecting first): Unavailable or AuthFailed now rather
        than at the first lock."""
        pong(await self._pool.call([b"PING"]))

    async def close(self) -> None:
        """Closes the connections of a client made by ``from_url()``."""
        if self._owned:
            await self.redis.connection_pool.disconnect()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def acquire(
        self,
        name: Name,
        ttl: float = DEFAULT_TTL,
        wait: float = 0,
        *,
        shared: bool = False,
        fair: bool = False,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> Optional[Lock]:
        """As ``dlock.Client.acquire()``: a Lock, or None when not acquired in time."""
        return await self._pool.acquire(
            self._lock_request(
                name, ttl, wait, shared=shared, fair=fair, detached=detached, max_hold=max_hold, label=label
            )
        )

    def lock(
        self,
        name: Name,
        ttl: float = DEFAULT_TTL,
        wait: float = 0,
        *,
        shared: bool = False,
        fair: bool = False,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> Acquiring[Lock]:
        """``async with client.lock(name, ...) as lock:`` (or ``await
        client.lock(...)``): the lock, or :class:`NotAcquired` when not acquired
        within the wait. The arguments are checked at once."""
        req = self._lock_request(
            name, ttl, wait, shared=shared, fair=fair, detached=detached, max_hold=max_hold, label=label
        )

        async def take() -> Lock:
            lock = await self._pool.acquire(req)
            if lock is None:
                raise NotAcquired(_args.not_acquired(name, wait))
            return lock

        return Acquiring(take)

    async def info(self, name: Name) -> Dict[str, Any]:
        """As ``dlock.Client.info()``."""
        return _args.info(await self._pool.call([b"LOCKINFO", _args.name_bytes(name)]))

    def elect(
        self,
        name: Name,
        *,
        value: Name = "",
        ttl: float = DEFAULT_TTL,
        wait: float = FOREVER,
        fair: bool = False,
        label: Optional[str] = None,
    ) -> Acquiring[Leadership]:
        """``async with client.elect(name, value=...) as lead:`` (or ``await
        client.elect(...)``): campaigns as ``dlock.Client.elect()`` does, for a
        :class:`Leadership`, or :class:`NotAcquired` when not elected within the
        wait (``dlock.FOREVER`` by default). A cancelled campaign leaves nothing: its
        connection is closed, which withdraws it. The arguments are checked at once."""
        req = self._elect_request(name, value, ttl, wait, fair, label)

        async def take() -> Leadership:
            lead = await self._pool.acquire(req)
            if lead is None:
                raise NotAcquired(not_elected(name, wait))
            return lead

        return Acquiring(take)

    async def leader(self, name: Name) -> Optional[Dict[str, Any]]:
        """As ``dlock.Client.leader()``: None, or ``value``, ``holder``, ``term``,
        ``remaining_ms``."""
        return leader_info(await self._pool.call(self._leader_args(name)))

    def observe(self, name: Name) -> Observer:
        """An :class:`Observer` of who leads ``name``: ``async with
        client.observe(name) as changes: async for leader in changes:`` (a
        :class:`Leader` each, the state at the subscription first; value None when no
        one leads)."""
        return Observer(self.redis, self._pool, _args.name_bytes(name, "election name"))
