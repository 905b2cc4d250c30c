"""dlock: locks, semaphores, flash-sale stock and leader election from dlockd, the
dlock lock service, over redis-py.

    import dlock, redis

    client = dlock.Client(redis.Redis(port=7379))      # or dlock.Client.from_url(...)
    with client.lock("order:42", ttl=10, wait=5) as lock:
        charge(42, fence=lock.fence)
    with client.elect("scheduler", value="10.0.0.7:8080") as lead:
        schedule(term=lead.term)

``dlock.asyncio.Client`` is the same over ``redis.asyncio``, loaded at its first use
(``import dlock`` alone leaves redis.asyncio unloaded). The package's version is
dlock's.
"""

from typing import Any, List

from ._args import DEFAULT_TTL, FOREVER
from ._client import Client, Lock, Reservation, Semaphore, Stock
from ._elect import Leader, Leadership, Observer
from ._errors import (
    AuthFailed,
    CommandError,
    DlockError,
    InvalidArgument,
    LockLost,
    NoQuorum,
    NotAcquired,
    OutOfStock,
    PoolExhausted,
    ProtocolError,
    Unavailable,
)

#: The package's version: the version of dlock it comes with (include/dlock.h).
__version__ = "0.1.0"

__all__ = [
    "__version__",
    "FOREVER",
    "DEFAULT_TTL",
    "Client",
    "Lock",
    "Semaphore",
    "Stock",
    "Reservation",
    "Leadership",
    "Observer",
    "Leader",
    "DlockError",
    "NotAcquired",
    "OutOfStock",
    "LockLost",
    "Unavailable",
    "NoQuorum",
    "PoolExhausted",
    "AuthFailed",
    "ProtocolError",
    "CommandError",
    "InvalidArgument",
    "asyncio",
]


def __getattr__(name: str) -> Any:
    # dlock.asyncio on its first use: importing it imports redis.asyncio, which a
    # blocking program does not need to pay for at its start.
    if name == "asyncio":
        import importlib

        return importlib.import_module(".asyncio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | {"asyncio"})
