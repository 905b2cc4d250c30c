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
import os
import weakref
from typing import Any, Dict, List, Optional

import redis.asyncio

from . import _args
from ._args import DEFAULT_TTL, Name
from ._errors import DlockError, InvalidArgument, LockLost, NotAcquired, OutOfStock
from ._aio_pool import Pool, broken, connected, exchange, in_step
from ._url import parse as parse_url

__all__ = ["Client", "Lock", "Semaphore", "Stock", "Reservation"]


class Lock:
    """A lock (or a semaphore's permit) held from dlockd, as ``dlock.Lock`` but with
    coroutines: ``await lock.release()``, ``await lock.extend(ttl)``,
    ``await lock.held()``, ``async with lock:``. Attributes: ``name``, ``token``,
    ``fence``, ``validity`` (seconds), ``detached``."""

    def __init__(
        self,
        pool: Pool,
        name: bytes,
        token: str,
        fence: int,
        validity_ms: int,
        detached: bool,
        conn: Any = None,
        what: str = "lock",
    ) -> None:
        self._pool = pool
        self._name = name
        self.name: str = _args.text(name)
        self.token: str = token
        self.fence: int = fence
        self.validity: float = validity_ms / 1000
        self.detached: bool = detached
        self._conn = conn
        self._what = what
        self._mutex = _aio.Lock()
        self._released = False
        self._pid = os.getpid()

    def __repr__(self) -> str:
        kind = "detached" if self.detached else "session"
        state = "released" if self._released else ("lost" if self._session_over() else "held")
        return f"<dlock.asyncio.Lock {self._what} {self.name!r} fence={self.fence} {kind} {state}>"

    def _session_over(self) -> bool:
        return not self.detached and (self._conn is None or os.getpid() != self._pid)

    async def _lose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.give(conn, clean=False)

    async def _session_call(self, args: List[bytes], command: str) -> bool:
        if not connected(self._conn):
            await self._lose()
            return False
        try:
            return _args.boolean(await exchange(self._conn, args), command)
        except BaseException as e:
            if in_step(e):
                raise
            await self._lose()
            if broken(e):
                return False
            raise

    async def release(self) -> bool:
        """As ``dlock.Lock.release()``: True, or False when it was no longer held."""
        async with self._mutex:
            if self._released:
                return False
            self._released = True
            args = [b"UNLOCK", self._name, self.token.encode()]
            if self.detached:
                return _args.boolean(await self._pool.call(args), "UNLOCK")
            if self._session_over():
                self._conn = None
                return False
            conn, self._conn = self._conn, None
            held = False
            if not connected(conn):
                await self._pool.give(conn, clean=False)
                return False
            try:
                held = _args.boolean(await exchange(conn, args), "UNLOCK")
                return held
            except DlockError as e:
                if broken(e):
                    return False
                raise
            finally:
                await self._pool.give(conn, clean=held)

    async def extend(self, ttl: float) -> bool:
        """As ``dlock.Lock.extend()``: the lease set to ``ttl`` seconds from now."""
        ms = _args.ttl_ms(ttl)
        async with self._mutex:
            if self._released or self._session_over():
                return False
            args = [b"EXTEND", self._name, self.token.encode(), str(ms).encode()]
            if self.detached:
                return _args.boolean(await self._pool.call(args), "EXTEND")
            return await self._session_call(args, "EXTEND")

    async def held(self) -> bool:
        """As ``dlock.Lock.held()``: CHECK, read-only."""
        async with self._mutex:
            if self._released or self._session_over():
                return False
            args = [b"CHECK", self._name, self.token.encode()]
            if self.detached:
                return _args.boolean(await self._pool.call(args), "CHECK")
            return await self._session_call(args, "CHECK")

    @property
    def released(self) -> bool:
        return self._released

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._released:
            return
        try:
            held = await self.release()
        except DlockError:
            if exc_type is None:
                raise
            return
        if not held and exc_type is None:
            raise LockLost(
                f"dlock: {self._what} {self.name!r} was lost before the end of the block: "
                "its work was not wholly under the lock"
            )

    def __del__(self) -> None:
        # Dropped without release(): close the transport (no await here), which makes
        # dlockd release the session lock. Best effort: the loop may be gone.
        try:
            conn = self._conn
            if conn is not None and os.getpid() == self._pid and conn._writer is not None:
                conn._writer.close()
        except Exception:
            pass


