"""Bad arguments are InvalidArgument before anything is sent: the client here points at
a port nobody listens on, so a command that went out would be Unavailable instead.
Good ones that look odd (a CR LF in a name, a 4096-byte one) go through to dlockd."""

from __future__ import annotations

import asyncio
import math

import pytest
import redis
import redis.asyncio

import dlock
from conftest import free_port

# 2147483.6475 s rounds to 2147483648 ms, one past dlockd's limit; 10**400 is no float.
BAD_WAITS = [-1, -0.001, None, math.nan, -math.inf, 2147483.648 + 1, 2147483.6475, 10**400, "5", True]
BAD_TTLS = [0, 0.009, -1, 2147483.648, math.inf, math.nan, None, "10", True, 10**400]


@pytest.fixture(scope="module")
def nowhere():
    return dlock.Client(redis.Redis(port=free_port(), socket_connect_timeout=0.5))


def test_names(nowhere):
    for bad in ["", "x" * 4097, "é" * 2049, "a\0b", b"", b"\0", 42, None, "\udcff"]:
        with pytest.raises(dlock.InvalidArgument):
            nowhere.acquire(bad)
        with pytest.raises(dlock.InvalidArgument):
            nowhere.info(bad)
    with pytest.raises(dlock.InvalidArgument, match="1 to 4096 bytes"):
        nowhere.lock("n" * 65536)
    # A good name gets as far as the connection.
    with pytest.raises(dlock.Unavailable):
        nowhere.acquire("x" * 4096)


def test_waits(nowhere):
    for bad in BAD_WAITS:
        with pytest.raises(dlock.InvalidArgument):
            nowhere.acquire("n", wait=bad)
        with pytest.raises(dlock.InvalidArgument):
            nowhere.lock("n", wait=bad)
    with pytest.raises(ValueError, match="FOREVER"):
        nowhere.acquire("n", wait=-5)
    for good in (0, 0.0, 0.0001, 1, 2147483.647, dlock.FOREVER):
        with pytest.raises(dlock.Unavailable):
            nowhere.acquire("n", wait=good)


def test_ttls(nowhere):
    for bad in BAD_TTLS:
        with pytest.raises(dlock.InvalidArgument):
            nowhere.acquire("n", ttl=bad)
    for bad in (0, -1, 0.001):
        with pytest.raises(dlock.InvalidArgument):
            nowhere.stock("s").reserve(1, lease=bad)
    with pytest.raises(dlock.InvalidArgument):
        nowhere.acquire("n", max_hold=-1)
    with pytest.raises(dlock.InvalidArgument):
        nowhere.acquire("n", detached=True, max_hold=5)
    with pytest.raises(dlock.InvalidArgument):
        nowhere.acquire("n", label="")
    with pytest.raises(dlock.InvalidArgument):
        nowhere.acquire("n", label="x" * 257)
    for bad in (10**400, math.nan):
        with pytest.raises(dlock.InvalidArgument):
            nowhere.acquire("n", max_hold=bad)


def test_labels_flags_and_fences(nowhere):
    with pytest.raises(dlock.InvalidArgument, match="UTF-8"):
        nowhere.acquire("n", label="\udcff")
    for good in (bytearray(b"w-1"), memoryview(b"w-1"), b"w 1\r\n"):  # as names take them
        with pytest.raises(dlock.Unavailable):
            nowhere.acquire("n", label=good)
    for option in ("shared", "fair", "detached"):
        for bad in ("no", 1, None):
            with pytest.raises(dlock.InvalidArgument, match=option):
                nowhere.acquire("n", **{option: bad})
    with pytest.raises(dlock.InvalidArgument):
        nowhere.semaphore("s", 2, fair="yes")
    token = "0" * 32
    for bad in ("1", -1, True, 1.0, None, 2**64):
        with pytest.raises(dlock.InvalidArgument, match="fence"):
            nowhere.adopt("n", token, bad)
    assert nowhere.adopt("n", token, 7).fence == 7
    assert nowhere.adopt("n", token, 2**64 - 1).fence == 2**64 - 1
    raw = b"\xff\xfe"  # a name that is not UTF-8: name_bytes gives it back exactly
    lk = nowhere.adopt(raw, token)
    assert lk.name == "\ufffd\ufffd" and lk.name_bytes == raw


