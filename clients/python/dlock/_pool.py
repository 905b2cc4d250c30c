"""The blocking client's connection layer: a command's round trip on one connection of
a redis-py pool, and a session lock's own connection, taken from the pool for as long
as the lock is held.
"""

from __future__ import annotations

from typing import Any, List, Optional

import redis.exceptions as rx

from . import _args
from ._errors import LockLost

def in_step(e: BaseException) -> bool:
    """Whether a failed command left its connection usable (an error reply, read
    whole). Anything else (an I/O error, a timeout, -LOST, a reply that makes no
    sense) has closed it, or must."""
    return bool(getattr(e, "_in_step", False))


def broken(e: BaseException) -> bool:
    """The connection broke (closed by dlockd, reset): not a timeout, not a reply."""
    return isinstance(e, LockLost) or type(e.__cause__) is rx.ConnectionError


def connected(conn: Any) -> bool:
    """Whether a session lock's connection is still open on our side (redis-py would
    otherwise connect it again silently, as a new session that holds nothing)."""
    return conn is not None and getattr(conn, "_sock", None) is not None


def exchange(conn: Any, args: List[bytes], wait_ms: int = 0) -> Any:
    """Sends one command on ``conn`` and returns its reply, undecoded.

    ``wait_ms``: how long dlockd may rightly take before it answers (a LOCK's WAIT;
    -1 without end): the socket's read timeout is raised by that much for this reply
    alone, then restored. On failure raises the package's exception (``_in_step``
    says whether the connection is usable still; when not, it is disconnected here).
    """
    base = conn.socket_timeout
    raised = False
    try:
        conn.send_command(*args)
        if wait_ms != 0 and base is not None and conn._sock is not None:
            conn._sock.settimeout(None if wait_ms < 0 else base + wait_ms / 1000)
            raised = True
        return conn.read_response(disable_decoding=True)
    except (rx.RedisError, OSError) as e:
        err, in_step = _args.failure(e)
        err._in_step = in_step  # type: ignore[attr-defined]
        if not in_step:
            conn.disconnect()
        raise err from e
    except BaseException:
        conn.disconnect()
        raise
    finally:
        if raised and conn._sock is not None:
            conn._sock.settimeout(base)


class Pool:
    """The client's redis-py connection pool, as the package uses it."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def take(self, command: bytes) -> Any:
        """A connection of the pool, connected (and authenticated)."""
        try:
            return self.pool.get_connection(command.decode())
        except (rx.RedisError, OSError) as e:
            err, _ = _args.failure(e)
            raise err from e

    def give(self, conn: Any, clean: bool = True) -> None:
        """Back to the pool; ``clean=False`` disconnects it first (it may hold a session
        lock, or an unread reply), and the pool connects it again when next used."""
        if not clean:
            conn.disconnect()
        self.pool.release(conn)

    def call(self, args: List[bytes], wait_ms: int = 0) -> Any:
        """One command on any pooled connection. A ``-LOST`` (the connection held a
        session lock that was lost, and dlockd closed it without running the command)
        sends it again, once, on another connection."""
        for attempt in (0, 1):
            conn = self.take(args[0])
            try:
                reply = exchange(conn, args, wait_ms)
            except LockLost:
                self.give(conn, clean=False)
                if attempt == 0:
                    continue
                raise
            except BaseException as e:
                self.give(conn, clean=in_step(e))
                raise
            self.give(conn)
            return reply
        raise AssertionError("unreachable")

    def acquire(self, args: List[bytes], wait_ms: int, detached: bool) -> "tuple[Any, Optional[Any]]":
        """LOCK or SEM ACQUIRE: (its grant, the connection that holds it for a session
        lock). The connection of a session lock stays out of the pool until released;
        of a refusal or a failure it goes back (disconnected when its state is not
        known: a grant nobody can read is released by dlockd as the connection
        closes)."""
        command = b" ".join(args[:2]) if args[0] == b"SEM" else args[0]
        if detached:
            return _args.grant(self.call(args, wait_ms), command.decode()), None
        for attempt in (0, 1):
            conn = self.take(args[0])
            try:
                grant = _args.grant(exchange(conn, args, wait_ms), command.decode())
            except LockLost:
                self.give(conn, clean=False)
                if attempt == 0:
                    continue
                raise
            except BaseException as e:
                self.give(conn, clean=in_step(e))
                raise
            if grant is None:
                self.give(conn)
                return None, None
            return grant, conn
        raise AssertionError("unreachable")
