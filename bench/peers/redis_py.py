"""redis_py.py: W5/peer-redis-py, dlock-bench's flash sale with redis-py's Lock.

One python3 process of BUYERS threads, each with its own redis.Redis (its own
connection pool) and Lock, with the package's defaults: a refused try sleeps 0.1 s
(sleep=0.1) before the next. A buyer's unit is W5/lock's: under the lock, GET the
stock; if above 0, SET it one lower and INCR the sold counter; release. It stops when
it finds the stock at 0.

usage: python3 redis_py.py HOST PORT PASSWORD DB KEY_PREFIX BUYERS
Start and end as bench/php/buyer.php: INCRBY ready BUYERS once every buyer is
connected and warmed up, BLPOP go, then one line per buyer on stdout:
  bought N last_sale_ns T retries R max_wait_ns W
(R: refused attempts, which redis-py does not count: 0). Exit 1 on any failure.
"""
import sys
import threading
import time

import redis


def fail(msg):
    sys.stderr.write(f"redis_py.py: {msg}\n")
    sys.exit(1)


class Buyer:
    def __init__(self, client, lock_key):
        self.client = client
        self.lock_key = lock_key
        self.bought = 0
        self.last = 0
        self.max_wait = 0
        self.error = None

    def run(self, stock_key, sold_key):
        try:
            while True:
                t0 = time.monotonic_ns()
                lock = self.client.lock(self.lock_key, timeout=10)
                lock.acquire()
                self.max_wait = max(self.max_wait, time.monotonic_ns() - t0)
                try:
                    stock = int(self.client.get(stock_key) or 0)
                    if stock > 0:
                        self.client.set(stock_key, stock - 1)
                        self.client.incr(sold_key)
                finally:
                    lock.release()
                if stock <= 0:
                    return
                self.bought += 1
                self.last = time.monotonic_ns()
        except Exception as e:  # reported by the main thread
            self.error = e


def main():
    if len(sys.argv) != 7:
        fail("usage: redis_py.py HOST PORT PASSWORD DB KEY_PREFIX BUYERS")
    host, port, password, db, prefix, nbuyers = sys.argv[1:]
    kw = {"host": host, "port": int(port), "db": int(db)}
    if password:
        kw["password"] = password
    lock_key = prefix + "lock"
    buyers = []
    for i in range(int(nbuyers)):
        client = redis.Redis(**kw)
        warm = client.lock(f"{lock_key}:warm:{i}", timeout=10)
        warm.acquire()
        warm.release()
        buyers.append(Buyer(client, lock_key))
    admin = redis.Redis(**kw)
    admin.incrby(prefix + "ready", len(buyers))
    if admin.blpop([prefix + "go"], 30) is None:
        fail("no start signal within 30 s")
    threads = [
        threading.Thread(target=b.run, args=(prefix + "stock", prefix + "sold"))
        for b in buyers
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in buyers:
        if b.error is not None:
            fail(repr(b.error))
    sys.stdout.write(
        "".join(
            f"bought {b.bought} last_sale_ns {b.last} retries 0 max_wait_ns {b.max_wait}\n"
            for b in buyers
        )
    )


if __name__ == "__main__":
    main()
