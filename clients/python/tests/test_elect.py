"""Leader election: campaigns, terms, proclamations and resignations, a leader killed
and followed at once by the candidate that waits, and observers that hear each change
in term order; blocking and asyncio. Time bounds are upper bounds times
DLOCK_TEST_SLACK."""

from __future__ import annotations

import asyncio
import gc
import re
import subprocess
import sys
import threading
import time
from typing import List, Optional

import pytest
import redis

import dlock
import dlock.asyncio
from conftest import PACKAGE, eventually, slack

NOBODY = dlock.Leader(0, None)


def connected_clients(pair) -> int:
    r = redis.Redis(port=pair.port, socket_timeout=5)
    try:
        return int(r.execute_command("INFO")["connected_clients"]) - 1  # less this one
    finally:
        r.connection_pool.disconnect()


# Campaigns -----------------------------------------------------------------------------


def test_elect_and_resign(client, name):
    with client.elect(name, value="10.0.0.7:8080", ttl=10) as lead:
        assert isinstance(lead, dlock.Leadership)
        assert isinstance(lead.term, int) and lead.term > 0
        assert re.fullmatch(r"[0-9a-f]{32}", lead.token)
        assert lead.value == "10.0.0.7:8080" and lead.name == name
        assert 9 < lead.validity <= 10
        assert lead.is_leading() and not lead.resigned
        seen = client.leader(name)
        assert seen is not None
        assert seen["value"] == "10.0.0.7:8080" and seen["term"] == lead.term
        assert isinstance(seen["holder"], str) and seen["holder"]
        assert 0 < seen["remaining_ms"] <= 10000
        # The lock of the name is the leadership's, its fence the term.
        assert client.info(name)["fence"] == lead.term
        assert "leading" in repr(lead)
    assert client.leader(name) is None
    assert lead.resigned and not lead.is_leading()
    assert lead.resign() is False  # resigned already
    assert "resigned" in repr(lead)


def test_leader_of_a_name_never_elected(client, name):
    assert client.leader(name) is None


def test_by_hand(client, name):
    lead = client.elect(name, value="v", ttl=10, wait=0)
    assert client.leader(name)["term"] == lead.term
    assert lead.resign() is True
    assert client.leader(name) is None
    assert lead.resign() is False


def test_exception_inside_the_block_resigns_and_is_raised(client, name):
    with pytest.raises(ZeroDivisionError):
        with client.elect(name, ttl=10) as lead:
            1 / 0
    assert lead.resigned
    assert client.leader(name) is None
    with client.elect(name, ttl=10, wait=0) as again:  # free at once
        assert again.term > lead.term


def test_another_candidate_is_not_elected(pair, client, name):
    other = pair.client()
    with client.elect(name, value="first", ttl=10) as lead:
        with pytest.raises(dlock.NotAcquired):
            other.elect(name, wait=0)
        # The same Client from another thread: a connection of its own, so a refusal
        # rather than dlockd's "this connection already holds".
        with pytest.raises(dlock.NotAcquired):
            client.elect(name, wait=0)
        t = time.monotonic()
        with pytest.raises(dlock.NotAcquired, match="not elected"):
            other.elect(name, wait=0.3)
        assert 0.25 < time.monotonic() - t < 2 * slack()
        assert client.leader(name)["value"] == "first"
        assert lead.is_leading()
    other.redis.connection_pool.disconnect()


def test_proclaim(client, name):
    with client.elect(name, value="a", ttl=10) as lead:
        term = lead.term
        lead.proclaim("a2 with spaces")
        assert lead.value == "a2 with spaces" and lead.term == term
        assert client.leader(name)["value"] == "a2 with spaces"
        assert client.leader(name)["term"] == term
        lead.proclaim(b"")  # empty is a value too
        assert client.leader(name)["value"] == ""
    with pytest.raises(dlock.LockLost):
        lead.proclaim("after")
    assert client.leader(name) is None


