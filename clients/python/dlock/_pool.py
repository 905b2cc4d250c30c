"""The blocking client's connection layer: a command's round trip on one connection of
a redis-py pool, and a session lock's own connection, taken from the pool for as long
as the lock is held.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import redis.exceptions as rx

from . import _args
from ._base import PoolBase, Request
from ._errors import LockLost, failed, in_step, take_failure


def exchange(conn: Any, args: List[bytes], wait: Optional[int] = None, own: bool = False) -> Any:
    """Sends one command on ``conn`` and returns its reply, undecoded.

    ``wait``: for a command dlockd may rightly answer late (a LOCK's WAIT, in ms; -1
    without end), the read timeout for this reply alone (_args.read_timeout), then
    restored. ``own``: a session lock's command on its own connection, sent as it is:
    redis-py's health check would connect again after a failed PING and send the
    command on the new connection, a session that does not hold the lock (the caller
    has checked that the connection is the one of the grant). On failure raises the
    package's exception (``_in_step`` says whether the connection is usable still;
    when not, it is disconnected here).
    """
    base = conn.socket_timeout
    timeout = _args.read_timeout(base, wait)
    raised = False
    try:
        if own:
            conn.send_packed_command(conn.pack_command(*args), check_health=False)
        else:
            conn.send_command(*args)
        if timeout != base and conn._sock is not None:
            conn._sock.settimeout(timeout)
            raised = True
        return conn.read_response(disable_decoding=True)
    except (rx.RedisError, OSError) as e:
        err = failed(e)
        if not in_step(err):
            conn.disconnect()
        raise err from e
    except BaseException:
        conn.disconnect()
        raise
    finally:
        if raised and conn._sock is not None:
            conn._sock.settimeout(base)


class Pool(PoolBase):
    """The client's redis-py connection pool, as the package uses it."""

    _link = "_sock"  # a connection's socket

    def orphan(self, conn: Any) -> None:
        """The connection of a lock collected without release(): closed now (dlockd
        releases the lock), back in the pool later. Takes no lock."""
        conn.disconnect()
        self._orphans.append(conn)

    def _give_orphans(self) -> None:
        while True:
            try:
                conn = self._orphans.popleft()
            except IndexError:
                return
            self.pool.release(conn)

    def take(self, command: bytes) -> Any:
        """A connection of the pool, connected (and authenticated)."""
        self._give_orphans()
        try:
            return self.pool.get_connection(command.decode())
        except (rx.RedisError, OSError) as e:
            raise take_failure(e, self.pool) from e

    def give(self, conn: Any, clean: bool = True) -> None:
        """Back to the pool; ``clean=False`` disconnects it first (it may hold a session
        lock, or an unread reply), and the pool connects it again when next used."""
        if not clean:
            conn.disconnect()
        self.pool.release(conn)
        self._give_orphans()

    def call(
        self, args: List[bytes], wait: Optional[int] = None, hold: Optional[Callable[[Any, Any], Any]] = None
    ) -> Any:
        """One command on any pooled connection: its reply. A ``-LOST`` (the connection
        held a session lock that was lost, and dlockd closed it without running the
        command) sends it again, once, on another connection.

        ``hold``: for a session lock's LOCK, what makes of the reply and the connection
        the Lock that keeps the connection, returned; None (not granted) gives the
        connection back. A failure before the Lock is whole, an interrupt included,
        closes the connection: dlockd releases what it may have granted."""
        for attempt in (0, 1):
            conn = self.take(args[0])
            try:
                reply = exchange(conn, args, wait)
                if hold is not None:
                    reply = hold(reply, conn)
                    if reply is not None:
                        return reply
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

    def acquire(self, req: Request) -> Any:
        """LOCK or SEM ACQUIRE: the Lock, or None. A session lock's connection stays
        out of the pool with it until released."""
        if req.detached:
            return req.hold(self.call(req.args, req.wait), None)
        return self.call(req.args, req.wait, req.hold)
