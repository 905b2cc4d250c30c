"""The checks every argument gets before anything is sent, with dlockd's own limits,
so that a bad one is an InvalidArgument that names it rather than a round trip and an
``-ERR``; the commands built from them; and the checks of dlockd's replies.

Shared by the blocking client and the asyncio one: nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from ._errors import InvalidArgument, ProtocolError

#: A wait without end (dlockd's ``WAIT -1``): ``client.lock(name, wait=dlock.FOREVER)``.
FOREVER: float = math.inf

#: The lease of a lock, a permit or a reservation when none is given, in seconds.
DEFAULT_TTL: float = 30.0

#: dlockd's limit on a lock name, a semaphore's or a SKU, in bytes.
NAME_MAX = 4096
#: The longest TTL, WAIT and lease dlockd takes, in ms (2**31 - 1).
MS_MAX = 2147483647
#: The shortest lease dlockd gives anything, in ms (a session lock's floor is 1000).
TTL_MIN_MS = 10
#: dlockd's limit on a quantity of stock.
QTY_MAX = 10**12
#: dlockd's limit on a LABEL, in bytes.
LABEL_MAX = 256

Name = Union[str, bytes]

_HEX32 = re.compile(r"[0-9a-f]{32}")


def _raw(value: Any, what: str) -> bytes:
    """A str as UTF-8, or bytes (bytearray, memoryview) as they are."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgument(f"dlock: {what} is not valid UTF-8: {e}") from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(f"dlock: {what} must be a str (or bytes), not {type(value).__name__}")


def name_bytes(value: Name, what: str = "lock name") -> bytes:
    """A lock name, a semaphore's or a SKU as dlockd takes it: 1 to 4096 bytes of
    UTF-8 (or bytes as they are), no NUL. CR, LF and spaces are fine."""
    raw = _raw(value, what)
    if not 1 <= len(raw) <= NAME_MAX:
        raise InvalidArgument(f"dlock: {what} must be 1 to {NAME_MAX} bytes, not {len(raw)}")
    if b"\0" in raw:
        raise InvalidArgument(f"dlock: {what} must not contain a NUL byte")
    return raw


def text(raw: Any) -> str:
    """A name as the user reads it back (str, whatever was given)."""
    if isinstance(raw, (bytes, bytearray)):
        return bytes(raw).decode("utf-8", errors="replace")
    return str(raw)


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"dlock: {what} must be a number of seconds, not {value!r}")
    try:
        s = float(value)
    except OverflowError:
        # An int too large for a float: out of every range here, and not FOREVER
        # (which is said with an infinite float).
        raise InvalidArgument(f"dlock: {what} is out of range: too large a number of seconds") from None
    if math.isnan(s):
        raise InvalidArgument(f"dlock: {what} must be a number of seconds, not NaN")
    return s


def _ms(s: float) -> int:
    """Seconds as whole ms, rounded; MS_MAX + 1 for what no ms count holds."""
    return round(s * 1000) if math.isfinite(s) and abs(s) <= MS_MAX else MS_MAX + 1


def ttl_ms(value: Any, what: str = "ttl") -> int:
    """A TTL or a lease in seconds (0.01 to 2147483.647) as dlockd's ms."""
    ms = _ms(_seconds(value, what))
    if not TTL_MIN_MS <= ms <= MS_MAX:
        raise InvalidArgument(
            f"dlock: {what} must be {TTL_MIN_MS / 1000} to {MS_MAX / 1000} seconds, not {value!r}"
        )
    return ms


def duration_ms(value: Any, what: str) -> int:
    """A duration in seconds from 0 to 2147483.647 (max_hold: 0 is "no limit"), in ms.
    A positive one shorter than a ms is a ms: rounded to 0 it would mean no limit."""
    s = _seconds(value, what)
    ms = _ms(s)
    if s < 0 or ms > MS_MAX:
        raise InvalidArgument(f"dlock: {what} must be 0 to {MS_MAX / 1000} seconds, not {value!r}")
    return 1 if ms == 0 and s > 0 else ms


