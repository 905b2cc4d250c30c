"""What the blocking client and the asyncio one share, none of it I/O: the state of a
Lock, a Semaphore, a Stock, a Reservation and a connection pool and what they show of
it, the arguments of each of their commands, the reading of each reply and what the end
of a ``with`` block does with a failure. dlock._client and dlock.asyncio (with
dlock._pool and dlock._aio_pool) keep the calls (with ``await`` or without) and the
order they come in.
"""

from __future__ import annotations

import collections
import contextlib
import os
from typing import Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Tuple

from . import _args, _leader
from ._errors import DlockError, InvalidArgument, LockLost, NotAcquired, OutOfStock, ProtocolError
from ._url import Url, parse as parse_url


class Request(NamedTuple):
    """A LOCK or SEM ACQUIRE ready to send: its arguments, its wait in ms (-1: without
    end), whether it is detached, and ``hold``: what makes of its reply (and of the
    connection it came on, None for a detached lock) the Lock, or None when it was not
    granted."""

    args: List[bytes]
    wait: int
    detached: bool
    hold: Callable[[Any, Any], Any]


@contextlib.contextmanager
def block_end(exc_type: Any) -> Iterator[None]:
    """Around what ends a ``with`` block's lock or reservation (its release, its
    cancel): a DlockError raised there is raised when the block itself raised nothing,
    and dropped when it did (the block's exception is the one to report)."""
    try:
        yield
    except DlockError:
        if exc_type is None:
            raise


class PoolBase:
    """A redis-py connection pool as the package uses it (``pool``), and the
    connections of the locks collected without release(): Lock.__del__ hands each to
    orphan(), which has it closed, and the next take() or give() gives it back to the
    pool. The collector may run in a thread that holds the pool's lock (not reentrant),
    or inside the pool's own code, so __del__ itself must not give them back."""

    #: The attribute of a connection that is what it is connected by now (None when
    #: closed): a new one means redis-py connected it again, a new session.
    _link: str

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._orphans: Deque[Any] = collections.deque()

    def link(self, conn: Any) -> Any:
        """What ``conn`` is connected by now."""
        return getattr(conn, self._link, None)


# Locks ------------------------------------------------------------------------------