class _Acquiring:
    """What ``Client.lock()`` and ``Semaphore.permit()`` return: awaitable (the Lock,
    or NotAcquired) and an async context manager (the lock held for the block)."""

    __slots__ = ("_factory", "_lock")

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self._lock: Optional[Lock] = None

    def __await__(self) -> Any:
        return self._factory().__await__()

    async def __aenter__(self) -> Lock:
        self._lock = await self._factory()
        return self._lock

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._lock is not None
        await self._lock.__aexit__(exc_type, exc, tb)


class Client:
    """``dlock.Client`` over ``redis.asyncio.Redis``: the same methods, as coroutines
    (``lock()`` returns an awaitable async context manager)."""

    FOREVER = _args.FOREVER

    def __init__(
        self,
        redis_client: "redis.asyncio.Redis",
        *,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> None:
        pool = getattr(redis_client, "connection_pool", None)
        if pool is None or not hasattr(pool, "get_connection"):
            raise InvalidArgument(
                "dlock: asyncio.Client takes a redis.asyncio.Redis connected to dlockd, "
                f"not {type(redis_client).__name__}"
            )
        if not _aio.iscoroutinefunction(pool.get_connection):
            raise InvalidArgument("dlock: a blocking redis.Redis goes to dlock.Client")
        if max_hold is not None:
            _args.duration_ms(max_hold, "max_hold")
        if label is not None:
            _args.label(label)
        self.redis = redis_client
        self._pool = Pool(pool)
        self._max_hold = max_hold
        self._label = label
        self._owned = False

    @classmethod
    def from_url(cls, url: str, **redis_kwargs: Any) -> "Client":
        """A client for a dlockd URL (as ``dlock.Client.from_url``). It connects when
        first used (``await client.ping()`` to connect now); ``await client.close()``
        closes its connections."""
        u = parse_url(url)
        kw = u.redis_kwargs()
        kw.update(redis_kwargs)
        client = cls(redis.asyncio.Redis(**kw), max_hold=u.max_hold, label=u.name)
        client._owned = True
        return client

    async def ping(self) -> None:
        """Connects (and authenticates) one connection of the pool: Unavailable or
        AuthFailed now rather than at the first lock."""
        await self._pool.give(await self._pool.take(b"PING"))

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
        raw = _args.name(name)
        args, wait_ms = _args.acquire_command(
            [b"LOCK", raw],
            ttl,
            wait,
            shared=shared,
            fair=fair,
            detached=detached,
            max_hold=max_hold if max_hold is not None else (None if detached else self._max_hold),
            label_=label if label is not None else self._label,
        )
        grant, conn = await self._pool.acquire(args, wait_ms, detached)
        if grant is None:
            return None
        return Lock(self._pool, raw, grant[0], grant[1], grant[2], detached, conn)

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
    ) -> _Acquiring:
        """``async with client.lock(name, ...) as lock:`` (or ``await
        client.lock(...)``): the lock, or :class:`NotAcquired` when not acquired
        within the wait. The arguments are checked at once."""
        _args.name(name)
        _args.acquire_command([b"LOCK", b"-"], ttl, wait, detached=detached, max_hold=max_hold, label_=label)

        async def take() -> Lock:
            lock = await self.acquire(
                name, ttl, wait, shared=shared, fair=fair, detached=detached, max_hold=max_hold, label=label
            )
            if lock is None:
                raise NotAcquired(_args.not_acquired(name, wait))
            return lock

        return _Acquiring(take)

    def adopt(self, name: Name, token: str, fence: int = 0) -> Lock:
        return Lock(self._pool, _args.name(name), _args.token(token), fence, 0, True)

    def semaphore(
        self, name: Name, permits: int, *, ttl: float = DEFAULT_TTL, wait: float = 0, fair: bool = False
    ) -> "Semaphore":
        return Semaphore(self, _args.name(name, "semaphore name"), _args.permits(permits), ttl, wait, fair)

    def stock(self, sku: Name) -> "Stock":
        return Stock(self._pool, _args.name(sku, "SKU"))

    async def info(self, name: Name) -> Dict[str, Any]:
        """As ``dlock.Client.info()``."""
        return _args.info(await self._pool.call([b"LOCKINFO", _args.name(name)]))