def wait_ms(value: Any) -> int:
    """A wait in seconds as dlockd's WAIT takes it: 0 (try once) to 2147483.647 s, and
    FOREVER as -1. A negative wait is refused (it would read as "forever" to some and
    "not at all" to others), and so is None: say FOREVER, or 0."""
    if value is None:
        raise InvalidArgument(
            "dlock: wait must be 0 (try once) to 2147483.647 seconds, or dlock.FOREVER; not None"
        )
    s = _seconds(value, "wait")
    if s == FOREVER:
        return -1
    ms = _ms(s)
    if s < 0 or ms > MS_MAX:
        raise InvalidArgument(
            f"dlock: wait must be 0 (try once) to {MS_MAX / 1000} seconds, or dlock.FOREVER; not {value!r}"
        )
    # A positive wait shorter than a ms still waits (for a ms), rather than trying once.
    return 1 if ms == 0 and s > 0 else ms


def wait_text(ms: int) -> str:
    return "an endless wait" if ms < 0 else f"{ms / 1000:g} s"


#: How long past its wait a waiting command's reply is awaited when the redis client
#: has no socket_timeout (redis-py's default), in seconds: a hung dlockd then fails
#: the call this long after the wait rather than never.
HUNG_MARGIN = 5.0


def read_timeout(base: Optional[float], wait: Optional[int]) -> Optional[float]:
    """The read timeout for the reply of a command that may wait ``wait`` ms before
    dlockd answers (-1: without end; None: a command that does not wait), over the
    connection's own ``base`` (None or 0: none)."""
    if wait is None:
        return base
    if wait < 0:
        return None
    return (base or HUNG_MARGIN) + wait / 1000


def permits_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MS_MAX:
        raise InvalidArgument(f"dlock: permits must be an int from 1 to {MS_MAX}, not {value!r}")
    return value


