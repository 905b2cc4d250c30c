"""dlock: locks, semaphores and flash-sale stock from dlockd, the dlock lock service,
over redis-py.

    import dlock, redis

    client = dlock.Client(redis.Redis(port=7379))      # or dlock.Client.from_url(...)
    with client.lock("order:42", ttl=10, wait=5) as lock:
        charge(42, fence=lock.fence)

``dlock.asyncio.Client`` is the same over ``redis.asyncio``. The package's version is
dlock's.
"""

from ._args import DEFAULT_TTL, FOREVER
from ._client import Client, Lock, Reservation, Semaphore, Stock
from ._errors import (
    AuthFailed,
    CommandError,
    DlockError,
    InvalidArgument,
    LockLost,
    NoQuorum,
    NotAcquired,
    OutOfStock,
    ProtocolError,
    Unavailable,
)

#: The package's version: the version of dlock it comes with (include/dlock.h).
__version__ = "0.1.0"

from . import asyncio  # noqa: E402  (dlock.asyncio.Client, without a second import)

__all__ = [
    "__version__",
    "FOREVER",
    "DEFAULT_TTL",
    "Client",
    "Lock",
    "Semaphore",
    "Stock",
    "Reservation",
    "DlockError",
    "NotAcquired",
    "OutOfStock",
    "LockLost",
    "Unavailable",
    "NoQuorum",
    "AuthFailed",
    "ProtocolError",
    "CommandError",
    "InvalidArgument",
    "asyncio",
]
