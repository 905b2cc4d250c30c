"""The package as shipped: its version is dlock's, its names are there, and pip installs
it offline into a venv that sees Debian's redis-py."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import tomllib


import dlock
from conftest import PACKAGE, REPO


def header_version() -> str:
    text = (REPO / "include" / "dlock.h").read_text()
    m = re.search(r'#define\s+DLOCK_VERSION_STRING\s+"([^"]+)"', text)
    assert m, "include/dlock.h has no DLOCK_VERSION_STRING"
    return m.group(1)


def test_version_is_dlocks():
    with open(PACKAGE / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert dlock.__version__ == header_version() == project["version"]


def test_exceptions():
    for cls in (
        dlock.NotAcquired,
        dlock.OutOfStock,
        dlock.LockLost,
        dlock.Unavailable,
        dlock.NoQuorum,
        dlock.AuthFailed,
        dlock.ProtocolError,
        dlock.CommandError,
        dlock.InvalidArgument,
        dlock.PoolExhausted,
    ):
        assert issubclass(cls, dlock.DlockError)
        e = cls("dlockd: UNAVAILABLE x") if cls is not dlock.OutOfStock else cls("x", False, {"stock": 2})
        e.code = "UNAVAILABLE"
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is cls and again.args == e.args and again.code == "UNAVAILABLE"
    assert issubclass(dlock.NoQuorum, dlock.Unavailable)
    assert issubclass(dlock.OutOfStock, dlock.NotAcquired)
    assert issubclass(dlock.InvalidArgument, ValueError)
    assert not issubclass(dlock.Unavailable, ValueError)
    e = dlock.OutOfStock("x", True, {"stock": 1})
    assert e.sold_out is True and e.state == {"stock": 1}
    again = pickle.loads(pickle.dumps(e))
    assert (str(again), again.sold_out, again.state) == ("x", True, {"stock": 1})
    assert not issubclass(dlock.PoolExhausted, dlock.Unavailable)  # dlockd is fine


def test_names():
    assert dlock.FOREVER == float("inf") == dlock.Client.FOREVER
    assert dlock.asyncio.Client.FOREVER == dlock.FOREVER
    for n in dlock.__all__:
        assert hasattr(dlock, n), n
    import dlock.asyncio as aio

    for n in ("Client", "Lock", "Semaphore", "Stock", "Reservation"):
        assert hasattr(aio, n), n


def test_asyncio_is_loaded_at_its_first_use():
    """``import dlock`` leaves dlock.asyncio (and redis.asyncio) unloaded: a blocking
    program's start does not pay for them. Both ways of reaching it work."""
    check = (
        "import sys, dlock\n"
        "assert 'dlock.asyncio' not in sys.modules and 'redis.asyncio' not in sys.modules\n"
        "assert 'asyncio' in dir(dlock)\n"
        "c = dlock.asyncio.Client\n"
        "import dlock.asyncio\n"
        "assert dlock.asyncio.Client is c and sys.modules['dlock.asyncio'] is dlock.asyncio\n"
    )
    r = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=PACKAGE)
    assert r.returncode == 0, r.stderr


def test_pip_installs_it_offline(tmp_path):
    """As a user without network access installs it: a venv over the system's
    site-packages (redis-py from Debian), pip without build isolation or dependencies,
    nothing downloaded."""
    src = tmp_path / "src"
    # A copy, so that the in-tree build leaves nothing behind in the work tree.
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "build"))
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True
    )
    py = venv / "bin" / "python"
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # The system's pip, run by the venv's python: installs into the venv.
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", str(src)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [str(py), "-c", "import dlock, dlock.asyncio, sys; print(dlock.__version__, dlock.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    version, path = r.stdout.split()
    assert version == header_version()
    assert path.startswith(str(venv)), path
