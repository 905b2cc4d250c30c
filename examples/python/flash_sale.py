#!/usr/bin/python3
"""flash_sale.py: sell a limited stock to many concurrent Python buyers through dlockd,
never one unit too many.

    flash_sale.py [OPTIONS] stock N    put N units on the shelf (and forget past sales)
    flash_sale.py [OPTIONS] buy        one buyer: buy until the stock is gone
    flash_sale.py [OPTIONS] report     check the sale, print a RESULT line

OPTIONS, before or after the command: --dlockd HOST:PORT (default $DLOCKD, else
127.0.0.1:7379; a path starting with / is a unix socket), --redis HOST:PORT (the shop's
database, where the stock lives; default 127.0.0.1:6379), --item ITEM (default sku-1),
--wait MS (how long one LOCK waits, default 10000), --ttl MS (default 30000). buy
--stall takes the lock once, prints "HOLDING ..." and stays inside the critical section
until killed, as a request stuck in a slow call; buy --stall-at N does so in the first
critical section that finds at most N units left. report --killed-at US: the
wall-clock time, in microseconds, a holder was killed: how long the lock took to pass
on.

Each purchase is what one request of the shop would do, through the dlock package
(clients/python):

    with client.lock("sale:ITEM", wait=WAIT) as lock:
        GET stock:ITEM -> if > 0: SET stock - 1

GET then SET is a read-modify-write: two buyers without the lock would read the same
stock and both sell that unit. Every critical section also appends one line to the list
sales:ITEM ("unit fence pid acquired_us done_us"; unit 0: found sold out), so that
`report` can check afterwards what the lock promises: sold == stock, nothing oversold,
no unit sold twice, sections that never overlap, fences that strictly increase.

The lock is a session lock (the package's default): dlockd renews it while this
process's connection is open and releases it the moment the connection closes, so a
buyer that dies inside its critical section (an exception, SIGKILL, the OOM killer)
frees the lock at once instead of making everyone wait for its lease to end.

Exit status: 0 done (buy: sold out; report: every check passed), 1 a check failed or a
call failed, 2 usage, 75 dlockd, a lock server or the shop's Redis unavailable (try
later), with one line on stderr that says which.
"""
import argparse
import os
import sys
import time

# common.py (beside this file) puts the dlock package of this source tree on sys.path
# first: dlock is imported after it.
from common import EXIT_TEMPFAIL, count, dlockd_client, exit_status, redis_client

import dlock
import redis


def now_us():
    return time.time_ns() // 1000


def buy_one(client, shop, args):
    """One purchase, as one request of the shop would make it. True: a unit sold;
    False: the stock is gone; None: the lock did not come within WAIT (the shop would
    answer "busy, try again")."""
    item = args.item
    try:
        # Released when the block ends, however it ends; a return inside it included.
        with client.lock(f"sale:{item}", ttl=args.ttl / 1000, wait=args.wait / 1000,
                         label=f"python buyer {os.getpid()}") as lock:
            acquired = now_us()
            left = int(shop.get(f"stock:{item}") or 0)
            if args.stall or (args.stall_at is not None and left <= args.stall_at):
                # A buyer stuck in a slow call, holding the lock: the demo kills it here.
                print(f"HOLDING fence={lock.fence} pid={os.getpid()} left={left}", flush=True)
                time.sleep(3600)
            if left > 0:
                shop.set(f"stock:{item}", left - 1)
            shop.rpush(f"sales:{item}",
                       f"{max(left, 0)} {lock.fence} {os.getpid()} {acquired} {now_us()}")
            return left > 0
    except dlock.NotAcquired:
        return None
    except dlock.LockLost as e:
        # The section ran, but the lock was found gone at its end (dlockd's renewal
        # failed): another buyer may have overlapped this one, and report says so. The
        # next section tells whether stock is left.
        print(f"flash_sale: {e}", file=sys.stderr)
        return True


def buy(args):
    # One client serves every purchase: each lock takes a pooled connection of its own,
    # from LOCK to UNLOCK.
    with dlockd_client(args.dlockd) as client:
        shop = redis_client(args.redis)
        sold = busy = 0
        while True:
            r = buy_one(client, shop, args)
            if r is False:
                break
            if r is None:
                # Nobody released within WAIT: a buyer stuck in a slow call holds it.
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
    shop = redis_client(args.redis)
    shop.delete(f"sales:{args.item}")
    shop.mset({f"stock:{args.item}": args.n, f"stock:{args.item}:initial": args.n})
    print(f"stock:{args.item} = {args.n}")
    return 0


def report(args):
    shop = redis_client(args.redis)
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


def common_options(p, defaults):
    """The options every command takes. On the main parser (before the command) with
    their defaults; on each command's (after it) without, so that one given there
    overrides, and one not given leaves the main parser's value alone."""
    d = (lambda v: v) if defaults else (lambda v: argparse.SUPPRESS)
    p.add_argument("--dlockd", default=d(os.environ.get("DLOCKD") or "127.0.0.1:7379"),
                   help="dlockd's HOST:PORT or unix socket (default $DLOCKD, else 127.0.0.1:7379)")
    p.add_argument("--redis", default=d("127.0.0.1:6379"),
                   help="the shop's Redis, where the stock lives (default 127.0.0.1:6379)")
    p.add_argument("--item", default=d("sku-1"))
    p.add_argument("--wait", type=count, default=d(10000), help="how long one LOCK waits, ms")
    p.add_argument("--ttl", type=count, default=d(30000), help="the lease dlockd renews, ms")


def main():
    p = argparse.ArgumentParser(description="A flash sale through dlockd.")
    common_options(p, True)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stock")
    s.add_argument("n", type=count)
    b = sub.add_parser("buy")
    b.add_argument("--stall", action="store_true",
                   help="take the lock once and stay inside the section until killed")
    b.add_argument("--stall-at", type=count, metavar="N",
                   help="the same, in the first section that finds at most N units left")
    r = sub.add_parser("report")
    r.add_argument("--killed-at", type=count,
                   help="wall-clock us when a holder was killed: how long the lock took to pass on")
    for command in (s, b, r):
        common_options(command, False)
    args = p.parse_args()
    try:
        return {"stock": stock, "buy": buy, "report": report}[args.command](args)
    except dlock.DlockError as e:
        print(f"flash_sale: {e}", file=sys.stderr)
        return exit_status(e)
    except redis.exceptions.ConnectionError as e:
        # The shop's Redis failed (a refused connection, a timeout): the sale cannot go
        # on. A buyer's lock was released on the way out of its section.
        print(f"flash_sale: the shop's Redis at {args.redis}: {e}", file=sys.stderr)
        return EXIT_TEMPFAIL
    except redis.exceptions.RedisError as e:
        print(f"flash_sale: the shop's Redis at {args.redis}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
