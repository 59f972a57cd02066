"""Redis Sentinel: ``redis+sentinel://`` URLs, and finding the master through the sentinels.

Form::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/SERVICE[/db][?option=value&...]
    rediss+sentinel://...                                   the same, the data connections over TLS

The hosts are the sentinels (port 26379 by default), ``SERVICE`` the name in
their ``sentinel monitor SERVICE ...`` line, ``db`` the database (also
``?db=``). The user and password are the master's (as in ``redis://``; also
``password_file``, ``WORKHIVE_REDIS_PASSWORD``, ``REDISCLI_AUTH``). Every
``redis://`` option applies (``prefix``, ``retry_for``, ``timeout``,
``lease``, ``password_file``, and the ``ssl_*`` ones for ``rediss+sentinel``),
plus ``sentinel_username``, ``sentinel_password`` and
``sentinel_password_file`` for sentinels that need a login of their own
(``requirepass`` in sentinel.conf). Each password read is registered with
the scrubber; ``sentinel_password=`` is masked wherever the URL is shown.

How the master is followed (``workhive_redis.connections`` calls
``MasterFinder``): the address is asked of the sentinels when the first
connection is made and remembered; a connection error or a ``READONLY``
reply (the remembered server was demoted to a replica) forgets it and drops
the idle connections, so the next attempt asks the sentinels again. Until
they name a promoted master the storage is "briefly unavailable" and calls
are retried within ``retry_for``, exactly like a restarting plain server.

>>> cfg = parse_sentinel_url("redis+sentinel://:pw@10.0.0.1,10.0.0.2:26380/mymaster/2?prefix=billing")
>>> cfg.sentinels, cfg.service, cfg.db, cfg.prefix
((('10.0.0.1', 26379), ('10.0.0.2', 26380)), 'mymaster', 2, 'billing')
>>> cfg.display
'redis+sentinel://10.0.0.1:26379,10.0.0.2:26380/mymaster/2'
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

import attrs

from workhive.errors import ConfigError, StorageUnavailable
from workhive.passwords import read_password_file
from workhive.redaction import register_secret
from workhive.urls import check_userinfo, redact_url, url_query
from workhive_redis.url import _OPTIONS, _TLS_OPTIONS, RedisConfig, parse_url

__all__ = ["SENTINEL_SCHEMES", "MasterFinder", "SentinelConfig", "is_sentinel", "parse_sentinel_url"]

#: the URL schemes of a hive behind Redis Sentinel
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password", "sentinel_password_file")
DEFAULT_SENTINEL_PORT = 26379
# What `sentinel monitor` accepts as a name, short of spaces; '/' would end it in the URL anyway.
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,99}")
_EXAMPLE = "redis+sentinel://host:26379,host:26380/mymaster"


@attrs.frozen
class SentinelConfig(RedisConfig):
    """A ``RedisConfig`` whose server is whichever one the sentinels name master of ``service``.

    ``host`` and ``port`` stay None: the address is found when a connection
    is made (``MasterFinder``). Passwords are never shown.
    """

    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    sentinel_username: str | None = attrs.field(default=None, repr=False)
    sentinel_password: str | None = attrs.field(default=None, repr=False)

    @property
    def sentinel_list(self) -> str:
        """``host:port,host:port``: the sentinels, as messages name them."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)

    @property
    def where(self) -> str:
        """The service and the sentinels asked for it (never a password)."""
        return f"service {self.service!r} via sentinels {self.sentinel_list}"

    @property
    def display(self) -> str:
        return f"{self.scheme}://{self.sentinel_list}/{self.service}/{self.db}"

    def connection_kwargs(self) -> dict[str, Any]:
        """redis-py connection settings for the master; its host and port are set once it is found."""
        kwargs = super().connection_kwargs()
        kwargs.update(self.tls)  # RedisConfig adds them only when it has a host of its own
        return kwargs

    def sentinel_kwargs(self) -> dict[str, Any]:
        """Settings for the connections to the sentinels (plain TCP, their own login)."""
        return {
            "username": self.sentinel_username,
            "password": self.sentinel_password,
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.timeout,
            "decode_responses": True,
            "health_check_interval": 0,
            # RESP2: SENTINEL MASTERS parses into the same dict of states in every redis-py of the range;
            # over RESP3, 7.x returned a list of differently shaped states (no is_master).
            "protocol": 2,
        }


