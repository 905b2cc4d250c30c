"""The package's exceptions: one class per kind of failure, whatever redis-py raised,
and what turns redis-py's exceptions into them.

Every one is a :class:`DlockError`; :class:`InvalidArgument` is also a ``ValueError``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import redis.exceptions as rx

__all__ = [
    "DlockError",
    "NotAcquired",
    "PoolExhausted",
    "OutOfStock",
    "LockLost",
    "Unavailable",
    "NoQuorum",
    "AuthFailed",
    "ProtocolError",
    "CommandError",
    "InvalidArgument",
]


class DlockError(Exception):
    """What every exception of this package is: ``except dlock.DlockError`` catches
    them all.

    ``code``: dlockd's code word when the error is its reply (``"ERR"``,
    ``"UNAVAILABLE"``, ``"NOQUORUM"``, ``"LOST"``, ``"WRONGPASS"``...), else None.
    """

    code: Optional[str] = None


class NotAcquired(DlockError):
    """The lock (or permit, or units of stock) was not acquired within the wait:
    ``client.lock()`` raises it where ``client.acquire()`` returns None."""


class OutOfStock(NotAcquired):
    """``Stock.reserve()`` could not have the units within its wait, and why.

    ``sold_out`` says whether they are gone for good (more units asked than are not yet
    sold: no cancel or expiry can give them back) or only reserved by other buyers at
    the moment (a cancel, an expired lease or a restock may free them: try again
    later). ``state`` is the SKU's state when the reserve was refused
    (``Stock.status()``).
    """

    def __init__(self, message: str, sold_out: bool, state: Optional[Dict[str, int]] = None):
        super().__init__(message)
        self.sold_out = sold_out
        self.state: Dict[str, int] = dict(state or {})

    def __reduce__(self) -> Tuple[Any, ...]:
        # Made again from all three (pickle, multiprocessing): the default passes the
        # message alone, which __init__ does not take.
        return type(self), (self.args[0], self.sold_out, self.state), self.__dict__


class LockLost(DlockError):
    """A lock was lost while held: its lease ran out before it could be renewed, an
    operator broke it, another client released it with its token, or the connection
    that held it (a session lock) was closed. Raised at the end of a ``with`` block
    whose release found the lock gone, and by a call that reads dlockd's ``-LOST``
    reply."""


class Unavailable(DlockError):
    """dlockd or its lock servers could not be reached, did not answer in time, or are
    shutting down (``-SHUTDOWN``): try later. A command that failed so may or may not
    have been applied."""


class NoQuorum(Unavailable):
    """Too few of several lock servers answered to decide (dlockd's ``-NOQUORUM``)."""


class PoolExhausted(DlockError):
    """Every connection the ``redis.Redis`` pool may open (its ``max_connections``) is
    in use, most of them by the session locks held (each keeps one for itself until
    released): dlockd was not asked. Raise ``max_connections``, or hold fewer locks at
    once."""


class AuthFailed(DlockError):
    """No password, a wrong one, or a command this user may not run (``-NOAUTH``,
    ``-WRONGPASS``, ``-NOPERM``)."""


class ProtocolError(DlockError):
    """A reply that is not what the command calls for, or dlockd's
    ``-ERR Protocol error`` (after which dlockd closes the connection)."""


class CommandError(DlockError):
    """dlockd refused the command (its ``-ERR``): a session TTL under 1000 ms, a lock
    this connection already holds, a stock count out of line. The message is
    dlockd's."""


class InvalidArgument(DlockError, ValueError):
    """An argument out of range (an empty or over-long name, a negative wait, a TTL of
    0), refused before anything is sent."""


# What redis-py raised, as the package's exceptions -----------------------------------

#: dlockd's error code words, and the exception each one is.
_CODES = {
    "ERR": CommandError,
    "NOQUORUM": NoQuorum,
    "UNAVAILABLE": Unavailable,
    # A draining dlockd takes no new lock: another dlockd, or later, will.
    "SHUTDOWN": Unavailable,
    "LOADING": Unavailable,
    "LOST": LockLost,
    "NOAUTH": AuthFailed,
    "WRONGPASS": AuthFailed,
    "NOPERM": AuthFailed,
    "NOPROTO": ProtocolError,
}


#: The starts of -ERR lines (redis-py took the "ERR " off) that are a password
#: refused: Redis's words, which dlockd says too, for a password sent to a server
#: that has none.
_AUTH_ERRS = ("AUTH <password> called without any password configured",)

#: What redis-py's pools raise when every connection they may open is in use.
_POOL_FULL = ("Too many connections", "No connection available")


def failure(exc: BaseException) -> Tuple[DlockError, bool]:
    """The package's exception for what redis-py raised, and whether the connection
    is still in step (an error reply read whole, the connection usable): when it is
    not, the caller disconnects it, so that no later command reads a late reply as its
    own (and dlockd releases the session locks it held).

    redis-py strips the code word of the errors it knows (ERR, NOAUTH, NOPERM,
    LOADING...) and makes ConnectionError of some; dlockd's own codes (UNAVAILABLE,
    NOQUORUM, LOST, WRONGPASS, SHUTDOWN) come as a ResponseError with the whole line.
    """
    err, in_step, code = _classify(exc)
    err.code = code
    return err, in_step


def _classify(exc: BaseException) -> Tuple[DlockError, bool, Optional[str]]:
    if isinstance(exc, rx.AuthenticationError):
        return AuthFailed(f"dlockd: {exc}"), False, None  # NOAUTH, or an -ERR redis-py knows
    if isinstance(exc, rx.BusyLoadingError):
        return Unavailable(f"dlockd: LOADING {exc}"), False, "LOADING"
    if isinstance(exc, rx.TimeoutError):
        return Unavailable(f"dlock: no reply from dlockd in time ({exc})"), False, None
    if isinstance(exc, rx.ConnectionError):
        return Unavailable(f"dlock: {exc}"), False, None
    if isinstance(exc, rx.NoPermissionError):
        return AuthFailed(f"dlockd: NOPERM {exc}"), True, "NOPERM"
    if isinstance(exc, rx.ResponseError):
        line = str(exc)
        word = line.split(" ", 1)[0]
        if type(exc) is rx.ResponseError and word in _CODES and word != "ERR":
            cls = _CODES[word]
            # dlockd closes the connection after -LOST.
            return cls(f"dlockd: {line}"), cls is not LockLost, word
        # An -ERR (redis-py took "ERR " off), or a code redis-py knows.
        if line.startswith("Protocol error"):
            return ProtocolError(f"dlockd: ERR {line}"), False, "ERR"
        if line.startswith(_AUTH_ERRS):
            return AuthFailed(f"dlockd: {line}"), True, "ERR"
        return CommandError(f"dlockd: {line}"), True, "ERR"
    if isinstance(exc, rx.InvalidResponse):
        return ProtocolError(f"dlockd: {exc}"), False, None
    if isinstance(exc, OSError):
        return Unavailable(f"dlock: {exc}"), False, None
    return DlockError(f"dlockd: {type(exc).__name__}: {exc}"), False, None


def take_failure(exc: BaseException, pool: Any) -> DlockError:
    """The package's exception for a connection the pool could not give: its own when
    every connection it may open is in use (dlockd is fine; the session locks held
    keep theirs), else as failure()."""
    if isinstance(exc, rx.ConnectionError) and str(exc).startswith(_POOL_FULL):
        most = getattr(pool, "max_connections", None)
        return PoolExhausted(
            f"dlock: all {most} connections of the redis client's pool are in use "
            "(each session lock held keeps one until released): raise max_connections, "
            "or hold fewer locks at once"
        )
    return failure(exc)[0]


def failed(e: BaseException) -> DlockError:
    """The package's exception for what redis-py raised on a command, which in_step()
    reads."""
    err, step = failure(e)
    err._in_step = step  # type: ignore[attr-defined]
    return err


def in_step(e: BaseException) -> bool:
    """Whether a failed command left its connection usable (an error reply, read
    whole). Anything else (an I/O error, a timeout, -LOST, a reply that makes no
    sense) has closed it, or must."""
    return bool(getattr(e, "_in_step", False))


def broken(e: BaseException) -> bool:
    """The connection broke (closed by dlockd, reset): not a timeout, not a reply."""
    return isinstance(e, LockLost) or type(e.__cause__) is rx.ConnectionError


def io_error(e: BaseException) -> bool:
    """Whether redis-py or the socket raised ``e`` (failed() makes it the package's),
    rather than anything else (an interrupt, a cancellation, a bug)."""
    return isinstance(e, (rx.RedisError, OSError))