def test_counts(nowhere):
    for bad in (0, -1, 2**31, 1.5, True):
        with pytest.raises(dlock.InvalidArgument):
            nowhere.semaphore("s", bad)
    st = nowhere.stock("sku")
    for bad in (0, -1, 10**12 + 1, 1.0):
        with pytest.raises(dlock.InvalidArgument):
            st.reserve(bad)
    for bad in (-1, 10**12 + 1):
        with pytest.raises(dlock.InvalidArgument):
            st.set(bad)
    for bad in (0, 10**12 + 1, -(10**12) - 1):
        with pytest.raises(dlock.InvalidArgument):
            st.add(bad)
    for bad in ("", "ABCDEF0123456789abcdef0123456789", "x" * 32, "0" * 31):
        with pytest.raises(dlock.InvalidArgument):
            st.reservation(bad)
        with pytest.raises(dlock.InvalidArgument):
            nowhere.adopt("n", bad)


def test_asyncio_checks_before_sending():
    c = dlock.asyncio.Client(redis.asyncio.Redis(port=free_port(), socket_connect_timeout=0.5))

    async def main():
        for bad in BAD_WAITS:
            with pytest.raises(dlock.InvalidArgument):
                await c.acquire("n", wait=bad)
            with pytest.raises(dlock.InvalidArgument):
                c.lock("n", wait=bad)  # checked when called, before any await
        with pytest.raises(dlock.InvalidArgument):
            c.lock("n" * 65536)
        with pytest.raises(dlock.InvalidArgument):
            await c.info("")
        with pytest.raises(dlock.Unavailable):
            await c.acquire("n")

    asyncio.run(main())


def test_clients_take_their_kind():
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client(object())
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client(redis.asyncio.Redis())
    with pytest.raises(dlock.InvalidArgument):
        dlock.asyncio.Client(redis.Redis())


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:7379",
        "dlockd://",
        "dlockd://h:0",
        "dlockd://h:70000",
        "dlockd://h?bogus=1",
        "dlockd://h?timeout=0",
        "dlockd://h?timeout=x",
        "dlockd://h?timeout=1&timeout=2",
        "dlockd://h?maxhold=-1",
        "dlockd://h?name=has%20space",
        "dlockd://h?cafile=/x",
        "dlockd://someone:pw@h",
        "dlockd+unix://",
        "dlockd+unix://host/path",
        "dlockd+unix://host:1/path",
        "dlockd://h:1/5",
        "dlockd://h/db",
        "dlockd://h#x",
        "dlockd://h?timeout=1#",
        "dlockd://h?maxhold=%C2%B2",
        "dlockd://h?maxhold=%D9%A1%D9%A2",
        "dlockd://h?timeout=%D9%A1",
        "dlockd://h?timeout=1_0",
        "dlockd://h?name=%C3%A9",
        "dlockd://h?name=",
        "dlockds://h?cafile=",
        "dlockds://h?cafile=/ca&key=",
        "dlockd://:%FF@h",
        "dlockd://h?name=%FF",
        "dlockd+unix:///tmp/%FF.sock",
    ],
)
def test_bad_urls(url):
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client.from_url(url)
    with pytest.raises(dlock.InvalidArgument):
        dlock.asyncio.Client.from_url(url)


@pytest.mark.parametrize(
    "url", ["dlockd://:s3cret@h/0", "dlockd://admin:s3cret@h#x", "dlockd://:s3cret@h:99999", "dlockd://:s3cret%FF@h"]
)
def test_bad_url_hides_its_password(url):
    """An error names the URL, as it ends up in logs: with its password masked."""
    with pytest.raises(dlock.InvalidArgument) as e:
        dlock.Client.from_url(url)
    assert "s3cret" not in str(e.value) and "***@h" in str(e.value)


def test_urls():
    from dlock._url import parse

    u = parse("dlockd://:p%40ss@example.org?timeout=2.5&name=w-1&maxhold=60000")
    assert (u.host, u.port, u.user, u.password, u.timeout, u.name, u.max_hold) == (
        "example.org", 7379, None, "p@ss", 2.5, "w-1", 60.0,
    )
    kw = u.redis_kwargs()
    assert kw["socket_timeout"] == 2.5 and kw["client_name"] == "w-1" and "ssl" not in kw
    u = parse("dlockds://admin:pw@[::1]:7380?cafile=/ca.crt&cert=/c.crt&key=/c.key")
    kw = u.redis_kwargs()
    assert (u.host, u.port, u.user) == ("::1", 7380, "admin")
    assert kw["ssl"] and kw["ssl_ca_certs"] == "/ca.crt" and kw["ssl_certfile"] == "/c.crt"
    assert parse("dlockd://h/?timeout=.5").timeout == 0.5
    assert parse("dlockd://h?maxhold=0").max_hold == 0
    u = parse("dlockd+unix:///run/dlockd/dlockd.sock?timeout=1")
    assert u.redis_kwargs()["unix_socket_path"] == "/run/dlockd/dlockd.sock"
    assert "host" not in u.redis_kwargs()