def test_arguments(client, name):
    for bad in ({"value": "x" * 1025}, {"value": "a\0b"}, {"wait": None}, {"wait": -1},
                {"ttl": 0}, {"fair": "yes"}, {"value": 5}):
        with pytest.raises(dlock.InvalidArgument):
            client.elect(name, **bad)
    with pytest.raises(dlock.InvalidArgument):
        client.elect("")
    with pytest.raises(dlock.CommandError):
        client.elect(name, ttl=0.5)  # dlockd's floor for a leadership: 1 s
    with client.elect(name, value="v" * 1024, ttl=1, label="me") as lead:
        assert client.leader(name)["value"] == "v" * 1024
        with pytest.raises(dlock.InvalidArgument):
            lead.proclaim("x" * 1025)
        assert lead.is_leading()


def test_leadership_dropped_without_resign(pair, name):
    c = pair.client()
    lead = c.elect(name, ttl=10)
    term = lead.term
    del lead
    gc.collect()
    # Its connection closed: dlockd resigned it at once, not at the end of its lease.
    assert eventually(lambda: c.leader(name) is None, 1)
    with c.elect(name, ttl=10, wait=1 * slack()) as lead:
        assert lead.term > term
    c.redis.connection_pool.disconnect()


def test_threads_take_turns(pair, name):
    """Threads sharing one Client campaign for the same name: one leads at a time,
    each once, terms rising."""
    client = pair.client()
    leading = 0
    most = 0
    terms: List[int] = []
    mu = threading.Lock()

    def candidate(i: int) -> None:
        nonlocal leading, most
        with client.elect(name, value=f"c{i}", ttl=10, wait=20 * slack()) as lead:
            with mu:
                leading += 1
                most = max(most, leading)
                terms.append(lead.term)
            time.sleep(0.01)
            assert client.leader(name)["value"] == f"c{i}"
            with mu:
                leading -= 1

    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            candidate(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30 * slack())
    assert not errors, errors
    assert most == 1 and len(terms) == 6
    assert terms == sorted(terms) and len(set(terms)) == 6
    assert client.leader(name) is None
    client.redis.connection_pool.disconnect()


# Failover ------------------------------------------------------------------------------

LEADER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import dlock, redis
client = dlock.Client(redis.Redis(port=int(sys.argv[2]), socket_timeout=5))
lead = client.elect(sys.argv[3], value="first", ttl=10, wait=0)
print(lead.term, flush=True)
time.sleep(120)
"""


def test_failover_when_the_leader_is_killed(pair, name):
    """A leader that dies (SIGKILL: nothing runs on its way out) is followed by the
    waiting candidate within a second, not at the end of its 10 s lease: its
    connection's close resigns it."""
    w = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(PACKAGE), str(pair.port), name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    c = pair.client()
    try:
        line = w.stdout.readline()
        assert line.strip().isdigit(), w.stderr.read()
        first = int(line)
        seen = c.leader(name)
        assert seen["value"] == "first" and seen["term"] == first
        result = {}

        def campaign() -> None:
            try:
                lead = c.elect(name, value="second", ttl=10, wait=10 * slack())
                result["at"] = time.monotonic()
                result["lead"] = lead
            except BaseException as e:  # noqa: BLE001 - checked below
                result["error"] = e

        t = threading.Thread(target=campaign)
        t.start()
        time.sleep(0.3)  # the candidate waits in dlockd by now
        assert "lead" not in result and "error" not in result
        w.kill()
        killed = time.monotonic()
        t.join(10 * slack())
        assert "error" not in result, result.get("error")
        lead = result["lead"]
        assert result["at"] - killed < 1 * slack()
        assert lead.term > first
        assert c.leader(name)["value"] == "second"
        assert lead.resign()
    finally:
        w.kill()
        w.wait()
        w.stdout.close()
        w.stderr.close()
        c.redis.connection_pool.disconnect()


# Observers -----------------------------------------------------------------------------


def check_changes(seen: List[dlock.Leader]) -> None:
    """Nobody, a, a2 (same term), nobody, b (a larger term)."""
    assert [c.value for c in seen] == [None, "a", "a2", None, "b"], seen
    assert seen[0] == seen[3] == NOBODY
    assert seen[1].term == seen[2].term > 0
    assert seen[4].term > seen[2].term
    leaders = [c.term for c in seen if c.value is not None]
    assert leaders == sorted(leaders)


