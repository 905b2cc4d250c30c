"""The blocking client: locks, semaphores and stock from dlockd over redis-py.

Threads may share one Client (and so one ``redis.Redis`` and its connection pool): a
session lock takes a connection of its own from the pool for as long as it is held,
so that dlockd ties the lock to that connection alone; every other command takes any
pooled connection for one round trip.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import Any, Dict, List, Optional, Type

import redis

from . import _args
from ._args import DEFAULT_TTL, Name
from ._errors import (
    DlockError,
    InvalidArgument,
    LockLost,
    NotAcquired,
    OutOfStock,
    Unavailable,
)
from ._pool import Pool, broken, connected, exchange, in_step
from ._url import parse as parse_url

__all__ = ["Client", "Lock", "Semaphore", "Stock", "Reservation"]


# Locks ------------------------------------------------------------------------------


class Lock:
    """A lock (or a semaphore's permit) held from dlockd: what ``Client.lock()``,
    ``Client.acquire()`` and ``Semaphore.acquire()`` return.

    A *session lock* (the default) lives on a connection of its own, taken from the
    client's pool: dlockd renews it for as long as that connection is open and
    releases it when it closes (the process dies, the Lock is garbage-collected
    without release). A *detached* one is a lease of its TTL that outlives both, and
    ends with ``release()`` (from anywhere: ``Client.adopt()``) or its TTL.

    Used as a context manager, leaving the block releases it, and raises
    :class:`LockLost` when the release found it no longer held (the block's work was
    not wholly under the lock) and the block itself raised nothing.

    Attributes: ``name`` (str), ``token`` (str, 32 hex characters), ``fence`` (int,
    greater than every earlier holder's: hand it to what the lock protects),
    ``validity`` (seconds of lease left at the grant), ``detached`` (bool).
    """

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
        self._mutex = threading.Lock()
        self._released = False
        self._pid = os.getpid()

    def __repr__(self) -> str:
        kind = "detached" if self.detached else "session"
        state = "released" if self._released else ("lost" if self._session_over() else "held")
        return f"<dlock.Lock {self._what} {self.name!r} fence={self.fence} {kind} {state}>"

    def _session_over(self) -> bool:
        return not self.detached and (self._conn is None or os.getpid() != self._pid)

    def _lose(self) -> None:
        """Its connection closed (or must be): dlockd releases the session lock."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.give(conn, clean=False)

    def _session_call(self, args: List[bytes], command: str) -> bool:
        if not connected(self._conn):
            self._lose()  # closed under it (Client.close(), the pool's disconnect())
            return False
        try:
            return _args.boolean(exchange(self._conn, args), command)
        except BaseException as e:
            if in_step(e):
                raise  # an error reply: the connection, and the lock, are as they were
            self._lose()
            if broken(e):
                return False  # closed by dlockd (-LOST, or as it ended): not held
            raise

    def release(self) -> bool:
        """Releases the lock: True when it was held with this token and is now free,
        False when it was no longer held (released already, its lease ran out, broken,
        or its session ended with its connection).

        Raises :class:`Unavailable` when dlockd or its lock servers could not be asked:
        a session lock's connection is then closed, which makes dlockd release it (or
        the lock servers expire it with its TTL); a detached one ends with its TTL.
        """
        with self._mutex:
            if self._released:
                return False
            self._released = True
            args = [b"UNLOCK", self._name, self.token.encode()]
            if self.detached:
                return _args.boolean(self._pool.call(args), "UNLOCK")
            if self._session_over():
                self._conn = None  # a forked child leaves its parent's connection alone
                return False
            conn, self._conn = self._conn, None
            held = False
            if not connected(conn):
                self._pool.give(conn, clean=False)
                return False
            try:
                held = _args.boolean(exchange(conn, args), "UNLOCK")
                return held
            except DlockError as e:
                if broken(e):
                    return False
                raise
            finally:
                # Only a connection whose lock is known gone goes back as it is.
                self._pool.give(conn, clean=held)

    def extend(self, ttl: float) -> bool:
        """Sets the lease to ``ttl`` seconds from now: True, or False when the lock was
        no longer held. A session lock is renewed with the new TTL from then on
        (dlockd's floor for session locks, 1 s, applies)."""
        ms = _args.ttl_ms(ttl)
        with self._mutex:
            if self._released or self._session_over():
                return False
            args = [b"EXTEND", self._name, self.token.encode(), str(ms).encode()]
            if self.detached:
                return _args.boolean(self._pool.call(args), "EXTEND")
            return self._session_call(args, "EXTEND")

    def held(self) -> bool:
        """Asks dlockd whether the lock is still held with this token on a quorum of
        the lock servers (CHECK: read-only, the lease does not change)."""
        with self._mutex:
            if self._released or self._session_over():
                return False
            args = [b"CHECK", self._name, self.token.encode()]
            if self.detached:
                return _args.boolean(self._pool.call(args), "CHECK")
            return self._session_call(args, "CHECK")

    @property
    def released(self) -> bool:
        """Whether ``release()`` was called, whatever it answered."""
        return self._released

    def __enter__(self) -> "Lock":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._released:
            return  # the block released it itself: the section ended on purpose
        try:
            held = self.release()
        except DlockError:
            if exc_type is None:
                raise
            return  # the block's exception is the one to report
        if not held and exc_type is None:
            raise LockLost(
                f"dlock: {self._what} {self.name!r} was lost before the end of the block: "
                "its work was not wholly under the lock"
            )

    def __del__(self) -> None:
        # A session lock dropped without release(): close its connection, which makes
        # dlockd release it, rather than keep it out of the pool for good.
        try:
            if self._conn is not None and os.getpid() == self._pid:
                self._lose()
        except Exception:
            pass


# The client -------------------------------------------------------------------------


class Client:
    """Locks, semaphores and stock from dlockd, over a ``redis.Redis`` connected to
    dlockd (not to a lock server)::

        client = dlock.Client(redis.Redis(port=7379))
        with client.lock("order:42", ttl=10, wait=5) as lock:
            ...   # lock.fence, for the resource it protects

    Safe to share between threads. Each method is one command, one round trip.

    ``max_hold``: the default MAXHOLD of session locks, in seconds (dlockd releases one
    held longer, and closes its connection, however often renewed; None: dlockd's
    ``--max-hold``). ``label``: the default label of this client's locks (who holds
    them, as operators see it in LOCKS, LOCKINFO and ``dlock list``).
    """

    #: A wait without end: ``client.lock(name, wait=Client.FOREVER)``.
    FOREVER = _args.FOREVER

    def __init__(
        self,
        redis_client: "redis.Redis",
        *,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> None:
        pool = getattr(redis_client, "connection_pool", None)
        if pool is None or not hasattr(pool, "get_connection"):
            raise InvalidArgument(
                f"dlock: Client takes a redis.Redis connected to dlockd, not {type(redis_client).__name__}"
            )
        if type(redis_client).__module__.startswith("redis.asyncio"):
            raise InvalidArgument("dlock: a redis.asyncio client goes to dlock.asyncio.Client")
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
        """A client connected by URL: ``dlockd://[:PASSWORD@]HOST[:PORT][?OPTIONS]``
        (port 7379 by default), ``dlockds://...`` over TLS, or
        ``dlockd+unix:///PATH[?OPTIONS]``. OPTIONS: ``timeout`` (seconds to connect
        and to wait for a reply, default 5), ``name`` (the connection's name and the
        default label of its locks), ``maxhold`` (ms), ``cafile``, ``cert``, ``key``
        (TLS). ``redis_kwargs`` go to ``redis.Redis`` as they are (``max_connections``,
        say), over what the URL says.

        Connects at once: raises :class:`Unavailable` when dlockd cannot be reached,
        :class:`AuthFailed` when it refuses the password, :class:`InvalidArgument` for
        a URL it does not take. ``close()`` (or ``with``) closes its connections.
        """
        u = parse_url(url)
        kw = u.redis_kwargs()
        kw.update(redis_kwargs)
        r = redis.Redis(**kw)
        client = cls(r, max_hold=u.max_hold, label=u.name)
        client._owned = True
        try:
            client._pool.give(client._pool.take(b"PING"))
        except DlockError as e:
            r.connection_pool.disconnect()
            if isinstance(e, Unavailable):
                why = e.__cause__
                raise Unavailable(f"dlock: cannot connect to dlockd at {u.where}: {why}") from why
            raise
        return client

    def close(self) -> None:
        """Closes the connections of a client made by ``from_url()`` (the session
        locks still held on them are released by dlockd). A client made over the
        application's ``redis.Redis`` leaves it alone."""
        if self._owned:
            self.redis.connection_pool.disconnect()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def acquire(
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
        """Takes the lock ``name``: a :class:`Lock`, or None when another holder kept
        it through the wait.

        ``ttl``: the lease in seconds (0.01 to 2147483.647): how long the lock lasts if
        nobody renews or releases it; a session lock (the default) is renewed by
        dlockd while its connection lives, and dlockd's floor for one is 1 s.
        ``wait``: 0 tries once; else waits up to this many seconds for the holder to
        release it (no polling: dlockd answers when it does); ``dlock.FOREVER``
        without end. A negative wait, or None, is an InvalidArgument.
        ``shared``: a shared (read) lock. ``fair``: first come first served among the
        waiters. ``detached``: a plain lease, not renewed, that outlives the
        connection. ``max_hold``: a session lock held this long (seconds) is released
        however often renewed. ``label``: who holds it, as operators see it.
        """
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
        grant, conn = self._pool.acquire(args, wait_ms, detached)
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
    ) -> Lock:
        """Takes the lock ``name`` as ``acquire()`` does, or raises
        :class:`NotAcquired` when not acquired within the wait. Meant for ``with``::

            with client.lock("order:42", ttl=10, wait=5) as lock:
                ...
        """
        lock = self.acquire(
            name, ttl, wait, shared=shared, fair=fair, detached=detached, max_hold=max_hold, label=label
        )
        if lock is None:
            raise NotAcquired(_args.not_acquired(name, wait))
        return lock

    def adopt(self, name: Name, token: str, fence: int = 0) -> Lock:
        """A detached lock taken elsewhere (another process), by its name and token: to
        release, extend or check it here. ``fence``: the one its grant gave, if known."""
        return Lock(self._pool, _args.name(name), _args.token(token), fence, 0, True)

    def semaphore(
        self, name: Name, permits: int, *, ttl: float = DEFAULT_TTL, wait: float = 0, fair: bool = False
    ) -> "Semaphore":
        """The semaphore ``name`` of ``permits`` permits (every user of a name passes
        the same). ``ttl``, ``wait`` and ``fair`` are the defaults of its ``with``."""
        return Semaphore(self, _args.name(name, "semaphore name"), _args.permits(permits), ttl, wait, fair)

    def stock(self, sku: Name) -> "Stock":
        """The stock of the SKU ``sku``, sold through reservations with a lease."""
        return Stock(self._pool, _args.name(sku, "SKU"))

    def info(self, name: Name) -> Dict[str, Any]:
        """What dlockd knows of the lock ``name``: ``state`` ("held" or "free"),
        ``holder`` (who: a str; for shared holders a list of them, the longest lease
        first; None when free), ``remaining_ms``, ``fence`` (the last one issued), and
        ``shared`` (how many shared holders, when there are)."""
        return _args.info(self._pool.call([b"LOCKINFO", _args.name(name)]))


# Semaphores -------------------------------------------------------------------------


class Semaphore:
    """A semaphore of dlockd: at most ``permits`` holders of the name at once (a
    permit is a shared holder of the name; an exclusive lock of the name excludes
    them all). More than one permit needs dlockd over one lock server.

    ``acquire()`` returns a permit (a :class:`Lock`) or None; ``permit()`` raises
    :class:`NotAcquired` instead; ``with semaphore as permit:`` takes one with the
    semaphore's defaults and gives it back at the end of the block.
    """

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
        self._held = threading.local()

    def __repr__(self) -> str:
        return f"<dlock.Semaphore {self.name!r} permits={self.permits}>"

    def acquire(
        self,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        *,
        fair: Optional[bool] = None,
        detached: bool = False,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> Optional[Lock]:
        """Takes a permit: a :class:`Lock` (``release()`` gives it back), or None when
        none was free within the wait. The parameters are ``Client.acquire()``'s;
        those not given are the semaphore's defaults."""
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
        grant, conn = c._pool.acquire(args, wait_ms, detached)
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
    ) -> Lock:
        """A permit as ``acquire()`` takes it, or :class:`NotAcquired`: for ``with``."""
        p = self.acquire(ttl, wait, fair=fair, detached=detached, max_hold=max_hold, label=label)
        if p is None:
            w = self._defaults[1] if wait is None else wait
            raise NotAcquired(_args.no_permit(self.name, self.permits, w))
        return p

    def __enter__(self) -> Lock:
        p = self.permit()
        stack = getattr(self._held, "stack", None)
        if stack is None:
            stack = self._held.stack = []
        stack.append(p)
        return p

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._held.stack.pop().__exit__(exc_type, exc, tb)


# Stock ------------------------------------------------------------------------------


class Reservation:
    """Units of a SKU reserved for a lease (``Stock.reserve()``). Not tied to the
    connection that made it: another process can commit it by its id
    (``Stock.reservation(id)``).

    As a context manager, the end of the block cancels it unless it was committed
    (or canceled) inside: a buyer that fails before paying gives the units back at
    once rather than at the end of the lease.
    """

    def __init__(self, pool: Pool, sku: bytes, rid: str, qty: Optional[int]) -> None:
        self._pool = pool
        self._sku = sku
        self.sku: str = _args.text(sku)
        self.id: str = rid
        self.qty: Optional[int] = qty
        self.settled = False

    def __repr__(self) -> str:
        return f"<dlock.Reservation {self.sku!r} id={self.id} qty={self.qty}>"

    def _call(self, sub: bytes, *extra: bytes) -> bool:
        reply = self._pool.call([b"STOCK", sub, self._sku, self.id.encode(), *extra])
        return _args.boolean(reply, f"STOCK {sub.decode()}")

    def commit(self) -> bool:
        """The units are sold, for good: True (again on a repeated commit, which counts
        nothing more), or False when the reservation was lost (canceled, or its lease
        ran out and its units went back to the stock)."""
        ok = self._call(b"COMMIT")
        self.settled = True
        return ok

    def cancel(self) -> bool:
        """The units go back to the stock: True, or False when it was lost or
        committed."""
        ok = self._call(b"CANCEL")
        self.settled = True
        return ok

    def extend(self, lease: float) -> bool:
        """Sets the lease to ``lease`` seconds from now (a slow payment): True, or False
        when lost."""
        return self._call(b"EXTEND", str(_args.ttl_ms(lease, "lease")).encode())

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.settled:
            return
        try:
            self.cancel()
        except DlockError:
            if exc_type is None:
                raise


class Stock:
    """The stock of one SKU, sold through reservations with a lease: a buyer reserves
    units, then commits them (sold, for good) or cancels them (back in stock); a
    reservation nobody commits gives its units back when its lease ends. At every
    instant stock = sold + reserved + available.

    The state (``status()``, ``set()``, ``add()``) is a dict of ints: ``stock``,
    ``available``, ``reserved``, ``sold``, ``reservations`` (live ones), ``waiters``
    (reserves waiting).
    """

    def __init__(self, pool: Pool, sku: bytes) -> None:
        self._pool = pool
        self._sku = sku
        self.sku: str = _args.text(sku)

    def __repr__(self) -> str:
        return f"<dlock.Stock {self.sku!r}>"

    def _state(self, sub: bytes, *extra: bytes) -> Dict[str, int]:
        reply = self._pool.call([b"STOCK", sub, self._sku, *extra])
        return _args.stock_state(reply, f"STOCK {sub.decode()}")

    def set(self, qty: int) -> Dict[str, int]:
        """Sets the stock to ``qty`` units, sold and reserved ones included (a qty below
        them is refused with a CommandError and changes nothing). Returns the state."""
        return self._state(b"SET", str(_args.qty(qty, "qty", 0)).encode())

    def add(self, delta: int) -> Dict[str, int]:
        """Adds ``delta`` units (negative: takes available ones away). Returns the
        state."""
        return self._state(b"ADD", str(_args.delta(delta)).encode())

    def status(self) -> Dict[str, int]:
        """The SKU's state (a SKU never set reads as all zeros)."""
        return self._state(b"STATUS")

    def reserve(self, qty: int, lease: float = DEFAULT_TTL, wait: float = 0) -> Reservation:
        """Reserves ``qty`` units, all or none, for a lease of ``lease`` seconds:
        ``commit()`` them once paid for, or ``cancel()``. With ``wait``, waits (in
        arrival order, without polling) for units a cancel, an expired lease or a
        restock frees.

        Raises :class:`OutOfStock` when the units could not be had within the wait,
        saying whether the SKU is sold out or its units are only reserved at the
        moment.
        """
        args, wait_ms = _args.reserve_command(self._sku, qty, lease, wait)
        n = int(args[3])
        rid = _args.reservation_id(self._pool.call(args, wait_ms))
        if rid is not None:
            return Reservation(self._pool, self._sku, rid, n)
        raise OutOfStock(*_args.out_of_stock(self.sku, n, self.status()))

    def reservation(self, rid: str) -> Reservation:
        """A reservation made elsewhere, by its id: to commit or cancel it."""
        return Reservation(self._pool, self._sku, _args.token(rid, "a reservation id"), None)