class FakeConnection:
    """A pooled connection whose replies are scripted: enough to see what the package
    does with them, without a server."""

    socket_timeout = 1.0

    def __init__(self, replies):
        self.replies = replies
        self.sent = []
        self._sock = object()
        self.disconnected = False

    def send_command(self, *args, **kw):
        self.sent.append(args)

    def read_response(self, disable_decoding=False):
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def disconnect(self):
        self.disconnected = True
        self._sock = None


class FakePool:
    def __init__(self, *conns):
        self.conns = list(conns)
        self.given = []

    def get_connection(self, command, *keys, **options):
        return self.conns.pop(0)

    def release(self, conn):
        self.given.append(conn)


def fake_client(*conns):
    r = redis.Redis()
    r.connection_pool = FakePool(*conns)
    return dlock.Client(r), r.connection_pool


def test_a_command_that_reads_lost_is_sent_again():
    lost = redis.exceptions.ResponseError("LOST session lock 'x' was lost (...): closing the connection")
    first = FakeConnection([lost])
    second = FakeConnection([[b"state", b"free", b"holder", None, b"remaining_ms", 0, b"fence", 7]])
    c, pool = fake_client(first, second)
    assert c.info("n") == {"state": "free", "holder": None, "remaining_ms": 0, "fence": 7}
    assert first.disconnected and not second.disconnected
    assert pool.given == [first, second]
    assert first.sent == second.sent == [(b"LOCKINFO", b"n")]
    # Twice in a row is not retried again.
    c, _ = fake_client(FakeConnection([lost]), FakeConnection([lost]))
    with pytest.raises(dlock.LockLost):
        c.info("n")


def failure_of(error):
    """What a command whose reply is ``error`` (raised by redis-py) raises, and whether
    its connection was closed for it; the connection goes back to the pool either way."""
    conn = FakeConnection([error])
    c, pool = fake_client(conn)
    with pytest.raises(dlock.DlockError) as e:
        c.stock("s").status()
    assert pool.given == [conn]
    return e.value, conn.disconnected


@pytest.mark.parametrize(
    "line, cls, closes",
    [
        ("UNAVAILABLE lock server down: x", dlock.Unavailable, False),
        ("NOQUORUM 1 of 3 answered", dlock.NoQuorum, False),
        ("SHUTDOWN dlockd is shutting down", dlock.Unavailable, False),
        ("WRONGPASS invalid password", dlock.AuthFailed, False),
        ("unknown option 'X'", dlock.CommandError, False),
        ("AUTH <password> called without any password configured for the default user", dlock.AuthFailed, False),
        ("Protocol error: too big", dlock.ProtocolError, True),
        ("NOPROTO sorry", dlock.ProtocolError, False),
    ],
)
def test_error_replies(line, cls, closes):
    """dlockd's error replies, which redis-py raises as a bare ResponseError with the
    whole line (an -ERR's without its ERR)."""
    err, closed = failure_of(redis.exceptions.ResponseError(line))
    assert type(err) is cls
    assert closed is closes
    word = line.split(" ", 1)[0]
    if word in ("UNAVAILABLE", "NOQUORUM", "WRONGPASS"):
        assert err.code == word  # dlockd's code word, for the program to read


@pytest.mark.parametrize(
    "error, cls, closes",
    [
        (redis.exceptions.AuthenticationError("Authentication required."), dlock.AuthFailed, True),
        (redis.exceptions.NoPermissionError("this user has no permissions"), dlock.AuthFailed, False),
        (redis.exceptions.BusyLoadingError("Redis is loading"), dlock.Unavailable, True),
        (redis.exceptions.ConnectionError("Connection closed by server."), dlock.Unavailable, True),
        (redis.exceptions.TimeoutError("Timeout reading"), dlock.Unavailable, True),
        (redis.exceptions.InvalidResponse("Protocol Error: b'?'"), dlock.ProtocolError, True),
    ],
)
def test_redis_py_errors(error, cls, closes):
    """The exceptions redis-py makes of the errors it knows, and of a connection that
    failed."""
    err, closed = failure_of(error)
    assert type(err) is cls
    assert closed is closes


def test_a_reply_that_makes_no_sense():
    conn = FakeConnection([b"what?"])
    c, pool = fake_client(conn)
    with pytest.raises(dlock.ProtocolError, match="not \\[token, fence, validity\\]"):
        c.acquire("n")
    assert conn.disconnected  # a grant nobody can read: dlockd releases it at close


def test_a_max_hold_under_a_ms_is_a_ms():
    """Rounded to 0 it would be MAXHOLD 0: no limit at all."""
    conn = FakeConnection([["0" * 32, 1, 1000]])
    c, _ = fake_client(conn)
    lk = c.acquire("n", max_hold=0.0004)
    assert conn.sent[0][-2:] == (b"MAXHOLD", b"1")
    assert lk is not None
