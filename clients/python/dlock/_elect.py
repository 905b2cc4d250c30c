"""The blocking client's leader election: a Leadership, kept on a connection of its
own as a session lock is, and an Observer, a redis-py PubSub on ``leader:NAME`` on a
connection of its own.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Iterator, Optional

from . import _args
from ._args import Name
from ._errors import io_error, take_failure
from ._leader import Leader, LeadershipBase, ObserverBase, channel, deadline, value_bytes

__all__ = ["Leadership", "Observer", "Leader"]


class Leadership(LeadershipBase):
    """A leadership won with ``Client.elect()``: this process leads ``name`` until it
    resigns, its connection closes (the process dies, the Leadership is
    garbage-collected without ``resign()``) or an operator deposes it.

    Used as a context manager, leaving the block resigns, however the block ends, and
    raises :class:`LockLost` when the resignation found the leadership already gone
    (the block's work was not wholly done as the leader) and the block raised nothing.

    Read-only attributes: ``name``, ``token``, ``term`` (int, greater than every
    earlier leader's: hand it to what the leader acts on, so that it can refuse a
    deposed leader that still believes it leads), ``value`` (the value announced,
    or the last one proclaimed here), ``validity`` (seconds of lease left at the
    election: a snapshot) and ``resigned``. Safe to share between threads.
    """

    def proclaim(self, value: Name) -> None:
        """Announces a new value for this term (the term stays): observers hear it.
        Raises :class:`LockLost` when this process no longer leads."""
        raw = value_bytes(value)
        seat = self._seat
        with seat._mutex:
            if seat._released or seat._session_over():
                raise self._not_leading()
            if not seat._session_call(self._proclaim_args(raw)):
                raise self._not_leading()
            self._value = _args.text(raw)

    def is_leading(self) -> bool:
        """Asks dlockd whether this leadership still holds (CHECK: read-only)."""
        return bool(self._seat.held())

    def resign(self) -> bool:
        """Steps down: observers hear at once that no one leads, and the next
        candidate waiting is elected. True, or False when the leadership was already
        gone (resigned, lost, or ended with its connection). Raises
        :class:`Unavailable` when dlockd could not be asked: the connection is then
        closed, which resigns it too."""
        return bool(self._seat.release())

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._seat.__exit__(*exc)


class Observer(ObserverBase):
    """The changes of who leads ``name``, from ``Client.observe()``: an iterator of
    :class:`Leader` (term and value; term 0 and value None when no one leads), the
    first the state when it was made, then each change, in term order::

        with client.observe("scheduler") as changes:
            for leader in changes:
                route_to(leader.value)

    Subscribed from its making (the state of that moment comes first), on a
    connection of its pool of its own, until ``close()`` (or the end of ``with``, or
    its garbage collection). ``get(timeout)`` waits for the next change at most
    ``timeout`` seconds (None when none came). A change that another followed before
    the observer heard it may be skipped, but a term never comes after a larger one.

    Threads may share it (their reads take turns); ``close()`` may come from any
    thread, and ends a read under way (``get()`` returns None, the iteration stops). When the connection
    breaks, the observer closes and the read raises :class:`Unavailable`: observe
    again, which starts with the state of then.
    """

    def __init__(self, redis_client: Any, pool: Any, name: bytes) -> None:
        super().__init__(name)
        self._pool = pool
        self._pid = os.getpid()
        self._mu = threading.Lock()  # held by the read under way
        # The connections of locks and observers collected without a release go back
        # first: redis-py's PubSub takes its connection from the pool directly.
        pool._give_orphans()
        self._pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
        try:
            self._pubsub.subscribe(channel(name))
        except BaseException as e:
            self._closed = True
            self._drop()
            if io_error(e):
                raise take_failure(e, pool.pool) from e
            raise

    def _drop(self) -> None:
        """The subscription's connection closed (dlockd drops the subscription with
        it) and back in the pool; only with no read under way."""
        conn, self._pubsub.connection = self._pubsub.connection, None
        if conn is not None:
            conn.clear_connect_callbacks()  # no resubscribing for its next user
            self._pool.give(conn, clean=False)

    def _wake(self) -> None:
        """Ends the read under way in another thread: it finds its socket shut."""
        sock = getattr(self._pubsub.connection, "_sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def get(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next change, waiting at most ``timeout`` seconds for it (None: without
        end; 0: only one already come): a :class:`Leader`, or None when none came in
        time or the observer is closed."""
        until = deadline(timeout)
        with self._mu:
            for wait in self._polls(until):
                try:
                    change = self._news(self._pubsub.get_message(timeout=wait))
                except BaseException as e:
                    err = self._failed_read(e)
                    if err is None:
                        return None  # close() ended the read
                    self._drop()
                    raise err
                if change is not None:
                    return change
        return None

    def close(self) -> None:
        """Unsubscribes: closes the subscription's connection (back in the pool).
        From any thread; a read under way ends with None."""
        self._closed = True
        if not self._mu.acquire(blocking=False):
            self._wake()
            self._mu.acquire()
        try:
            self._drop()
        finally:
            self._mu.release()

    def __iter__(self) -> Iterator[Leader]:
        return self

    def __next__(self) -> Leader:
        change = self.get()
        if change is None:
            raise StopIteration
        return change

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Dropped without close(): its connection closes and goes back to the pool at
        # the pool's next use, as a lock's does (the collector may run inside the
        # pool's own code, holding its lock).
        try:
            ps = self._pubsub
            conn, ps.connection = ps.connection, None
            if conn is not None:
                conn.clear_connect_callbacks()
                if os.getpid() == self._pid:
                    self._pool.orphan(conn)
        except Exception:
            pass
