#!/usr/bin/python3
# dlockd's TLS port through redis-py (Debian's python3-redis) with ssl=True, the server
# verified against the test's CA, and with a client certificate when one is given.
# Usage: redis_py_tls.py PORT CA [CERT KEY]. Exit 0 when every check held; a failed
# check raises.
import sys

import redis

port, ca = int(sys.argv[1]), sys.argv[2]
cert = sys.argv[3] if len(sys.argv) > 4 else None
key = sys.argv[4] if len(sys.argv) > 4 else None


def client():
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=10, ssl=True,
                       ssl_ca_certs=ca, ssl_cert_reqs="required", ssl_certfile=cert,
                       ssl_keyfile=key)


a, b = client(), client()
assert a.ping() is True
assert a.echo("over tls") == b"over tls"
token, fence, validity = a.execute_command("LOCK", "pytls:name", "TTL", "5000")
token = token.decode()
assert len(token) == 32 and fence >= 1 and 0 < validity <= 5000, (token, fence, validity)
assert b.execute_command("LOCK", "pytls:name") is None
assert a.execute_command("UNLOCK", "pytls:name", token) == 1
# b waits for the lock a takes and gives back.
token, _, _ = a.execute_command("LOCK", "pytls:name", "TTL", "5000")
assert a.execute_command("UNLOCK", "pytls:name", token.decode()) == 1
r = b.execute_command("LOCK", "pytls:name", "WAIT", "2000")
assert r is not None and len(r) == 3, r
assert b.execute_command("UNLOCK", "pytls:name", r[0].decode()) == 1
a.close()
b.close()
print("redis-py tls: all checks passed")