class Semaphore:
    """As ``dlock.Semaphore``: ``await sem.acquire()`` (a permit or None),
    ``async with sem.permit(...) as p``, ``async with sem as p``."""

    def __init__(
        self, client: Client, name: bytes, permits: int, ttl: float, wait: float, fair: bool
    ) -> None:
        _args.ttl_ms(ttl)
        _args.wait_ms(wait)
        self._client = client
        self._name = name
        self.name: str = _args.text(name)
        self.permits = permits
        self._defaults = (ttl, wait, fair)
        self._held: "weakref.WeakKeyDictionary[Any, List[Lock]]" = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<dlock.asyncio.Semaphore {self.name!r} permits={self.permits}>"

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
        d_ttl, d_wait, d_fair = self._defaults
        c = self._client
        args, wait_ms = _args.acquire_command(
            [b"SEM", b"ACQUIRE", self._name, str(self.permits).encode()],
            d_ttl if ttl is None else ttl,
            d_wait if wait is None else wait,
            fair=d_fair if fair is None else fair,
            detached=detached,
            max_hold=max_hold if max_hold is not None else (None if detached else c._max_hold),
            label_=label if label is not None else c._label,
        )
        grant, conn = await c._pool.acquire(args, wait_ms, detached)
        if grant is None:
            return None
        return Lock(c._pool, self._name, grant[0], grant[1], grant[2], detached, conn, "permit of semaphore")

    def permit(
        self,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        *,
        fair: Optional[bool] = None,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> _Acquiring:
        async def take() -> Lock:
            p = await self.acquire(ttl, wait, fair=fair, detached=detached, max_hold=max_hold, label=label)
            if p is None:
                w = self._defaults[1] if wait is None else wait
                raise NotAcquired(_args.no_permit(self.name, self.permits, w))
            return p

        return _Acquiring(take)

    async def __aenter__(self) -> Lock:
        p = await self.permit()
        self._held.setdefault(_aio.current_task(), []).append(p)
        return p

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._held[_aio.current_task()].pop().__aexit__(exc_type, exc, tb)


class Reservation:
    """As ``dlock.Reservation``, with coroutines; ``async with`` cancels it at the end
    of the block unless it was committed (or canceled)."""

    def __init__(self, pool: Pool, sku: bytes, rid: str, qty: Optional[int]) -> None:
        self._pool = pool
        self._sku = sku
        self.sku: str = _args.text(sku)
        self.id: str = rid
        self.qty: Optional[int] = qty
        self.settled = False

    def __repr__(self) -> str:
        return f"<dlock.asyncio.Reservation {self.sku!r} id={self.id} qty={self.qty}>"

    async def _call(self, sub: bytes, *extra: bytes) -> bool:
        reply = await self._pool.call([b"STOCK", sub, self._sku, self.id.encode(), *extra])
        return _args.boolean(reply, f"STOCK {sub.decode()}")

    async def commit(self) -> bool:
        ok = await self._call(b"COMMIT")
        self.settled = True
        return ok

    async def cancel(self) -> bool:
        ok = await self._call(b"CANCEL")
        self.settled = True
        return ok

    async def extend(self, lease: float) -> bool:
        return await self._call(b"EXTEND", str(_args.ttl_ms(lease, "lease")).encode())

    async def __aenter__(self) -> "Reservation":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.settled:
            return
        try:
            await self.cancel()
        except DlockError:
            if exc_type is None:
                raise


class Stock:
    """As ``dlock.Stock``, with coroutines."""

    def __init__(self, pool: Pool, sku: bytes) -> None:
        self._pool = pool
        self._sku = sku
        self.sku: str = _args.text(sku)

    def __repr__(self) -> str:
        return f"<dlock.asyncio.Stock {self.sku!r}>"

    async def _state(self, sub: bytes, *extra: bytes) -> Dict[str, int]:
        reply = await self._pool.call([b"STOCK", sub, self._sku, *extra])
        return _args.stock_state(reply, f"STOCK {sub.decode()}")

    async def set(self, qty: int) -> Dict[str, int]:
        return await self._state(b"SET", str(_args.qty(qty, "qty", 0)).encode())

    async def add(self, delta: int) -> Dict[str, int]:
        return await self._state(b"ADD", str(_args.delta(delta)).encode())

    async def status(self) -> Dict[str, int]:
        return await self._state(b"STATUS")

    async def reserve(self, qty: int, lease: float = DEFAULT_TTL, wait: float = 0) -> Reservation:
        args, wait_ms = _args.reserve_command(self._sku, qty, lease, wait)
        n = int(args[3])
        rid = _args.reservation_id(await self._pool.call(args, wait_ms))
        if rid is not None:
            return Reservation(self._pool, self._sku, rid, n)
        raise OutOfStock(*_args.out_of_stock(self.sku, n, await self.status()))

    def reservation(self, rid: str) -> Reservation:
        return Reservation(self._pool, self._sku, _args.token(rid, "a reservation id"), None)
