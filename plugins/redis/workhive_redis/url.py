"""Parsing ``redis://``, ``rediss://`` and ``unix://`` URLs; the password never leaves ``RedisConfig``.

Forms::

    redis://[[user]:password@]host[:port][/db][?option=value&...]
    rediss://...                                   the same over TLS
    unix:///path/to/redis.sock[?db=N&option=value&...]
    redis+cluster://[[user]:password@]host:port[,host:port...][/0][?option=value&...]
    rediss+cluster://...                           a Redis Cluster over TLS
    redis+sentinel://[[user]:password@]host:port,host:port/SERVICE[/db][?...]   see workhive_redis.sentinel

Options: ``prefix`` (default ``workhive``: several hives can share one
server under different prefixes), ``retry_for`` (seconds a dropped
connection is retried, default 30), ``timeout`` (socket timeout in seconds,
default 10), ``lease`` (fleet-wide locks: seconds a dead holder keeps a lock
before it frees itself, default 10), ``password_file`` (a file whose first
line is the password). ``rediss://`` also takes ``ssl_cert_reqs`` (required,
optional, none), ``ssl_ca_certs`` (the CA file that signed the server's
certificate), ``ssl_certfile`` and ``ssl_keyfile`` (a client certificate and
its unencrypted key); every file is checked when the URL is parsed, so a
wrong path is a ``ConfigError`` naming the option, not a connection failure.

Passwords outside the URL: a URL without a password takes it from
``password_file``, else from ``WORKHIVE_REDIS_PASSWORD``, else from
``REDISCLI_AUTH`` (what ``redis-cli`` reads). A password in the URL wins.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs

from workhive.errors import ConfigError
from workhive.passwords import password_from_env, read_password_file
from workhive.urls import check_userinfo, redact_url, url_query

__all__ = ["RedisConfig", "parse_url"]

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,99}")
_OPTIONS = ("prefix", "retry_for", "timeout", "lease", "db", "password_file")
_TLS_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
#: where a URL without a password finds one, in this order (redis-cli reads REDISCLI_AUTH)
PASSWORD_VARIABLES = ("WORKHIVE_REDIS_PASSWORD", "REDISCLI_AUTH")
_SCHEMES = ("redis", "rediss", "unix")
#: a Redis Cluster: the nodes listed are where discovery starts (workhive_redis.cluster)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


@attrs.frozen
class RedisConfig:
    """Where the server is, how to log in (the password is never shown) and the key prefix.

    >>> cfg = parse_url("redis://:secret@127.0.0.1:6380/2?prefix=billing")
    >>> cfg.where, cfg.db, cfg.prefix
    ('127.0.0.1:6380', 2, 'billing')
    >>> "secret" in repr(cfg)
    False
    """

    scheme: str
    host: str | None
    port: int | None
    path: str | None
    db: int = 0
    username: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    prefix: str = "workhive"
    retry_for: float = 30.0
    timeout: float = 10.0
    lease: float = 10.0
    tls: dict[str, str] = attrs.field(factory=dict)
    #: a cluster URL's seed nodes, (host, port) each; () for one server
    nodes: tuple[tuple[str, int], ...] = ()

    @property
    def cluster(self) -> bool:
        """True for ``redis+cluster://`` and ``rediss+cluster://``."""
        return bool(self.nodes)

    @property
    def where(self) -> str:
        """``host:port`` or the socket path: what messages name (never a password)."""
        if self.nodes:
            return "cluster " + ",".join(_host_port(h, p) for h, p in self.nodes)
        return self.path if self.path is not None else f"{self.host}:{self.port}"

    @property
    def display(self) -> str:
        """The URL without credentials and options: ``redis://host:port/db``."""
        if self.path is not None:
            return f"unix://{self.path}?db={self.db}"
        if self.nodes:
            return f"{self.scheme}://{','.join(_host_port(h, p) for h, p in self.nodes)}/0"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/{self.db}"

    def connection_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for redis-py's ``ConnectionPool`` (drivers are imported by the caller)."""
        kwargs: dict[str, Any] = {
            "db": self.db,
            "username": self.username,
            "password": self.password,
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "decode_responses": True,
            "health_check_interval": 0,
            # RESP3 whatever the driver's default (redis-py 8 speaks it unless told, 5-7 do not):
            # replies are read as RESP3 shapes (HGETALL a map), and under RESP2 they are flat lists.
            "protocol": 3,
        }
        if self.path is not None:
            kwargs["path"] = self.path
        else:
            kwargs["host"], kwargs["port"] = self.host, self.port
            kwargs.update(self.tls)
        return kwargs


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cluster_nodes(shown: str, netloc: str) -> tuple[tuple[str, int], ...]:
    """The ``host:port`` list of a cluster URL (urlsplit reads one host only)."""
    nodes = []
    for part in netloc.rpartition("@")[2].split(","):
        try:
            probe = urlsplit(f"//{part}")
            host, port = probe.hostname, probe.port
        except ValueError as exc:
            raise ConfigError(f"Redis URL {shown!r}: node {part!r} is malformed ({exc})", url=shown) from None
        if not host:
            raise ConfigError(
                f"Redis URL {shown!r} lists an empty node: write redis+cluster://host:port,host:port/", url=shown
            )
        nodes.append((host, port or 6379))
    return tuple(dict.fromkeys(nodes))


def _number(shown: str, name: str, value: str, *, minimum: float) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{name}={value!r} in {shown!r} must be a number of seconds >= {minimum:g}", url=shown)
    return number