def test_observe(pair, client, name):
    other = pair.client()
    wait = 2 * slack()
    with client.observe(name) as obs:
        assert isinstance(obs, dlock.Observer)
        seen = [obs.get(wait)]
        lead = client.elect(name, value="a", ttl=10)
        seen.append(obs.get(wait))
        lead.proclaim("a2")
        seen.append(obs.get(wait))
        lead.resign()
        seen.append(obs.get(wait))
        with other.elect(name, value="b", ttl=10) as b:
            seen.append(obs.get(wait))
            assert seen[-1].term == b.term
            assert obs.get(0.2) is None  # nothing more: no repeat
            assert obs.get(0) is None
        check_changes(seen)
    assert obs.closed and obs.get(0) is None
    assert list(obs) == []
    other.redis.connection_pool.disconnect()


def test_observe_in_a_thread(pair, client, name):
    """An observer thread iterates; closing the observer from another thread ends its
    iteration, and leaves dlockd without the subscription's connection."""
    obs = client.observe(name)
    seen: List[dlock.Leader] = []
    errors: List[BaseException] = []

    def watch() -> None:
        try:
            for change in obs:
                seen.append(change)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=watch)
    t.start()
    assert eventually(lambda: len(seen) == 1, 2)
    with client.elect(name, value="a", ttl=10) as lead:
        assert eventually(lambda: len(seen) == 2, 2)
        lead.proclaim("a2")
        assert eventually(lambda: len(seen) == 3, 2)
    assert eventually(lambda: len(seen) == 4, 2)
    with client.elect(name, value="b", ttl=10):
        assert eventually(lambda: len(seen) == 5, 2)
    assert eventually(lambda: len(seen) == 6, 2)
    before = connected_clients(pair)
    obs.close()
    t.join(2 * slack())
    assert not t.is_alive() and not errors, errors
    check_changes(seen[:5])
    assert seen[5] == NOBODY
    assert eventually(lambda: connected_clients(pair) <= before - 1, 2)
    assert not client.redis.connection_pool._in_use_connections


def test_observers_dropped_give_their_connections_back(pair, name):
    r = pair.redis_client(max_connections=2)
    c = dlock.Client(r)
    for _ in range(5):  # more than the pool holds: each is given back
        obs = c.observe(name)
        assert obs.get(2 * slack()) == NOBODY
        del obs
        gc.collect()
    with c.observe(name) as obs:
        # The state first (an election made before it came could be its first word).
        assert obs.get(2 * slack()) == NOBODY
        with c.elect(name, value="x", ttl=10) as lead:
            assert obs.get(2 * slack()) == (lead.term, "x")
    r.connection_pool.disconnect()


def test_observer_when_dlockd_dies(own, name):
    p = own.pair()
    c = p.client()
    obs = c.observe(name)
    assert obs.get(2 * slack()) == NOBODY
    p.dlockd.kill()
    with pytest.raises(dlock.Unavailable):
        obs.get(2 * slack())
    assert obs.closed
    with pytest.raises(dlock.Unavailable):
        c.observe(name)


# asyncio -------------------------------------------------------------------------------


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30 * slack()))


def test_aio_elect(pair, name):
    async def main():
        c = pair.aio_client()
        other = pair.aio_client()
        async with c.elect(name, value="a", ttl=10) as lead:
            assert isinstance(lead, dlock.asyncio.Leadership)
            assert lead.term > 0 and lead.value == "a"
            assert await lead.is_leading()
            seen = await c.leader(name)
            assert seen["value"] == "a" and seen["term"] == lead.term
            with pytest.raises(dlock.NotAcquired):
                await other.elect(name, wait=0)
            await lead.proclaim("a2")
            assert lead.value == "a2" and (await c.leader(name))["value"] == "a2"
            assert (await c.leader(name))["term"] == lead.term
        assert await c.leader(name) is None
        assert not await lead.is_leading()
        with pytest.raises(dlock.LockLost):
            await lead.proclaim("after")
        with pytest.raises(KeyError):
            async with c.elect(name, ttl=10) as lead2:
                raise KeyError("x")
        assert lead2.resigned and await c.leader(name) is None
        lead3 = await c.elect(name, ttl=10, wait=0)  # awaited rather than entered
        assert lead3.term > lead2.term > lead.term
        assert await lead3.resign() is True
        with pytest.raises(dlock.InvalidArgument):
            c.elect(name, wait=None)  # checked at once, before any await
        await c.redis.connection_pool.disconnect()
        await other.redis.connection_pool.disconnect()

    run(main())


