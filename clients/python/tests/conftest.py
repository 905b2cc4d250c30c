"""Real servers for the tests: redis-server processes as lock servers and dlockd
($DLOCKD) in front of them, each on a free port of 127.0.0.1, started by the tests
and stopped when they end. Nothing is skipped: a missing dlockd, redis-server or
Python module fails the run with its name.

    DLOCKD=build/dlockd /usr/bin/python3 -m pytest clients/python/tests
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Optional

import pytest
import redis

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent
REPO = PACKAGE.parent.parent

# The package under test is the one beside the tests, not one installed elsewhere.
sys.path.insert(0, str(PACKAGE))

import dlock  # noqa: E402


def slack() -> float:
    """DLOCK_TEST_SLACK: what time bounds are multiplied by on slow machines."""
    try:
        return max(1.0, float(os.environ.get("DLOCK_TEST_SLACK") or 1))
    except ValueError:
        return 1.0


def dlockd_exe() -> str:
    exe = os.environ.get("DLOCKD")
    if not exe:
        raise RuntimeError("$DLOCKD is not set: the dlockd binary to test against (e.g. DLOCKD=build/dlockd)")
    if not os.access(exe, os.X_OK):
        raise RuntimeError(f"$DLOCKD={exe} is not an executable")
    return exe


def redis_exe() -> str:
    exe = os.environ.get("DLOCK_REDIS_SERVER") or shutil.which("redis-server")
    if not exe:
        raise RuntimeError("redis-server is missing: apt-get install redis-server, or set $DLOCK_REDIS_SERVER")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server process a test started, stopped by its PID."""

    def __init__(self, argv: List[str], log: str) -> None:
        self.argv = argv
        self.log = log
        with open(log, "ab") as out:
            self.p = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
            )
        self.pid = self.p.pid

    def running(self) -> bool:
        return self.p.poll() is None

    def pause(self) -> None:
        """SIGSTOP: a process that keeps its sockets open and answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: as a crash ends it, with nothing run on its way out."""
        self.stop(signal.SIGKILL)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.p.poll() is not None:
            return
        try:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, sig)
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        except ProcessLookupError:
            self.p.wait()

    def log_text(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


class Servers:
    """The processes one test module (or one test) started; all stopped by stop()."""

    def __init__(self, tmp: str) -> None:
        self.tmp = tmp
        self.procs: List[Proc] = []

    def _start(
        self, what: str, argv_for: Callable[[int], List[str]], at: Optional[int] = None
    ) -> "tuple[Proc, int]":
        last = ""
        for _ in range(5 if at is None else 1):
            port = free_port() if at is None else at
            log = os.path.join(self.tmp, f"{what}-{port}.log")
            p = Proc(argv_for(port), log)
            deadline = time.monotonic() + 10 * slack()
            while time.monotonic() < deadline and p.running():
                if _listening(port):
                    self.procs.append(p)
                    return p, port
                time.sleep(0.01)
            last = p.log_text()
            p.stop()
        raise RuntimeError(f"{what} did not start; its log: {last}")

    def redis(self) -> "tuple[Proc, int]":
        exe = redis_exe()
        return self._start(
            "redis",
            lambda port: [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        )

    def dlockd(self, ports: List[int], *extra: str, at: Optional[int] = None) -> "tuple[Proc, int]":
        """dlockd in front of the redis-servers of ``ports``, on a free port (or on
        ``at``), without a drain at shutdown unless ``extra`` says otherwise."""
        exe = dlockd_exe()
        urls = ",".join(f"redis://127.0.0.1:{p}" for p in ports)
        return self._start(
            "dlockd", lambda port: [exe, "-s", urls, "-p", str(port), "--shutdown-timeout", "0", *extra], at
        )

    def pair(self, *extra: str) -> "Pair":
        r, rport = self.redis()
        d, dport = self.dlockd([rport], *extra)
        return Pair(d, dport, r, rport)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()


class Pair:
    """A dlockd in front of one redis-server."""

    def __init__(self, dlockd: Proc, port: int, redis_proc: Proc, redis_port: int) -> None:
        self.dlockd = dlockd
        self.port = port
        self.redis = redis_proc
        self.redis_port = redis_port

    def redis_client(self, **kw) -> redis.Redis:
        """A redis.Redis connected to dlockd, as an application makes one."""
        kw.setdefault("socket_timeout", 5)
        kw.setdefault("socket_connect_timeout", 2)
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def client(self, **kw) -> dlock.Client:
        return dlock.Client(self.redis_client(**kw))

    def aio_client(self, **kw) -> "dlock.asyncio.Client":
        import redis.asyncio

        kw.setdefault("socket_timeout", 5)
        kw.setdefault("socket_connect_timeout", 2)
        return dlock.asyncio.Client(redis.asyncio.Redis(host="127.0.0.1", port=self.port, **kw))


def _servers() -> Iterator[Servers]:
    with tempfile.TemporaryDirectory(prefix="dlock-py-") as tmp:
        s = Servers(tmp)
        try:
            yield s
        finally:
            s.stop()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    """Processes the module starts: stopped at its end."""
    yield from _servers()


@pytest.fixture(scope="module")
def pair(servers: Servers) -> Pair:
    """The module's redis-server and dlockd."""
    return servers.pair()


@pytest.fixture
def own() -> Iterator[Servers]:
    """Processes one test starts (to stop, pause or kill them): stopped at its end."""
    yield from _servers()


@pytest.fixture
def client(pair: Pair) -> Iterator[dlock.Client]:
    r = pair.redis_client()
    yield dlock.Client(r)
    r.connection_pool.disconnect()


_names = iter(range(1, 1 << 30))


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock name of the test's own."""
    return f"py:{request.node.name}:{next(_names)}"


def eventually(pred: Callable[[], bool], within: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + within * slack()
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
