#!/usr/bin/python3
"""flash_sale.py: sell a limited stock to many concurrent Python buyers through dlockd,
never one unit too many.

    flash_sale.py [OPTIONS] stock N    put N units on the shelf (and forget past sales)
    flash_sale.py [OPTIONS] buy        one buyer: buy until the stock is gone
    flash_sale.py [OPTIONS] report     check the sale, print a RESULT line

Each purchase is what one request of the shop would do:

    LOCK sale:ITEM WAIT ms -> GET stock:ITEM -> if > 0: SET stock - 1 -> UNLOCK (finally)

GET then SET is a read-modify-write: two buyers without the lock would read the same
stock and both sell that unit. Every critical section also appends one line to the list
sales:ITEM ("unit fence pid acquired_us done_us"; unit 0: found sold out), so that
`report` can check what the lock promises: sold == stock, nothing oversold, no unit
sold twice, sections that never overlap, fences that strictly increase.

The lock is a session lock (LOCK without DETACHED): dlockd renews it while this
process's connection is open and releases it the moment the connection closes, so a
buyer that dies inside its critical section frees the lock at once.

Exit status: 0 done (buy: sold out; report: every check passed), 1 a check or a call
failed, 2 usage, 75 dlockd or a lock server unavailable (try later).
"""
import argparse
import os
import sys
import time

import redis

EXIT_TEMPFAIL = 75


def address(s, default_port):
    """'host:port' to a dict of redis.Redis arguments; a path starting with '/' is a
    unix socket."""
    if s.startswith("/"):
        return {"unix_socket_path": s}
    host, _, port = s.rpartition(":")
    return {"host": host or s, "port": int(port) if host else default_port}


def now_us():
    return time.time_ns() // 1000


def dlockd_connect(args):
    # One connection for the client's whole life (single_connection_client): a session
    # lock belongs to the connection that sent LOCK, and a pool could send the UNLOCK
    # on another one. The socket timeout must exceed WAIT: a waiting LOCK answers only
    # when it is served or WAIT runs out, and a client that stops reading first drops
    # the connection, and the wait with it.
    return redis.Redis(**address(args.dlockd, 7379), socket_connect_timeout=2,
                       socket_timeout=args.wait / 1000 + 5, single_connection_client=True)


def shop_connect(args):
    return redis.Redis(**address(args.redis, 6379), socket_connect_timeout=2, socket_timeout=5)


def buy_one(lockd, shop, args):
    """One purchase. True: a unit sold; False: the stock is gone; None: the lock did
    not come within WAIT (the shop would answer "busy, try again")."""
    item = args.item
    # [token, fence, validity_ms], or None when WAIT ran out. -NOQUORUM and
    # -UNAVAILABLE arrive as redis.exceptions.ResponseError.
    lock = lockd.execute_command("LOCK", f"sale:{item}", "TTL", args.ttl, "WAIT", args.wait,
                                 "LABEL", f"python buyer {os.getpid()}")
    if lock is None:
        return None
    acquired = now_us()
    token, fence, _ = lock
    try:
        left = int(shop.get(f"stock:{item}") or 0)
        if args.stall or (args.stall_at is not None and left <= args.stall_at):
            # A buyer stuck in a slow call, holding the lock until it is killed.
            print(f"HOLDING fence={fence} pid={os.getpid()} left={left}", flush=True)
            time.sleep(3600)
        if left > 0:
            shop.set(f"stock:{item}", left - 1)
        shop.rpush(f"sales:{item}", f"{max(left, 0)} {fence} {os.getpid()} {acquired} {now_us()}")
        return left > 0
    finally:
        # 0: the lock was no longer ours (dlockd's renewal lost it): another buyer may
        # have overlapped this one.
        if lockd.execute_command("UNLOCK", f"sale:{item}", token) != 1:
            print(f"flash_sale: the lock was lost before UNLOCK (fence {fence})", file=sys.stderr)


