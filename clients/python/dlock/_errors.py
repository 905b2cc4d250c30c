"""The package's exceptions: one class per kind of failure, whatever redis-py raised.

Every one is a :class:`DlockError`; :class:`InvalidArgument` is also a ``ValueError``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

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