def _tls_file(shown: str, option: str, path: str) -> str:
    """``path`` made absolute after checking it is a readable file: the driver's own error names no file."""
    expanded = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(expanded):
        what = "is a directory" if os.path.isdir(expanded) else "does not exist"
        raise ConfigError(f"{option}={path!r} in {shown!r}: {expanded} {what}; name the PEM file", url=shown)
    if not os.access(expanded, os.R_OK):
        raise ConfigError(
            f"{option}={path!r} in {shown!r}: {expanded} is not readable by this process (check its owner and mode)",
            url=shown,
        )
    return expanded


def parse_url(url: object) -> RedisConfig:
    """Parse a Redis URL; ``ConfigError`` says what is malformed (with the password masked).

    A password with a raw ``/ ? #`` is refused (percent-encode it), an option given twice too.

    >>> parse_url("redis://localhost").where
    'localhost:6379'
    >>> parse_url("unix:///run/redis.sock?db=3").db
    3
    >>> parse_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000/?prefix=p").nodes
    (('10.0.0.1', 7000), ('10.0.0.2', 7000))
    """
    if not isinstance(url, str):
        raise ConfigError(f"a Redis URL must be a string, got {type(url).__name__}")
    if url.split(":", 1)[0].lower() in ("redis+sentinel", "rediss+sentinel"):
        from workhive_redis.sentinel import parse_sentinel_url  # it reads the rest with this function

        return parse_sentinel_url(url)
    shown = redact_url(url)
    check_userinfo(url, "Redis URL")
    try:
        parts = urlsplit(url)
        # A cluster URL lists several host:port pairs, which urlsplit cannot read as one port.
        port = None if parts.scheme.lower() in CLUSTER_SCHEMES else parts.port
    except ValueError as exc:
        raise ConfigError(f"Redis URL {shown!r} is malformed ({exc}); write redis://host:6379/0", url=shown) from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES + CLUSTER_SCHEMES:
        raise ConfigError(
            f"{shown!r} is not a Redis URL: write redis://host:6379/0, rediss://host:6380/0 (TLS), "
            "unix:///path/to/redis.sock, redis+cluster://host:port,host:port/ (a Redis Cluster) "
            "or redis+sentinel://host:26379,host:26380/SERVICE",
            url=shown,
        )
    nodes: tuple[tuple[str, int], ...] = ()
    if scheme in CLUSTER_SCHEMES:
        nodes = _cluster_nodes(shown, parts.netloc)
        port = nodes[0][1]
    query = url_query(url, "Redis URL")
    known = _OPTIONS + (_TLS_OPTIONS if scheme.startswith("rediss") else ())
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise ConfigError(
            f"Redis URL {shown!r} has unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}", url=shown
        )
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    db_text = query.get("db")
    host: str | None
    path: str | None
    if scheme == "unix":
        host, port, path = None, None, unquote(parts.path)
        if parts.hostname or not path.startswith("/"):
            raise ConfigError(f"Redis URL {shown!r}: write unix:///absolute/path/to/redis.sock", url=shown)
    else:
        host, path = (nodes[0][0] if nodes else parts.hostname), None
        if not host:
            raise ConfigError(f"Redis URL {shown!r} names no host: write redis://host:6379/0", url=shown)
        port = port or 6379
        db_path = parts.path.strip("/")
        if db_path:
            if db_text is not None:
                raise ConfigError(f"Redis URL {shown!r} gives the database twice (path and ?db=)", url=shown)
            db_text = db_path
    db = 0
    if db_text is not None:
        if not db_text.isdigit() or len(db_text) > 6:
            raise ConfigError(
                f"Redis URL {shown!r}: the database must be a number such as 0 (redis://host:6379/0), got {db_text!r}",
                url=shown,
            )
        db = int(db_text)
    if nodes and db != 0:
        raise ConfigError(f"Redis URL {shown!r}: a Redis Cluster has only database 0", url=shown)
    prefix = query.get("prefix", "workhive")
    if _PREFIX.fullmatch(prefix) is None:
        raise ConfigError(
            f"prefix={prefix!r} in {shown!r} is not allowed: use 1-100 letters, digits and . _ : - "
            "(starting with a letter or digit)",
            url=shown,
        )
    tls = {k: query[k] for k in _TLS_OPTIONS if k in query}
    if "ssl_cert_reqs" in tls and tls["ssl_cert_reqs"] not in ("required", "optional", "none"):
        raise ConfigError(f"ssl_cert_reqs in {shown!r} must be required, optional or none", url=shown)
    for option in _TLS_FILES:
        if option in tls:
            tls[option] = _tls_file(shown, option, tls[option])
    if "ssl_keyfile" in tls and "ssl_certfile" not in tls:
        raise ConfigError(f"ssl_keyfile in {shown!r} needs ssl_certfile (the client certificate) too", url=shown)
    if password is not None and "password_file" in query:
        raise ConfigError(f"Redis URL {shown!r} gives a password and password_file: keep only one", url=shown)
    if password is None:
        if "password_file" in query:
            password = read_password_file(query["password_file"], "password_file", f"Redis URL {shown!r}")
        else:
            password = password_from_env(PASSWORD_VARIABLES)
    return RedisConfig(
        scheme=scheme,
        host=host,
        port=port,
        path=path,
        db=db,
        username=username,
        password=password,
        prefix=prefix,
        retry_for=_number(shown, "retry_for", query.get("retry_for", "30"), minimum=0),
        timeout=_number(shown, "timeout", query.get("timeout", "10"), minimum=0.001),
        lease=_number(shown, "lease", query.get("lease", "10"), minimum=0.05),
        tls=tls,
        nodes=nodes,
    )