def _bad(shown: str, what: str) -> ConfigError:
    return ConfigError(f"Redis Sentinel URL {shown!r} {what}", url=shown)


def _sentinels(shown: str, hosts: str) -> tuple[tuple[str, int], ...]:
    found: list[tuple[str, int]] = []
    for text in hosts.split(","):
        text = text.strip()
        if not text:
            continue
        # Read each address as a URL authority of its own: IPv6 in brackets, the port checked.
        try:
            parts = urlsplit(f"//{text}")
            host, port = parts.hostname, parts.port
        except ValueError as exc:
            raise _bad(shown, f"has a malformed sentinel address {text!r} ({exc}); write host:port") from None
        if not host or parts.path or parts.query:
            raise _bad(shown, f"has a malformed sentinel address {text!r}; write host:port")
        found.append((host, port or DEFAULT_SENTINEL_PORT))
    if not found:
        raise _bad(shown, f"names no sentinel: list them before the service name, {_EXAMPLE}")
    if len(set(found)) != len(found):
        raise _bad(shown, "names a sentinel twice; list each once")
    return tuple(found)


def parse_sentinel_url(url: object) -> SentinelConfig:
    """Parse a ``redis+sentinel://`` URL; ``ConfigError`` says what is malformed (with passwords masked).

    >>> parse_sentinel_url("redis+sentinel://127.0.0.1:26379/mymaster").where
    "service 'mymaster' via sentinels 127.0.0.1:26379"
    """
    if not isinstance(url, str):
        raise ConfigError(f"a Redis Sentinel URL must be a string, got {type(url).__name__}")
    shown = redact_url(url)
    check_userinfo(url, "Redis Sentinel URL")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SENTINEL_SCHEMES:
        raise _bad(shown, f"is not a Redis Sentinel URL: write {_EXAMPLE}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    sentinels = _sentinels(shown, hosts)
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path:
        raise _bad(
            shown,
            f"names no service: add the name the sentinels monitor (their `sentinel monitor NAME …` line), {_EXAMPLE}",
        )
    if len(path) > 2:
        raise _bad(shown, "has a path of more than /SERVICE/db")
    service = path[0]
    if _SERVICE.fullmatch(service) is None:
        raise _bad(shown, f"names the service {service!r}: use 1-100 letters, digits and . _ : -")
    query = url_query(url, "Redis Sentinel URL")
    known = _OPTIONS + (_TLS_OPTIONS if scheme == "rediss+sentinel" else ()) + SENTINEL_OPTIONS
    unknown = sorted(set(query) - set(known))
    if unknown:
        raise _bad(shown, f"has unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
    sentinel_options = {k: query.pop(k) for k in SENTINEL_OPTIONS if k in query}
    if len(path) == 2:
        if "db" in query:
            raise _bad(shown, "gives the database twice (path and ?db=)")
        query["db"] = path[1]
    # Every other option means what it means in redis://: parse it with the same code, on a
    # stand-in URL for the master, and show the user's URL in any complaint.
    plain = "rediss" if scheme == "rediss+sentinel" else "redis"
    stand_in = f"{plain}://{userinfo + '@' if userinfo else ''}sentinel-master?{urlencode(query)}"
    try:
        base = parse_url(stand_in)
    except ConfigError as exc:
        message = str(exc).replace(repr(redact_url(stand_in)), repr(shown)).replace("Redis URL", "Redis Sentinel URL")
        raise ConfigError(message, url=shown) from None
    sentinel_password = sentinel_options.get("sentinel_password")
    if sentinel_password is not None:
        if "sentinel_password_file" in sentinel_options:
            raise _bad(shown, "gives sentinel_password and sentinel_password_file: keep only one")
        register_secret(sentinel_password)
    elif "sentinel_password_file" in sentinel_options:
        sentinel_password = read_password_file(
            sentinel_options["sentinel_password_file"], "sentinel_password_file", f"Redis Sentinel URL {shown!r}"
        )
    fields = attrs.asdict(base, recurse=False)
    fields.update(scheme=scheme, host=None, port=None)
    return SentinelConfig(
        **fields,
        sentinels=sentinels,
        service=service,
        sentinel_username=sentinel_options.get("sentinel_username") or None,
        sentinel_password=sentinel_password,
    )


class MasterFinder:
    """Asks the sentinels which server is the master of the service, and remembers the answer.

    >>> finder = MasterFinder(parse_sentinel_url("redis+sentinel://127.0.0.1:26379/mymaster"))
    >>> host, port = await finder.master()  # doctest: +SKIP
    """

    def __init__(self, config: SentinelConfig) -> None:
        from redis.asyncio.retry import Retry
        from redis.asyncio.sentinel import Sentinel
        from redis.backoff import NoBackoff

        self.config = config
        # One try per sentinel and per discovery: the caller's retry_for loop does the retrying,
        # and a dead sentinel must not hold up asking the next one.
        settings = {**config.sentinel_kwargs(), "retry": Retry(NoBackoff(), 0)}
        self._sentinel = Sentinel(list(config.sentinels), sentinel_kwargs=settings)
        self.address: tuple[str, int] | None = None

    async def master(self) -> tuple[str, int]:
        """The master's ``(host, port)``: the remembered one, else what the sentinels say now."""
        if self.address is None:
            self.address = await self.discover()
        return self.address

    def forget(self) -> None:
        """The remembered master failed (gone, or a replica now): ask the sentinels next time."""
        self.address = None

    async def discover(self) -> tuple[str, int]:
        """Ask each sentinel in turn (the last one that answered first) for a master it sees up.

        ``StorageUnavailable`` when none names one: it names the service and
        every sentinel asked with what each said. Sentinels that answer but do
        not monitor the service make it a ``ConfigError`` (a wrong name, or
        sentinels not set up yet); sentinels that see the master down, or
        cannot be reached, are what a failover looks like, and the caller
        retries within ``retry_for``.
        """
        import redis.exceptions as errors

        from workhive_redis.failures import reason

        config = self.config
        said: list[str] = []
        unknown: list[str] = []
        refused: list[str] = []
        sentinels = self._sentinel.sentinels
        for number, client in enumerate(sentinels):
            kwargs = client.connection_pool.connection_kwargs
            name = f"{kwargs.get('host')}:{kwargs.get('port')}"
            try:
                masters = await client.sentinel_masters()
            except (errors.ConnectionError, errors.TimeoutError, OSError) as exc:
                said.append(f"{name}: unreachable ({reason(exc)})")
                continue
            except errors.ResponseError as exc:  # a login refused, a command not allowed
                said.append(f"{name}: refused ({reason(exc)})")
                refused.append(name)
                continue
            state = masters.get(config.service)
            if not state:
                said.append(f"{name}: does not monitor {config.service!r}")
                unknown.append(name)
                continue
            if not self._sentinel.check_master_state(state, config.service):
                said.append(f"{name}: sees the master {state.get('ip')}:{state.get('port')} down")
                continue
            # Ask the one that answered first next time, as redis-py's own discovery does.
            sentinels[0], sentinels[number] = client, sentinels[0]
            return str(state["ip"]), int(state["port"])
        asked = "; ".join(said)
        if unknown and len(unknown) + len(refused) == len(sentinels):
            raise ConfigError(
                f"no sentinel monitors a service named {config.service!r} (asked {asked}); use the name of "
                "their `sentinel monitor NAME host port quorum` line in the URL (SENTINEL MASTERS lists them)",
                url=config.display,
            )
        if refused and len(refused) == len(sentinels):
            raise StorageUnavailable(
                f"every sentinel of {config.where} refused workhive ({asked}); give their login with "
                "sentinel_password_file= (or sentinel_username= and sentinel_password=) in the URL",
                where=config.where,
            )
        raise StorageUnavailable(
            f"no master for {config.where} ({asked}); check that the sentinels run and see the master, "
            "or wait for their failover to finish",
            where=config.where,
        )

    async def close(self) -> None:
        for client in self._sentinel.sentinels:
            try:
                await client.aclose()
            except Exception:  # closing sockets of a client being thrown away; nothing to do
                pass


def is_sentinel(config: RedisConfig) -> bool:
    """Whether ``config`` reaches its server through sentinels."""
    return isinstance(config, SentinelConfig)
