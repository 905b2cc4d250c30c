"""What leader election shares between the blocking client and the asyncio one, none
of it I/O: ELECT's arguments, the reading of LEADER's reply and of the messages of
``leader:NAME``, and the state of a leadership and of an observer.

A leadership is a session lock in dlockd (the lock ``name``, its fence the term), so
the package keeps it in one of its session locks, a *seat*, which RESIGNs rather than
UNLOCKs: the seat has the connection of its own, the renewals and the garbage
collection of every session lock, and the Leadership around it shows what a leader
needs (its term, its value, proclaim, resign) rather than a lock's methods.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from . import _args
from ._errors import InvalidArgument, LockLost, ProtocolError, failed, io_error

#: dlockd's limit on a leader's value, in bytes.
VALUE_MAX = 1024

#: The prefix of the pub/sub channel on which dlockd tells who leads a name.
CHANNEL_PREFIX = b"leader:"


class Leader(NamedTuple):
    """Who leads, as an observer hears it: the leader's ``term`` and ``value``, or
    term 0 and value None when no one leads."""

    term: int
    value: Optional[str]


def value_bytes(value: Any) -> bytes:
    """A leader's value as dlockd takes it: 0 to 1024 bytes of UTF-8 (or bytes), no
    NUL."""
    raw = _args._raw(value, "a leader's value")
    if len(raw) > VALUE_MAX:
        raise InvalidArgument(f"dlock: a leader's value must be at most {VALUE_MAX} bytes, not {len(raw)}")
    if b"\0" in raw:
        raise InvalidArgument("dlock: a leader's value must not contain a NUL byte")
    return raw


def elect_command(
    name: bytes, value: bytes, ttl: Any, wait: Any, fair: Any, label: Any
) -> Tuple[List[bytes], int]:
    """ELECT with its options, and the wait in ms (-1: without end)."""
    args = [b"ELECT", name, b"TTL", str(_args.ttl_ms(ttl)).encode()]
    w = _args.wait_ms(wait)
    if w != 0:
        args += [b"WAIT", str(w).encode()]
    if value:
        args += [b"VALUE", value]  # none is dlockd's default: the empty value
    if label is not None:
        args += [b"LABEL", _args.label_bytes(label)]
    if _args.flag(fair, "fair"):
        args.append(b"FAIR")
    return args, w


def not_elected(name: Any, wait: Any) -> str:
    return f"dlock: not elected leader of {_args.text(name)!r} within {_args.wait_text(_args.wait_ms(wait))}"


def leader_info(reply: Any) -> Optional[Dict[str, Any]]:
    """LEADER's reply: None when no one leads, else ``value``, ``holder`` (str),
    ``term`` and ``remaining_ms`` (int)."""
    if reply is None:
        return None
    if (
        not isinstance(reply, list)
        or len(reply) != 4
        or not all(isinstance(v, (bytes, str)) for v in reply[:2])
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in reply[2:])
    ):
        raise ProtocolError(
            f"dlockd: LEADER replied {_args.show(reply)}, not [value, holder, term, remaining_ms]"
        )
    return {
        "value": _args.text(reply[0]),
        "holder": _args.text(reply[1]),
        "term": reply[2],
        "remaining_ms": reply[3],
    }


def channel(name: bytes) -> bytes:
    return CHANNEL_PREFIX + name


def parse_change(data: Any) -> Leader:
    """A message's payload: ``TERM VALUE`` (split at the first space: the value may
    hold spaces, or be empty), or ``0`` when no one leads."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not isinstance(raw, bytes):
        raise ProtocolError(f"dlockd: a leader:NAME message of {_args.show(data)}, not TERM VALUE")
    head, _, value = raw.partition(b" ")
    if not head.isdigit():
        raise ProtocolError(f"dlockd: a leader:NAME message of {_args.show(data)}, not TERM VALUE")
    term = int(head)
    return Leader(0, None) if term == 0 else Leader(term, _args.text(value))


# The leadership ------------------------------------------------------------------------


class SeatMixin:
    """Makes a session lock class the seat of a leadership: its release resigns (the
    observers hear at once that no one leads), and a loss is told as a leader's."""

    _name: bytes
    _token: str
    _text: str

    def _unlock_args(self) -> List[bytes]:
        return [b"RESIGN", self._name, self._token.encode()]

    def _lost(self) -> LockLost:
        return LockLost(
            f"dlock: the leadership of {self._text!r} was lost before the end of the block: "
            "its work was not wholly done as the leader"
        )