def test_aio_cancelled_campaign_leaves_nothing(pair, name):
    async def main():
        c = pair.aio_client()
        lead = await c.elect(name, value="a", ttl=10)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.elect(name, value="b", ttl=10), 0.3)
        await lead.resign()
        await asyncio.sleep(0.2)
        assert await c.leader(name) is None  # the withdrawn candidate was not elected
        await c.redis.connection_pool.disconnect()

    run(main())


def test_aio_observe(pair, name):
    async def main():
        c = pair.aio_client()
        seen: List[dlock.Leader] = []
        wait = 2 * slack()

        async def until(n: int) -> None:
            deadline = time.monotonic() + wait
            while len(seen) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert len(seen) == n, seen

        async with c.observe(name) as obs:
            assert isinstance(obs, dlock.asyncio.Observer)

            async def watch() -> None:
                async for change in obs:
                    seen.append(change)

            task = asyncio.ensure_future(watch())
            await until(1)
            lead = await c.elect(name, value="a", ttl=10)
            await until(2)
            await lead.proclaim("a2")
            await until(3)
            await lead.resign()
            await until(4)
            async with c.elect(name, value="b", ttl=10):
                await until(5)
                await obs.close()  # from another task: its iteration ends
                await asyncio.wait_for(task, wait)
        check_changes(seen)
        assert await obs.get(0) is None
        assert not c.redis.connection_pool._in_use_connections
        await c.redis.connection_pool.disconnect()

    run(main())


def test_aio_observe_get_and_cancel(pair, name):
    """get() with a timeout, and a read cancelled, leave the observer as it was: the
    next read has the change."""
    async def main():
        c = pair.aio_client()
        obs = c.observe(name)
        assert await obs.get(2 * slack()) == NOBODY
        assert await obs.get(0.1) is None
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(obs.get(), 0.1)
        async with c.elect(name, value="x", ttl=10) as lead:
            change: Optional[dlock.Leader] = await obs.get(2 * slack())
            assert change == (lead.term, "x")
        assert await obs.get(2 * slack()) == NOBODY
        await obs.close()
        assert await obs.get() is None
        await c.redis.connection_pool.disconnect()

    run(main())


def test_observe_decoded_replies_and_health_checks(pair, name):
    """A redis.Redis that decodes its replies, and runs redis-py's health check on the
    subscription's connection, observes the same."""
    c = pair.client(decode_responses=True, health_check_interval=0.2)
    with c.observe(name) as obs:
        assert obs.get(2 * slack()) == NOBODY
        assert obs.get(0.5) is None  # health checks ran meanwhile, and told nothing
        with c.elect(name, value="é with spaces", ttl=10) as lead:
            assert obs.get(2 * slack()) == (lead.term, "é with spaces")
            assert c.leader(name)["value"] == "é with spaces"
    c.redis.connection_pool.disconnect()


def test_deposed_by_an_operator(own, tmp_path, name):
    """BREAK of the leadership's lock: the leader finds it lost (is_leading, proclaim,
    the end of its block), and the next candidate is elected with a larger term."""
    (tmp_path / "admin").write_text("pw\n")
    p = own.pair("--admin-pass-file", str(tmp_path / "admin"))
    c = p.client()
    admin = p.redis_client(username="admin", password="pw")
    with c.observe(name) as obs:
        assert obs.get(2 * slack()) == NOBODY
        with pytest.raises(dlock.LockLost):
            with c.elect(name, value="a", ttl=2) as lead:
                assert obs.get(2 * slack()) == (lead.term, "a")
                admin.execute_command("BREAK", name)
                assert c.leader(name) is None
                assert not lead.is_leading()
                with pytest.raises(dlock.LockLost):
                    lead.proclaim("b")
        # Observers hear it by the end of the deposed leader's lease at the latest.
        assert obs.get(2 + 2 * slack()) == NOBODY
        with c.elect(name, value="c", ttl=10, wait=0) as again:
            assert again.term > lead.term
            assert obs.get(2 * slack()) == (again.term, "c")
    admin.connection_pool.disconnect()
    c.redis.connection_pool.disconnect()