class LockBase:
    """A lock (or a semaphore's permit) held from dlockd.

    Read-only attributes: ``name`` (str), ``name_bytes`` (the name as dlockd has it:
    a bytes name that is not UTF-8 reads back exactly here only), ``token`` (str, 32
    hex characters),
    ``fence`` (int, greater than every earlier holder's: hand it to what the lock
    protects), ``validity`` (the seconds of lease left when it was granted: a snapshot
    of that moment, not updated by renewals or ``extend()``), ``detached`` (bool) and
    ``released`` (whether ``release()`` took effect).
    """

    _prefix = "dlock"

    def __init__(
        self,
        pool: Any,
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
        self._text = _args.text(name)
        self._token = token
        self._fence = fence
        self._validity = validity_ms / 1000
        self._detached = detached
        self._what = what
        self._released = False
        self._pid = os.getpid()
        # A session lock's connection, and what it was connected by at the grant: a
        # connection connected again since is a new session, which holds nothing.
        self._conn = conn
        self._link = pool.link(conn) if conn is not None else None

    @property
    def name(self) -> str:
        return self._text

    @property
    def name_bytes(self) -> bytes:
        return self._name

    @property
    def token(self) -> str:
        return self._token

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def validity(self) -> float:
        return self._validity

    @property
    def detached(self) -> bool:
        return self._detached

    @property
    def released(self) -> bool:
        """Whether ``release()`` took effect (dlockd answered it, or the lock was
        already gone), whatever it answered."""
        return self._released

    def __repr__(self) -> str:
        kind = "detached" if self._detached else "session"
        state = "released" if self._released else ("lost" if self._session_over() else "held")
        return f"<{self._prefix}.Lock {self._what} {self._text!r} fence={self._fence} {kind} {state}>"

    def _session_over(self) -> bool:
        """A session lock whose connection is gone, or is its parent's (after a fork)."""
        return not self._detached and (self._conn is None or os.getpid() != self._pid)

    def _linked(self, conn: Any) -> bool:
        """Whether ``conn`` is still connected as it was at the grant."""
        return conn is not None and self._link is not None and self._pool.link(conn) is self._link

    def _unlocking(self) -> bool:
        """Whether release() is to send its UNLOCK: not once released, nor for a session
        lock whose session is over (its connection let go of, not closed: a forked
        child leaves its parent's alone). A session lock counts as released from here
        on, whatever the UNLOCK answers; a detached one once it is answered (until then
        it may be released again)."""
        if self._released:
            return False
        if self._detached:
            return True
        self._released = True
        if self._session_over():
            self._conn = None
            return False
        return True

    def _unlock_args(self) -> List[bytes]:
        return [b"UNLOCK", self._name, self._token.encode()]

    def _extend_args(self, ttl: float) -> List[bytes]:
        return [b"EXTEND", self._name, self._token.encode(), str(_args.ttl_ms(ttl)).encode()]

    def _check_args(self) -> List[bytes]:
        return [b"CHECK", self._name, self._token.encode()]

    def _lost(self) -> LockLost:
        return LockLost(
            f"dlock: {self._what} {self._text!r} was lost before the end of the block: "
            "its work was not wholly under the lock"
        )

    def _orphan(self, conn: Any) -> None:
        """Hands the connection of a session lock dropped without release() to its
        pool, which closes it (dlockd releases the lock) and takes it back later."""
        self._pool.orphan(conn)

    def __del__(self) -> None:
        # A session lock dropped without release(): its connection closes, which makes
        # dlockd release it, and goes back to the pool at the pool's next use. Only
        # that here: the collector may run in any thread, and inside the pool's own
        # code while it holds the pool's lock.
        try:
            conn, self._conn = self._conn, None
            if conn is not None and os.getpid() == self._pid:
                self._orphan(conn)
        except Exception:
            pass


# The client -------------------------------------------------------------------------


class ClientBase:
    """The state of a client and the commands its methods send."""

    #: A wait without end: ``client.lock(name, wait=Client.FOREVER)``.
    FOREVER = _args.FOREVER

    _prefix = "dlock"
    _Lock: Any = LockBase
    _Semaphore: Any = None
    _Stock: Any = None
    _Seat: Any = None  # the session lock class a leadership is kept in
    _Leadership: Any = None

    def __init__(self, redis_client: Any, pool: Any, max_hold: Optional[float], label: Optional[str]) -> None:
        if max_hold is not None:
            _args.duration_ms(max_hold, "max_hold")
        if label is not None:
            _args.label_bytes(label)
        self.redis = redis_client
        self._pool = pool
        self._max_hold = max_hold
        self._label = label
        self._owned = False

    @classmethod
    def _by_url(cls, url: str, redis_class: Any, redis_kwargs: Dict[str, Any]) -> Tuple[Any, Url]:
        u = parse_url(url)
        kw = u.redis_kwargs()
        kw.update(redis_kwargs)
        client = cls(redis_class(**kw), max_hold=u.max_hold, label=u.name)
        client._owned = True
        return client, u

    def __repr__(self) -> str:
        kw = getattr(self._pool.pool, "connection_kwargs", {})
        where = kw.get("path") or f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"
        return f"<{self._prefix}.Client dlockd at {where}>"

    def _request(
        self,
        head: List[bytes],
        ttl: Any,
        wait: Any,
        *,
        shared: Any,
        fair: Any,
        detached: Any,
        max_hold: Any,
        label: Any,
        what: str,
    ) -> Request:
        """LOCK or SEM ACQUIRE (``head``: the command up to its options), with this
        client's default MAXHOLD (session locks) and label for those not given."""
        if max_hold is None and not detached:
            max_hold = self._max_hold
        args, wait_ms = _args.acquire_command(
            head,
            ttl,
            wait,
            shared=shared,
            fair=fair,
            detached=detached,
            max_hold=max_hold,
            label=label if label is not None else self._label,
        )
        n = 2 if head[0] == b"SEM" else 1
        command, raw = b" ".join(head[:n]).decode(), head[n]

        def hold(reply: Any, conn: Any) -> Any:
            grant = _args.grant(reply, command)
            if grant is None:
                return None
            return self._Lock(self._pool, raw, grant[0], grant[1], grant[2], detached, conn, what)

        return Request(args, wait_ms, detached, hold)

    def _lock_request(self, name: Any, ttl: Any, wait: Any, **options: Any) -> Request:
        return self._request([b"LOCK", _args.name_bytes(name)], ttl, wait, what="lock", **options)

    def _elect_request(self, name: Any, value: Any, ttl: Any, wait: Any, fair: Any, label: Any) -> Request:
        """ELECT, with this client's label for a leadership not given one; its hold
        makes the Leadership, on the connection the grant came on."""
        raw = _args.name_bytes(name, "election name")
        val = _leader.value_bytes(value)
        if label is None:
            label = self._label
        args, wait_ms = _leader.elect_command(raw, val, ttl, wait, fair, label)

        def hold(reply: Any, conn: Any) -> Any:
            grant = _args.grant(reply, "ELECT")
            if grant is None:
                return None
            seat = self._Seat(self._pool, raw, grant[0], grant[1], grant[2], False, conn, "leadership")
            return self._Leadership(seat, val)

        return Request(args, wait_ms, False, hold)

    def _leader_args(self, name: Any) -> List[bytes]:
        return [b"LEADER", _args.name_bytes(name, "election name")]

    def adopt(self, name: _args.Name, token: str, fence: int = 0) -> Any:
        """A detached lock taken elsewhere (another process), by its name and token: to
        release, extend or check it here. ``fence``: the one its grant gave, if known."""
        raw = _args.name_bytes(name)
        return self._Lock(self._pool, raw, _args.token_str(token), _args.fence_int(fence), 0, True)

    def semaphore(
        self, name: _args.Name, permits: int, *, ttl: float = _args.DEFAULT_TTL, wait: float = 0, fair: bool = False
    ) -> Any:
        """The semaphore ``name`` of ``permits`` permits (every user of a name passes
        the same). ``ttl``, ``wait`` and ``fair`` are the defaults of its ``with``."""
        raw = _args.name_bytes(name, "semaphore name")
        return self._Semaphore(self, raw, _args.permits_int(permits), ttl, wait, fair)

    def stock(self, sku: _args.Name) -> Any:
        """The stock of the SKU ``sku``, sold through reservations with a lease."""
        return self._Stock(self._pool, _args.name_bytes(sku, "SKU"))


def pong(reply: Any) -> None:
    if reply not in (b"PONG", "PONG"):
        raise ProtocolError(f"dlockd: PING replied {_args.show(reply)}, not PONG")


# Semaphores -------------------------------------------------------------------------


class SemaphoreBase:
    """A semaphore of dlockd: at most ``permits`` holders of the name at once (a
    permit is a shared holder of the name; an exclusive lock of the name excludes
    them all). More than one permit needs dlockd over one lock server."""

    _prefix = "dlock"

    def __init__(self, client: ClientBase, name: bytes, permits: int, ttl: float, wait: float, fair: bool) -> None:
        _args.ttl_ms(ttl)
        _args.wait_ms(wait)
        _args.flag(fair, "fair")
        self._client = client
        self._name = name
        self._text = _args.text(name)
        self._permits = permits
        self._defaults = (ttl, wait, fair)

    @property
    def name(self) -> str:
        return self._text

    @property
    def permits(self) -> int:
        return self._permits

    def __repr__(self) -> str:
        return f"<{self._prefix}.Semaphore {self._text!r} permits={self._permits}>"

    def _request(
        self, ttl: Any, wait: Any, fair: Any, detached: Any, max_hold: Any, label: Any
    ) -> Request:
        d_ttl, d_wait, d_fair = self._defaults
        return self._client._request(
            [b"SEM", b"ACQUIRE", self._name, str(self._permits).encode()],
            d_ttl if ttl is None else ttl,
            d_wait if wait is None else wait,
            shared=False,
            fair=d_fair if fair is None else fair,
            detached=detached,
            max_hold=max_hold,
            label=label,
            what="permit of semaphore",
        )

    def _none_free(self, wait: Optional[float]) -> NotAcquired:
        w = self._defaults[1] if wait is None else wait
        return NotAcquired(_args.no_permit(self._text, self._permits, w))


# Stock ------------------------------------------------------------------------------


class ReservationBase:
    """Units of a SKU reserved for a lease (``Stock.reserve()``). Not tied to the
    connection that made it: another process can commit it by its id
    (``Stock.reservation(id)``).

    Read-only attributes: ``sku``, ``id``, ``qty`` (None for one taken by its id) and
    ``settled`` (committed or canceled here).
    """

    _prefix = "dlock"

    def __init__(self, pool: Any, sku: bytes, rid: str, qty: Optional[int]) -> None:
        self._pool = pool
        self._sku = sku
        self._text = _args.text(sku)
        self._id = rid
        self._qty = qty
        self._settled = False

    @property
    def sku(self) -> str:
        return self._text

    @property
    def id(self) -> str:
        return self._id

    @property
    def qty(self) -> Optional[int]:
        return self._qty

    @property
    def settled(self) -> bool:
        return self._settled

    def __repr__(self) -> str:
        return f"<{self._prefix}.Reservation {self._text!r} id={self._id} qty={self._qty}>"

    def _command(self, sub: bytes, *extra: bytes) -> List[bytes]:
        return [b"STOCK", sub, self._sku, self._id.encode(), *extra]

    def _extend_args(self, lease: float) -> List[bytes]:
        return self._command(b"EXTEND", str(_args.ttl_ms(lease, "lease")).encode())


def answered(args: List[bytes], reply: Any) -> bool:
    """A STOCK COMMIT, CANCEL or EXTEND's 1 or 0."""
    return _args.boolean(reply, f"STOCK {args[1].decode()}")


class StockBase:
    """The stock of one SKU, sold through reservations with a lease: a buyer reserves
    units, then commits them (sold, for good) or cancels them (back in stock); a
    reservation nobody commits gives its units back when its lease ends. At every
    instant stock = sold + reserved + available.

    The state (``status()``, ``set()``, ``add()``) is a dict of ints: ``stock``,
    ``available``, ``reserved``, ``sold``, ``reservations`` (live ones), ``waiters``
    (reserves waiting).
    """

    _prefix = "dlock"
    _Reservation: Any = ReservationBase

    def __init__(self, pool: Any, sku: bytes) -> None:
        self._pool = pool
        self._sku = sku
        self._text = _args.text(sku)

    @property
    def sku(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<{self._prefix}.Stock {self._text!r}>"

    def _command(self, sub: bytes, *extra: bytes) -> List[bytes]:
        return [b"STOCK", sub, self._sku, *extra]

    def _set_args(self, qty: int) -> List[bytes]:
        return self._command(b"SET", str(_args.qty_int(qty, "qty", 0)).encode())

    def _add_args(self, delta: int) -> List[bytes]:
        return self._command(b"ADD", str(_args.delta_int(delta)).encode())

    @staticmethod
    def _state(args: List[bytes], reply: Any) -> Dict[str, int]:
        return _args.stock_state(reply, f"STOCK {args[1].decode()}")

    def _reserved(self, args: List[bytes], reply: Any) -> Any:
        """The Reservation a STOCK RESERVE's reply gives, or None."""
        rid = _args.reservation_id(reply)
        return None if rid is None else self._Reservation(self._pool, self._sku, rid, int(args[3]))

    def _refused(self, args: List[bytes], state: Dict[str, int]) -> OutOfStock:
        return OutOfStock(*_args.out_of_stock(self._text, int(args[3]), state))

    def reservation(self, rid: str) -> Any:
        """A reservation made elsewhere, by its id: to commit or cancel it."""
        return self._Reservation(self._pool, self._sku, _args.token_str(rid, "a reservation id"), None)


def check_client(redis_client: Any, asyncio: bool) -> Any:
    """The connection pool of the redis client a Client is given, when it is of the
    kind that client takes."""
    pool = getattr(redis_client, "connection_pool", None)
    if pool is None or not hasattr(pool, "get_connection"):
        want = "a redis.asyncio.Redis" if asyncio else "a redis.Redis"
        raise InvalidArgument(
            f"dlock: {'asyncio.' if asyncio else ''}Client takes {want} connected to dlockd, "
            f"not {type(redis_client).__name__}"
        )
    import inspect

    if inspect.iscoroutinefunction(pool.get_connection) != asyncio:
        if asyncio:
            raise InvalidArgument("dlock: a blocking redis.Redis goes to dlock.Client")
        raise InvalidArgument("dlock: a redis.asyncio client goes to dlock.asyncio.Client")
    return pool
