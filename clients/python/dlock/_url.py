"""dlockd URLs (``Client.from_url``), as the PHP package reads them:

- ``dlockd://[[USER]:PASSWORD@]HOST[:PORT][?OPTIONS]`` (port 7379 by default),
- ``dlockds://...`` over TLS,
- ``dlockd+unix://[[USER]:PASSWORD@]/PATH[?OPTIONS]`` (usually ``dlockd+unix:///PATH``).

OPTIONS: ``timeout`` (seconds to connect and to wait for a reply, default 5), ``name``
(the connection's name, CLIENT SETNAME, and the default label of its locks),
``maxhold`` (ms: the default MAXHOLD of session locks), ``cafile``, ``cert`` and
``key`` (TLS: the CA of dlockd's certificate, this client's certificate and key). The
user is ``default`` (the same as none) or ``admin``. An unknown option is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from . import _args
from ._errors import InvalidArgument

DEFAULT_PORT = 7379
DEFAULT_TIMEOUT = 5.0
OPTIONS = ("timeout", "name", "maxhold", "cafile", "cert", "key")
SCHEMES = ("dlockd", "dlockds", "dlockd+unix")


@dataclass(frozen=True)
class Url:
    scheme: str
    host: str  # the socket's path for dlockd+unix
    port: int  # 0 for dlockd+unix
    user: Optional[str]
    password: Optional[str]
    timeout: float
    name: Optional[str]
    max_hold: Optional[float]  # seconds
    tls: Dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return self.host if self.scheme == "dlockd+unix" else f"{self.host}:{self.port}"

    def redis_kwargs(self) -> Dict[str, Any]:
        """The keyword arguments of redis.Redis (and redis.asyncio.Redis) for it."""
        kw: Dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "password": self.password,
            "username": self.user,
        }
        if self.name is not None:
            kw["client_name"] = self.name
        if self.scheme == "dlockd+unix":
            kw["unix_socket_path"] = self.host
            return kw
        kw["host"] = self.host
        kw["port"] = self.port
        if self.scheme == "dlockds":
            kw["ssl"] = True
            kw["ssl_cert_reqs"] = "required"
            kw["ssl_check_hostname"] = True
            if "cafile" in self.tls:
                kw["ssl_ca_certs"] = self.tls["cafile"]
            if "cert" in self.tls:
                kw["ssl_certfile"] = self.tls["cert"]
            if "key" in self.tls:
                kw["ssl_keyfile"] = self.tls["key"]
        return kw


def _unquote(part: str, url: str) -> str:
    try:
        return unquote(part, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument(f"dlock: {url!r}: a %-escape that is not UTF-8") from None


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DIGITS = re.compile(r"[0-9]+")
#: A connection's name as dlockd takes it (CLIENT SETNAME): printable ASCII, no space.
_CLIENT_NAME = re.compile(r"[\x21-\x7e]{1,128}")


def _shown(url: str) -> str:
    """The URL as an error message shows it: its password masked, as messages end up
    in logs."""
    return re.sub(r"^([^:/?#]*://[^:@/?#]*:)[^@/?#]*@", r"\1***@", url)


def parse(url: str) -> Url:
    if not isinstance(url, str):
        raise InvalidArgument(f"dlock: a dlockd URL is a str, not {type(url).__name__}")
    shown = _shown(url)
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise InvalidArgument(f"dlock: {shown!r} is not a dlockd URL: {e}") from None
    scheme = u.scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidArgument(f"dlock: {shown!r} is not a dlockd://, dlockds:// or dlockd+unix:///PATH URL")
    if "#" in url:
        raise InvalidArgument(f"dlock: {shown!r}: a dlockd URL has no #fragment")
    unix = scheme == "dlockd+unix"
    if unix:
        host = _unquote(u.path, shown)
        if u.hostname or port is not None:
            raise InvalidArgument(
                f"dlock: {shown!r}: a dlockd+unix URL names a path, not a host (dlockd+unix:///PATH)"
            )
    else:
        host = u.hostname or ""
        if u.path not in ("", "/"):
            raise InvalidArgument(f"dlock: {shown!r}: a dlockd URL has no path (nor a database number)")
    if not host:
        raise InvalidArgument(f"dlock: {shown!r} names no {'socket path' if unix else 'host'}")
    if unix:
        port = 0
    elif port is None:
        port = DEFAULT_PORT
    elif not 1 <= port <= 65535:
        raise InvalidArgument(f"dlock: {shown!r}: port must be 1 to 65535")
    user = _unquote(u.username, shown) if u.username else None
    if user is not None and user not in ("default", "admin"):
        raise InvalidArgument(f"dlock: dlockd's users are default and admin, not {user!r}")
    password = _unquote(u.password, shown) if u.password is not None else None

    q: Dict[str, str] = {}
    try:
        pairs = parse_qsl(u.query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument(f"dlock: {shown!r}: an option with a %-escape that is not UTF-8") from None
    for k, v in pairs:
        if k not in OPTIONS:
            raise InvalidArgument(f"dlock: unknown option {k!r} in a dlockd URL ({', '.join(OPTIONS)})")
        if k in q:
            raise InvalidArgument(f"dlock: option {k!r} of a dlockd URL given more than once")
        q[k] = v
    timeout = DEFAULT_TIMEOUT
    if "timeout" in q:
        timeout = float(q["timeout"]) if _DECIMAL.fullmatch(q["timeout"]) else -1.0
    if not 0.001 <= timeout <= 86400:
        raise InvalidArgument("dlock: timeout must be 0.001 to 86400 seconds")
    max_hold: Optional[float] = None
    if "maxhold" in q:
        if not _DIGITS.fullmatch(q["maxhold"]) or int(q["maxhold"]) > _args.MS_MAX:
            raise InvalidArgument("dlock: maxhold must be a number of ms (0: no limit)")
        max_hold = int(q["maxhold"]) / 1000
    tls = {k: q[k] for k in ("cafile", "cert", "key") if k in q}
    if tls and scheme != "dlockds":
        raise InvalidArgument("dlock: cafile, cert and key are options of dlockds:// URLs")
    for k, v in tls.items():
        if not v:
            raise InvalidArgument(f"dlock: {k} names no file")
    name = q.get("name")
    if name is not None and not _CLIENT_NAME.fullmatch(name):
        raise InvalidArgument("dlock: name must be 1 to 128 printable ASCII characters, without spaces")
    return Url(scheme, host, port, user, password, timeout, name, max_hold, tls)