class LeadershipBase:
    """A leadership won with ``Client.elect()``.

    Read-only attributes: ``name``, ``token`` (str, 32 hex characters), ``term`` (int,
    greater than every earlier leader's: hand it to what the leader acts on, which can
    then refuse a deposed leader), ``value`` (the value announced, the last one
    proclaimed here), ``validity`` (seconds of lease left at the election: a
    snapshot) and ``resigned``.
    """

    _prefix = "dlock"

    def __init__(self, seat: Any, value: bytes) -> None:
        self._seat = seat
        self._value = _args.text(value)

    @property
    def name(self) -> str:
        return str(self._seat.name)

    @property
    def token(self) -> str:
        return str(self._seat.token)

    @property
    def term(self) -> int:
        return int(self._seat.fence)

    @property
    def value(self) -> str:
        return self._value

    @property
    def validity(self) -> float:
        return float(self._seat.validity)

    @property
    def resigned(self) -> bool:
        """Whether ``resign()`` took effect (dlockd answered it, or the leadership was
        already gone)."""
        return bool(self._seat.released)

    def __repr__(self) -> str:
        seat = self._seat
        state = "resigned" if seat.released else ("lost" if seat._session_over() else "leading")
        return f"<{self._prefix}.Leadership {seat.name!r} term={seat.fence} {state}>"

    def _proclaim_args(self, value: bytes) -> List[bytes]:
        return [b"PROCLAIM", self._seat._name, self._seat.token.encode(), value]

    def _not_leading(self) -> LockLost:
        return LockLost(f"dlock: no longer the leader of {self._seat.name!r}: its value was not proclaimed")


# Observers -----------------------------------------------------------------------------


#: The longest a read of an observer's subscription blocks before it looks again (at
#: the time left, at a close from elsewhere; redis-py runs its health check then).
POLL_S = 1.0


def deadline(timeout: Any) -> Optional[float]:
    """When a wait of ``timeout`` seconds ends, on time.monotonic()'s clock; None (or
    FOREVER) for a wait without end."""
    if timeout is None:
        return None
    s = _args._seconds(timeout, "timeout")
    if s < 0:
        raise InvalidArgument(f"dlock: timeout must be 0 or more seconds, or None; not {timeout!r}")
    return None if math.isinf(s) else time.monotonic() + s


def poll_for(until: Optional[float]) -> float:
    """How long the next read may block: POLL_S at most, and no later than ``until``
    (0 once it has passed: one look without waiting)."""
    if until is None:
        return POLL_S
    return max(0.0, min(POLL_S, until - time.monotonic()))


def passed(until: Optional[float]) -> bool:
    return until is not None and time.monotonic() >= until


class ObserverBase:
    """What an observer knows: the name it observes and the last change it reported.

    A change is reported once, and terms never go back: a message that repeats the
    last change, or a leader of a term older than one already reported, is not news.
    """

    _prefix = "dlock"

    def __init__(self, name: bytes) -> None:
        self._name = name
        self._text = _args.text(name)
        self._last: Optional[Leader] = None
        self._top = 0  # the largest term reported
        self._closed = False

    @property
    def name(self) -> str:
        return self._text

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{self._prefix}.Observer {self._text!r} {state} last={self._last}>"

    def _polls(self, until: Optional[float]) -> Iterator[float]:
        """The reads of one ``get()`` that ends at ``until`` (deadline()): how long each
        may block (poll_for()), while the observer is open and the time is not up. At
        least one: a wait that has passed still looks once at what has come."""
        while not self._closed:
            yield poll_for(until)
            if passed(until):
                return

    def _failed_read(self, e: BaseException) -> Optional[BaseException]:
        """What a read that raised ``e`` ends with: None when close() ended it (the read
        returns None); else the observer is closed (its subscription is to be dropped)
        and this is what to raise: the package's exception for what redis-py or the
        socket raised (caused by it), anything else as it is."""
        if self._closed and io_error(e):
            return None
        self._closed = True
        if not io_error(e):
            return e
        err = failed(e)
        err.__cause__ = e
        return err

    def _news(self, message: Optional[Dict[str, Any]]) -> Optional[Leader]:
        """The change a pub/sub message tells, or None when it tells none (a subscribe
        confirmation, a health check's pong, a repeat, an older term)."""
        if message is None or _args.text(message.get("type")) != "message":
            return None
        change = parse_change(message.get("data"))
        if change == self._last or (change.term != 0 and change.term < self._top):
            return None
        self._last = change
        self._top = max(self._top, change.term)
        return change
