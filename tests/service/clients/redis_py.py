#!/usr/bin/python3
# dlockd through redis-py (Debian's python3-redis), as a Python program would use it:
# execute_command for the lock commands, the client's own ping/info/echo.
# Usage: redis_py.py PORT. Exit 0 when every check held; a failed check raises.
import sys
import threading
import time

import redis

port = int(sys.argv[1])


def client():
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)


a, b = client(), client()
assert a.ping() is True
assert a.echo("hi") == b"hi"
info = a.info()
assert info["loading"] == 0, info
assert "session_locks" in info, info
a.client_setname("py-test")
assert a.client_getname() == "py-test"

token, fence, validity = a.execute_command("LOCK", "py:name", "TTL", "5000")
token = token.decode()
assert len(token) == 32 and fence >= 1 and 0 < validity <= 5000, (token, fence, validity)
assert b.execute_command("LOCK", "py:name") is None

pairs = a.execute_command("LOCKINFO", "py:name")
fields = dict(zip(pairs[0::2], pairs[1::2]))
assert fields[b"state"] == b"held", fields
assert fields[b"fence"] == fence, fields
assert 0 < fields[b"remaining_ms"] <= 5000, fields

try:
    a.execute_command("LOCK", "py:name")
    raise AssertionError("a second LOCK of a held name was accepted")
except redis.exceptions.ResponseError as e:
    assert "already holds" in str(e), e

# A blocked LOCK on b, served by a's UNLOCK.
result = {}


def waiter():
    result["reply"] = b.execute_command("LOCK", "py:name", "WAIT", "8000")
    result["at"] = time.monotonic()


t = threading.Thread(target=waiter)
t.start()
time.sleep(0.3)
assert "reply" not in result, "the waiter was served while the lock was held"
released = time.monotonic()
assert a.execute_command("UNLOCK", "py:name", token) == 1
t.join(10)
assert not t.is_alive()
tok2, fence2, _ = result["reply"]
assert fence2 > fence
print("FIG dlockd_redis_py_handoff_ms %d ms" % ((result["at"] - released) * 1000))
assert b.execute_command("UNLOCK", "py:name", tok2) == 1
assert b.execute_command("UNLOCK", "py:name", tok2) == 0
pairs = a.execute_command("LOCKINFO", "py:name")
assert pairs[1] == b"free", pairs

# Errors arrive as the client's own exception type.
try:
    a.execute_command("LOCK", "py:name", "TTL", "1")
    raise AssertionError("TTL 1 was accepted")
except redis.exceptions.ResponseError as e:
    assert "TTL must be" in str(e), e

# A pipeline.
p = a.pipeline(transaction=False)
for i in range(1000):
    p.echo(str(i))
assert p.execute() == [str(i).encode() for i in range(1000)]
print("redis-py: all checks passed")