def buy(args):
    lockd, shop = dlockd_connect(args), shop_connect(args)
    sold = busy = 0
    while True:
        r = buy_one(lockd, shop, args)
        if r is False:
            break
        if r is None:
            busy += 1
            if busy == 3:
                print(f"flash_sale: no turn in 3 waits of {args.wait} ms; giving up",
                      file=sys.stderr)
                return 1
            continue
        sold += 1
    print(f"buyer {os.getpid()}: bought {sold}")
    return 0


def stock(args):
    shop = shop_connect(args)
    shop.delete(f"sales:{args.item}")
    shop.mset({f"stock:{args.item}": args.n, f"stock:{args.item}:initial": args.n})
    print(f"stock:{args.item} = {args.n}")
    return 0


def report(args):
    shop = shop_connect(args)
    initial = int(shop.get(f"stock:{args.item}:initial") or 0)
    left = int(shop.get(f"stock:{args.item}") or 0)
    sections = [tuple(map(int, line.split())) for line in shop.lrange(f"sales:{args.item}", 0, -1)]
    sold = doubles = overlaps = fence_drops = 0
    seen, buyers = set(), {}
    after_kill_us = -1
    prev = None
    for unit, fence, pid, acquired, done in sections:
        if unit > 0:
            sold += 1
            buyers[pid] = buyers.get(pid, 0) + 1
            doubles += unit in seen
            seen.add(unit)
        # The list is in critical-section order: each line is pushed inside the lock.
        if prev is not None:
            overlaps += acquired < prev[4]
            fence_drops += fence <= prev[1]
        if args.killed_at is not None and after_kill_us < 0 and acquired >= args.killed_at:
            after_kill_us = acquired - args.killed_at
        prev = (unit, fence, pid, acquired, done)
    oversold = max(0, sold - initial)
    ok = (len(sections) > 0 and sold == initial and left == 0 and doubles == 0 and overlaps == 0
          and fence_drops == 0)
    increasing = "no" if fence_drops else "yes"
    print(f"sold {sold} of {initial} to {len(buyers)} buyers: oversold {oversold}, "
          f"units sold twice {doubles}, stock left {left}")
    print(f"{len(sections)} critical sections, overlapping {overlaps}, "
          f"fences strictly increasing: {increasing}")
    print(f"RESULT ok={'yes' if ok else 'no'} sold={sold} stock={initial} oversold={oversold} "
          f"doubles={doubles} left={left} sections={len(sections)} overlaps={overlaps} "
          f"fences_increasing={increasing} buyers={len(buyers)} after_kill_us={after_kill_us}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description="A flash sale through dlockd.")
    p.add_argument("--dlockd", default=os.environ.get("DLOCKD") or "127.0.0.1:7379",
                   help="dlockd's HOST:PORT or unix socket (default $DLOCKD, else 127.0.0.1:7379)")
    p.add_argument("--redis", default="127.0.0.1:6379",
                   help="the shop's Redis, where the stock lives (default 127.0.0.1:6379)")
    p.add_argument("--item", default="sku-1")
    p.add_argument("--wait", type=int, default=10000, help="how long one LOCK waits, ms")
    p.add_argument("--ttl", type=int, default=30000, help="the lease dlockd renews, ms")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("stock").add_argument("n", type=int)
    b = sub.add_parser("buy")
    b.add_argument("--stall", action="store_true",
                   help="take the lock once and stay inside the section until killed")
    b.add_argument("--stall-at", type=int, metavar="N",
                   help="the same, in the first section that finds at most N units left")
    r = sub.add_parser("report")
    r.add_argument("--killed-at", type=int,
                   help="wall-clock us when a holder was killed: how long the lock took to pass on")
    args = p.parse_args()
    try:
        return {"stock": stock, "buy": buy, "report": report}[args.command](args)
    except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError) as e:
        print(f"flash_sale: {e}", file=sys.stderr)
        # Unreachable, -NOQUORUM or -UNAVAILABLE: try later; another error reply is a bug.
        unavailable = (isinstance(e, redis.exceptions.ConnectionError)
                       or str(e).startswith(("NOQUORUM", "UNAVAILABLE")))
        return EXIT_TEMPFAIL if unavailable else 1


if __name__ == "__main__":
    sys.exit(main())
