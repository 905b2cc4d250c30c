"""Client.from_url over TCP, a unix socket and TLS, with passwords right and wrong,
against a dlockd of this module's that requires one."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest
import redis

import dlock
from conftest import Servers, free_port

PASSWORD = "s3cret:/@?"
ADMIN = "adm1n"


@pytest.fixture(scope="module")
def tls(servers: Servers):
    """A CA and a certificate for 127.0.0.1 signed by it (openssl, EC keys: quick)."""
    d = servers.tmp

    def run(*argv: str) -> None:
        r = subprocess.run(["openssl", *argv], cwd=d, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    run("genpkey", *ec, "-out", "ca.key")
    run("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=dlock test CA", "-days", "2", "-out", "ca.crt")
    run("genpkey", *ec, "-out", "server.key")
    run("req", "-new", "-key", "server.key", "-subj", "/CN=127.0.0.1", "-out", "server.csr")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "server.crt")
    return d


@pytest.fixture(scope="module")
def secured(servers: Servers, tls: str):
    """dlockd with a password, the user admin, a unix socket and a TLS port."""
    d = servers.tmp
    with open(os.path.join(d, "pass"), "w") as f:
        f.write(PASSWORD + "\n")
    with open(os.path.join(d, "admin"), "w") as f:
        f.write(ADMIN + "\n")
    _, rport = servers.redis()
    sock = os.path.join(d, "dlockd.sock")
    tport = free_port()
    _, port = servers.dlockd(
        [rport],
        "--requirepass-file", os.path.join(d, "pass"),
        "--admin-pass-file", os.path.join(d, "admin"),
        "--unixsocket", sock,
        "--tls-port", str(tport),
        "--tls-cert-file", os.path.join(d, "server.crt"),
        "--tls-key-file", os.path.join(d, "server.key"),
        "--tls-auth-clients", "no",
    )
    return {"port": port, "sock": sock, "tls_port": tport, "ca": os.path.join(d, "ca.crt")}


def quoted(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")


def roundtrip(client: dlock.Client, name: str) -> None:
    with client.lock(name, ttl=5, wait=1) as lk:
        assert lk.held()
    assert client.info(name)["state"] == "free"


def test_tcp_with_the_password(secured, name):
    url = f"dlockd://:{quoted(PASSWORD)}@127.0.0.1:{secured['port']}?name=py-worker-1&timeout=2"
    with dlock.Client.from_url(url) as c:
        with c.lock(name):
            holder = c.info(name)["holder"]
            assert "py-worker-1" in holder
        roundtrip(c, name)
    with dlock.Client.from_url(f"dlockd://admin:{ADMIN}@127.0.0.1:{secured['port']}") as c:
        roundtrip(c, name)


def test_unix_socket(secured, name):
    with dlock.Client.from_url(f"dlockd+unix://:{quoted(PASSWORD)}@{secured['sock']}?timeout=2") as c:
        roundtrip(c, name)


def test_tls(secured, name):
    url = f"dlockds://:{quoted(PASSWORD)}@127.0.0.1:{secured['tls_port']}?cafile={quoted(secured['ca'])}"
    with dlock.Client.from_url(url) as c:
        roundtrip(c, name)
    # Without the CA, dlockd's certificate is not trusted: no connection.
    with pytest.raises(dlock.Unavailable):
        dlock.Client.from_url(f"dlockds://:{quoted(PASSWORD)}@127.0.0.1:{secured['tls_port']}?timeout=2")


def test_wrong_password(secured, name):
    with pytest.raises(dlock.AuthFailed):
        dlock.Client.from_url(f"dlockd://:wrong@127.0.0.1:{secured['port']}")
    with pytest.raises(dlock.AuthFailed):
        dlock.Client.from_url(f"dlockd://admin:wrong@127.0.0.1:{secured['port']}")
    c = dlock.Client(redis.Redis(port=secured["port"], password="wrong", socket_timeout=2))
    with pytest.raises(dlock.AuthFailed):
        c.acquire(name)
    with pytest.raises(dlock.AuthFailed):
        c.info(name)


def test_no_password(secured, name):
    c = dlock.Client(redis.Redis(port=secured["port"], socket_timeout=2))
    with pytest.raises(dlock.AuthFailed):
        c.acquire(name)
    with pytest.raises(dlock.AuthFailed):
        c.stock(name).status()


def test_a_password_to_a_dlockd_without_one(pair):
    """dlockd's -ERR for a password it has none to check against is a password
    refused, as the other ways are."""
    with pytest.raises(dlock.AuthFailed, match="without any password"):
        dlock.Client.from_url(f"dlockd://:pw@127.0.0.1:{pair.port}")

    async def main():
        c = dlock.asyncio.Client.from_url(f"dlockd://:pw@127.0.0.1:{pair.port}")
        with pytest.raises(dlock.AuthFailed):
            await c.ping()
        await c.close()

    asyncio.run(main())


def test_asyncio_from_url(secured, name):
    async def main():
        c = dlock.asyncio.Client.from_url(f"dlockd://:{quoted(PASSWORD)}@127.0.0.1:{secured['port']}")
        async with c:
            await c.ping()
            async with c.lock(name) as lk:
                assert await lk.held()
        bad = dlock.asyncio.Client.from_url(f"dlockd://:nope@127.0.0.1:{secured['port']}")
        with pytest.raises(dlock.AuthFailed):
            await bad.ping()
        with pytest.raises(dlock.AuthFailed):
            await bad.acquire(name)
        await bad.close()

    asyncio.run(main())


def test_nobody_there():
    port = free_port()
    with pytest.raises(dlock.Unavailable, match=f"127.0.0.1:{port}"):
        dlock.Client.from_url(f"dlockd://127.0.0.1:{port}?timeout=1")
    with pytest.raises(dlock.Unavailable):
        dlock.Client.from_url("dlockd+unix:///nonexistent/dlockd.sock")
