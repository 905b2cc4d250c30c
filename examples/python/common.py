"""What both examples share: the dlock package from this source tree, the connections
their --dlockd and --redis options name (HOST:PORT, or a unix socket's path), and what
their exit status says of an error.
"""
import argparse
import os
import sys

# The dlock package from this source tree. Installed (pip install clients/python), it
# is found without this line.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "clients", "python"))

import dlock  # noqa: E402
import redis  # noqa: E402

EXIT_TEMPFAIL = 75


def address(s, default_port):
    """'host:port' to (host, port); a path starting with '/' is a unix socket (path, 0)."""
    if s.startswith("/"):
        return s, 0
    host, _, port = s.rpartition(":")
    return (host, int(port)) if host else (s, default_port)


def dlockd_client(where):
    """A dlock.Client of the dlockd at ``where``. from_url connects at once, so a
    dlockd that cannot be reached, or refuses the connection, is an error here. A
    waiting LOCK raises the read timeout by its wait for its own reply; timeout=5 is
    for everything else."""
    host, port = address(where, 7379)
    url = f"dlockd+unix://{host}" if port == 0 else f"dlockd://{host}:{port}"
    return dlock.Client.from_url(f"{url}?timeout=5")


def redis_client(where):
    """A redis.Redis of the Redis at ``where`` (the data the example works on)."""
    host, port = address(where, 6379)
    kw = {"unix_socket_path": host} if port == 0 else {"host": host, "port": port}
    return redis.Redis(**kw, socket_connect_timeout=2, socket_timeout=5)


def exit_status(e):
    """75 (try later) when dlockd or its lock servers could not decide (dlock.Unavailable,
    and dlock.NoQuorum, one of them); 1 for any other error (dlock.AuthFailed, a
    dlock.CommandError: a mistake here or in the setup, which a retry would repeat)."""
    return EXIT_TEMPFAIL if isinstance(e, dlock.Unavailable) else 1


def count(s):
    """A count (of steps, units, ms or us): digits only (a usage error otherwise, exit 2)."""
    if not s.isdigit():
        raise argparse.ArgumentTypeError(f"not a number: {s!r}")
    return int(s)