def qty_int(value: Any, what: str = "qty", low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= QTY_MAX:
        raise InvalidArgument(f"dlock: {what} must be an int from {low} to {QTY_MAX}, not {value!r}")
    return value


def delta_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or abs(value) > QTY_MAX:
        raise InvalidArgument(
            f"dlock: delta must be a nonzero int, at most {QTY_MAX} either way, not {value!r}"
        )
    return value


#: The largest fence: dlockd's are 64-bit.
FENCE_MAX = 2**64 - 1


def fence_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= FENCE_MAX:
        raise InvalidArgument(f"dlock: fence must be an int from 0 to 2**64 - 1, not {value!r}")
    return value


def flag(value: Any, what: str) -> bool:
    """A yes/no option: a bool, not anything that reads as true (``detached="no"``)."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"dlock: {what} must be True or False, not {value!r}")
    return value


def label_bytes(value: Any) -> bytes:
    raw = _raw(value, "label")
    if not 1 <= len(raw) <= LABEL_MAX or b"\0" in raw:
        raise InvalidArgument(f"dlock: label must be 1 to {LABEL_MAX} bytes, without NUL")
    return raw


def token_str(value: Any, what: str = "a token") -> str:
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if not isinstance(value, str) or _HEX32.fullmatch(value) is None:
        raise InvalidArgument(f"dlock: {what} is 32 lowercase hex characters")
    return value


def acquire_command(
    head: List[bytes],
    ttl: Any,
    wait: Any,
    *,
    shared: Any = False,
    fair: Any = False,
    detached: Any = False,
    max_hold: Any = None,
    label: Any = None,
) -> Tuple[List[bytes], int]:
    """LOCK or SEM ACQUIRE (``head``: the command and what comes before the options)
    with its options, and the wait in ms (-1: without end)."""
    args = list(head)
    args += [b"TTL", str(ttl_ms(ttl)).encode()]
    w = wait_ms(wait)
    if w != 0:
        args += [b"WAIT", str(w).encode()]
    for word, on, what in ((b"DETACHED", detached, "detached"), (b"FAIR", fair, "fair"),
                           (b"SHARED", shared, "shared")):
        if flag(on, what):
            args.append(word)
    if max_hold is not None:
        if detached:
            raise InvalidArgument("dlock: max_hold is for session locks: a detached lock ends with its TTL")
        args += [b"MAXHOLD", str(duration_ms(max_hold, "max_hold")).encode()]
    if label is not None:
        args += [b"LABEL", label_bytes(label)]
    return args, w


def reserve_command(sku: bytes, qty: Any, lease: Any, wait: Any) -> Tuple[List[bytes], int]:
    """STOCK RESERVE with its options, and the wait in ms (-1: without end)."""
    args = [b"STOCK", b"RESERVE", sku, str(qty_int(qty)).encode()]
    args += [b"TTL", str(ttl_ms(lease, "lease")).encode()]
    w = wait_ms(wait)
    if w != 0:
        args += [b"WAIT", str(w).encode()]
    return args, w


def not_acquired(name: Any, wait: Any) -> str:
    return f"dlock: lock {text(name)!r} not acquired within {wait_text(wait_ms(wait))}"


def no_permit(name: str, permits: int, wait: Any) -> str:
    return (
        f"dlock: no permit of semaphore {name!r} ({permits} permits) free within "
        f"{wait_text(wait_ms(wait))}"
    )


# Replies ---------------------------------------------------------------------------


def show(reply: Any) -> str:
    return repr(reply)[:200]


def grant(reply: Any, command: str) -> Optional[Tuple[str, int, int]]:
    """LOCK's and SEM ACQUIRE's reply: (token, fence, validity in ms), or None (nil)."""
    if reply is None:
        return None
    if (
        not isinstance(reply, list)
        or len(reply) != 3
        or not isinstance(reply[0], (bytes, str))
        or not isinstance(reply[1], int)
        or not isinstance(reply[2], int)
    ):
        raise ProtocolError(f"dlockd: {command} replied {show(reply)}, not [token, fence, validity]")
    tok = reply[0].decode("ascii", errors="replace") if isinstance(reply[0], bytes) else reply[0]
    return tok, reply[1], reply[2]


def boolean(reply: Any, command: str) -> bool:
    """A 1 or 0 reply as a bool."""
    if isinstance(reply, bool) or reply not in (0, 1):
        raise ProtocolError(f"dlockd: {command} replied {show(reply)}, not 1 or 0")
    return reply == 1


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def mapping(reply: Any, command: str) -> Dict[str, Any]:
    """A flat list of field/value pairs (LOCKINFO, STOCK's state) as a dict of str
    keys, bulk strings decoded as UTF-8."""
    if not isinstance(reply, list) or len(reply) % 2:
        raise ProtocolError(f"dlockd: {command} replied {show(reply)}, not field/value pairs")
    return {_decode(reply[i]): _decode(reply[i + 1]) for i in range(0, len(reply), 2)}


def info(reply: Any) -> Dict[str, Any]:
    out = mapping(reply, "LOCKINFO")
    for field in ("state", "holder", "remaining_ms", "fence"):
        if field not in out:
            raise ProtocolError(f"dlockd: LOCKINFO replied without '{field}'")
    return out


STOCK_FIELDS = ("stock", "available", "reserved", "sold", "reservations", "waiters")


def stock_state(reply: Any, command: str) -> Dict[str, int]:
    out = mapping(reply, command)
    for field in STOCK_FIELDS:
        if not isinstance(out.get(field), int) or isinstance(out.get(field), bool):
            raise ProtocolError(f"dlockd: {command} replied without '{field}'")
    return out


def reservation_id(reply: Any) -> Optional[str]:
    if reply is None:
        return None
    if not isinstance(reply, (bytes, str)):
        raise ProtocolError(f"dlockd: STOCK RESERVE replied {show(reply)}, not an id or nil")
    return reply.decode("ascii", errors="replace") if isinstance(reply, bytes) else reply


def out_of_stock(sku: str, asked: int, state: Dict[str, int]) -> Tuple[str, bool, Dict[str, int]]:
    """Why a reserve was refused, from the state now: dlockd refuses at once, without
    waiting, when more units are asked than are not yet sold."""
    unsold = state["stock"] - state["sold"]
    if asked > unsold:
        msg = (
            f"dlock: SKU {sku!r} is sold out: {asked} unit(s) asked, "
            f"{unsold} of {state['stock']} not sold"
        )
        return msg, True, state
    msg = (
        f"dlock: SKU {sku!r}: {asked} unit(s) asked, {state['available']} available, "
        f"{state['reserved']} reserved by other buyers at the moment"
    )
    return msg, False, state
