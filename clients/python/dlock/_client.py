"""The blocking client: locks, semaphores and stock from dlockd over redis-py.

Threads may share one Client (and so one ``redis.Redis`` and its connection pool): a
session lock takes a connection of its own from the pool for as long as it is held,
so that dlockd ties the lock to that connection alone; every other command takes any
pooled connection for one round trip.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Dict, List, Optional, Type

import redis

from . import _args
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
from ._elect import Leadership, Observer
from ._errors import DlockError, NotAcquired, Unavailable, broken, in_step
from ._leader import SeatMixin, leader_info, not_elected
from ._pool import Pool, exchange

__all__ = ["Client", "Lock", "Semaphore", "Stock", "Reservation", "Leadership", "Observer"]


# Locks ------------------------------------------------------------------------------


class Lock(LockBase):
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

    Read-only attributes: ``name`` (str), ``token`` (str, 32 hex characters),
    ``fence`` (int, greater than every earlier holder's: hand it to what the lock
    protects), ``validity`` (the seconds of lease left at the grant: a snapshot, not
    updated by renewals), ``detached`` (bool), ``released``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._mutex = threading.Lock()

    def _lose(self, clean: bool = False) -> None:
        """The session is over: its connection back in the pool, closed first (dlockd
        releases the session lock) unless ``clean`` (its lock is known gone)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.give(conn, clean=clean)

    def _ask(self, args: List[bytes], command: Optional[str] = None) -> bool:
        """UNLOCK, EXTEND or CHECK: on any pooled connection for a detached lock, on its
        own connection for a session lock. ``command``: what a reply that is not 1 or 0
        is said to be the reply of (the command's name by default)."""
        if self._detached:
            return _args.boolean(self._pool.call(args), command or args[0].decode())
        return self._session_call(args, command)

    def _session_call(self, args: List[bytes], command: Optional[str] = None) -> bool:
        if not self._linked(self._conn):
            self._lose()  # closed, or connected again, under it: the session is over
            return False
        try:
            return _args.boolean(exchange(self._conn, args, own=True), command or args[0].decode())
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
        the lock servers expire it with its TTL); a detached one may be released again
        (or ends with its TTL).
        """
        with self._mutex:
            if not self._unlocking():
                return False
            held = False
            try:
                held = self._ask(self._unlock_args(), "UNLOCK")
                self._released = True
                return held
            finally:
                # Only a connection whose lock is known gone goes back as it is.
                self._lose(clean=held)

    def extend(self, ttl: float) -> bool:
        """Sets the lease to ``ttl`` seconds from now: True, or False when the lock was
        no longer held. A session lock is renewed with the new TTL from then on
        (dlockd's floor for session locks, 1 s, applies)."""
        args = self._extend_args(ttl)
        with self._mutex:
            if self._released or self._session_over():
                return False
            return self._ask(args)

    def held(self) -> bool:
        """Asks dlockd whether the lock is still held with this token on a quorum of
        the lock servers (CHECK: read-only, the lease does not change)."""
        with self._mutex:
            if self._released or self._session_over():
                return False
            return self._ask(self._check_args())

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
        with block_end(exc_type):
            if not self.release() and exc_type is None:
                raise self._lost()


class LeaderSeat(SeatMixin, Lock):
    """The session lock a Leadership is kept in: RESIGN rather than UNLOCK."""


# Semaphores -------------------------------------------------------------------------


class Semaphore(SemaphoreBase):
    """A semaphore of dlockd: at most ``permits`` holders of the name at once (a
    permit is a shared holder of the name; an exclusive lock of the name excludes
    them all). More than one permit needs dlockd over one lock server.

    ``acquire()`` returns a permit (a :class:`Lock`) or None; ``permit()`` raises
    :class:`NotAcquired` instead; ``with semaphore as permit:`` takes one with the
    semaphore's defaults and gives it back at the end of the block.
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._held = threading.local()

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
        return self._client._pool.acquire(self._request(ttl, wait, fair, detached, max_hold, label))

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
            raise self._none_free(wait)
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


class Reservation(ReservationBase):
    """Units of a SKU reserved for a lease (``Stock.reserve()``). Not tied to the
    connection that made it: another process can commit it by its id
    (``Stock.reservation(id)``).

    As a context manager, the end of the block cancels it unless it was committed
    (or canceled) inside: a buyer that fails before paying gives the units back at
    once rather than at the end of the lease.
    """

    def _call(self, args: List[bytes]) -> bool:
        return answered(args, self._pool.call(args))

    def commit(self) -> bool:
        """The units are sold, for good: True (again on a repeated commit, which counts
        nothing more), or False when the reservation was lost (canceled, or its lease
        ran out and its units went back to the stock)."""
        ok = self._call(self._command(b"COMMIT"))
        self._settled = True
        return ok

    def cancel(self) -> bool:
        """The units go back to the stock: True, or False when it was lost or
        committed."""
        ok = self._call(self._command(b"CANCEL"))
        self._settled = True
        return ok

    def extend(self, lease: float) -> bool:
        """Sets the lease to ``lease`` seconds from now (a slow payment): True, or False
        when lost."""
        return self._call(self._extend_args(lease))

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._settled:
            return
        with block_end(exc_type):
            self.cancel()


class Stock(StockBase):
    _Reservation = Reservation

    def _call(self, args: List[bytes]) -> Dict[str, int]:
        return self._state(args, self._pool.call(args))

    def set(self, qty: int) -> Dict[str, int]:
        """Sets the stock to ``qty`` units, sold and reserved ones included (a qty below
        them is refused with a CommandError and changes nothing). Returns the state."""
        return self._call(self._set_args(qty))

    def add(self, delta: int) -> Dict[str, int]:
        """Adds ``delta`` units (negative: takes available ones away). Returns the
        state."""
        return self._call(self._add_args(delta))

    def status(self) -> Dict[str, int]:
        """The SKU's state (a SKU never set reads as all zeros)."""
        return self._call(self._command(b"STATUS"))

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
        r = self._reserved(args, self._pool.call(args, wait_ms))
        if r is None:
            raise self._refused(args, self.status())
        return r


# The client -------------------------------------------------------------------------


class Client(ClientBase):
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

    _Lock = Lock
    _Semaphore = Semaphore
    _Stock = Stock
    _Seat = LeaderSeat
    _Leadership = Leadership

    def __init__(
        self,
        redis_client: "redis.Redis",
        *,
        max_hold: Optional[float] = None,
        label: Optional[str] = None,
    ) -> None:
        pool = check_client(redis_client, asyncio=False)
        super().__init__(redis_client, Pool(pool), max_hold, label)

    @classmethod
    def from_url(cls, url: str, **redis_kwargs: Any) -> "Client":
        """A client connected by URL: ``dlockd://[:PASSWORD@]HOST[:PORT][?OPTIONS]``
        (port 7379 by default), ``dlockds://...`` over TLS, or
        ``dlockd+unix:///PATH[?OPTIONS]``. OPTIONS: ``timeout`` (seconds to connect
        and to wait for a reply, default 5), ``name`` (the connection's name and the
        default label of its locks), ``maxhold`` (ms), ``cafile``, ``cert``, ``key``
        (TLS). ``redis_kwargs`` go to ``redis.Redis`` as they are (``max_connections``,
        say), over what the URL says.

        Connects at once, and sends a PING: raises :class:`Unavailable` when dlockd
        cannot be reached or does not answer, :class:`AuthFailed` when it refuses the
        password, :class:`InvalidArgument` for a URL it does not take. ``close()`` (or
        ``with``) closes its connections.
        """
        client, u = cls._by_url(url, redis.Redis, redis_kwargs)
        try:
            client.ping()
        except DlockError as e:
            client.redis.connection_pool.disconnect()
            if isinstance(e, Unavailable):
                why = e.__cause__ or e
                raise Unavailable(f"dlock: cannot connect to dlockd at {u.where}: {why}") from why
            raise
        return client

    def ping(self) -> None:
        """A PING to dlockd: Unavailable or AuthFailed now rather than at the first
        lock."""
        pong(self._pool.call([b"PING"]))

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
        return self._pool.acquire(
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

    def info(self, name: Name) -> Dict[str, Any]:
        """What dlockd knows of the lock ``name``: ``state`` ("held" or "free"),
        ``holder`` (who: a str; for shared holders a list of them, the longest lease
        first; None when free), ``remaining_ms``, ``fence`` (the last one issued), and
        ``shared`` (how many shared holders, when there are)."""
        return _args.info(self._pool.call([b"LOCKINFO", _args.name_bytes(name)]))

    def elect(
        self,
        name: Name,
        *,
        value: Name = "",
        ttl: float = DEFAULT_TTL,
        wait: float = FOREVER,
        fair: bool = False,
        label: Optional[str] = None,
    ) -> Leadership:
        """Campaigns to lead ``name`` until elected: a :class:`Leadership`, for
        ``with`` (which resigns at its end), or :class:`NotAcquired` when another
        led through the wait::

            with client.elect("scheduler", value="10.0.0.7:8080") as lead:
                run_scheduler(term=lead.term)

        A leadership is a session lock of ``name`` on a connection of its own: dlockd
        renews it while that connection is open, and resigns it the moment it closes,
        so that a leader that dies is followed by the next candidate within
        milliseconds. ``value``: what the leader announces to observers (its address,
        say): up to 1024 bytes, empty by default. ``ttl``: the lease in seconds (at
        least 1, dlockd's floor for a leadership: below it dlockd answers
        CommandError). ``wait``: ``dlock.FOREVER`` (the default) campaigns without
        end, 0 tries once, else seconds (None is an InvalidArgument, as for
        ``lock()``). ``fair``: elected in the order of the campaigns. ``label``: who
        leads, as operators see it.
        """
        lead = self._pool.acquire(self._elect_request(name, value, ttl, wait, fair, label))
        if lead is None:
            raise NotAcquired(not_elected(name, wait))
        return lead

    def leader(self, name: Name) -> Optional[Dict[str, Any]]:
        """Who leads ``name`` now: None when no one does, else ``value``,
        ``holder`` (who, as operators see it), ``term`` and ``remaining_ms`` (the
        lease left)."""
        return leader_info(self._pool.call(self._leader_args(name)))

    def observe(self, name: Name) -> Observer:
        """An :class:`Observer` of who leads ``name``: an iterator of
        :class:`Leader` changes, the state of now first, over a subscription (pub/sub
        ``leader:NAME``) on a connection of its own; ``close()`` or ``with`` ends
        it::

            with client.observe("scheduler") as changes:
                for leader in changes:   # leader.value is None when no one leads
                    ...
        """
        return Observer(self.redis, self._pool, _args.name_bytes(name, "election name"))
