"""Parsing ``postgresql://`` URLs into connection settings, and showing them without the password.

Forms::

    postgresql://user:password@host:port/database?schema=workhive
    postgres://user@host/database                 (port 5432, schema workhive)
    ...?schema=NAME&pool_size=10&connect_timeout=10&command_timeout=30&retry_for=60&sslmode=require
    ...?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem&sslcert=client.crt&sslkey=client.key
    postgresql://app@db/jobs?passfile=/run/secrets/pgpass   (or PGPASSWORD, PGPASSFILE, ~/.pgpass)
    postgresql://app@bouncer:6432/jobs?pgbouncer=transaction&direct_host=db&direct_port=5432
    postgresql://app@bouncer:6432/jobs?pgbouncer=session

``pgbouncer=`` says the host is a PgBouncer and in which pool mode. In
``transaction`` mode a connection carries no session state from one
transaction to the next, so no prepared statement outlives its statement and
LISTEN and session advisory locks need PostgreSQL itself: ``direct_host`` /
``direct_port`` (the same database, user, password and TLS settings).

TLS files and password files are read as libpq reads them and checked when
the URL is parsed (``workhive_postgres.tls``).

The password never leaves this module in any text: ``PostgresConfig.where``
(``host:port/db``) and ``PostgresConfig.redacted`` are what messages and
reprs show. A URL that fails to parse is described, never echoed (one whose password
holds a raw ``/ ? #`` is shown by ``workhive.urls.redact_url``, which masks all of it).
"""

from __future__ import annotations

import os
import re
import ssl
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

from workhive.errors import ConfigError
from workhive.urls import check_userinfo, parse_options
from workhive.urls import redact_url as _redact
from workhive_postgres.tls import register_env_passwords, ssl_context

__all__ = ["DEFAULT_SCHEMA", "PostgresConfig", "parse_url", "redact_url"]

DEFAULT_SCHEMA = "workhive"
SCHEMES = ("postgresql", "postgres")
_TLS_OPTIONS = ("sslrootcert", "sslcert", "sslkey", "sslpassword")
_OPTIONS = (
    "schema", "pool_size", "connect_timeout", "command_timeout", "retry_for", "sslmode", "application_name",
    "passfile", "pgbouncer", "direct_host", "direct_port", *_TLS_OPTIONS,
)  # fmt: skip
#: PgBouncer's pool modes workhive runs behind (statement mode cannot run a transaction at all)
POOL_MODES = ("transaction", "session")
#: what a user behind PgBouncer may have tried from asyncpg's or libpq's advice: answered with the option to use
_BOUNCER_HINTS = ("statement_cache_size", "prepare_threshold", "prepared_statement_cache_size")
_SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# Lower case, so that it needs no quoting and means the same to every client.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@attrs.frozen
class PostgresConfig:
    """Where the hive lives and how to connect; ``password`` is hidden from repr.

    >>> cfg = parse_url("postgresql://app:s3cret@db.example:6543/jobs?schema=hive")
    >>> cfg.where, cfg.schema
    ('db.example:6543/jobs', 'hive')
    >>> "s3cret" in repr(cfg) or "s3cret" in cfg.redacted
    False
    """

    host: str
    port: int
    database: str
    user: str | None
    password: str | None = attrs.field(repr=False)
    schema: str = DEFAULT_SCHEMA
    pool_size: int = 10
    connect_timeout: float = 10.0
    #: seconds a storage statement may go unanswered before its connection counts as lost (a
    #: stalled or half-open network); not applied to lock waits, which the server bounds itself
    command_timeout: float = 30.0
    retry_for: float = 60.0
    sslmode: str | None = None
    application_name: str = "workhive"
    #: a libpq password file (``host:port:db:user:password`` lines) asyncpg reads when the URL has no password
    passfile: str | None = None
    #: built from sslmode and the sslrootcert/sslcert/sslkey files; None leaves TLS to asyncpg and sslmode
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, repr=False, eq=False)
    #: the CA file the server's certificate is checked against (``system``: the system's CAs)
    sslrootcert: str | None = None
    #: the PgBouncer pool mode in front of the server (``transaction`` or ``session``), None: connected directly
    pgbouncer: str | None = None
    #: PostgreSQL itself, behind the PgBouncer: LISTEN and lock sessions connect here when set
    direct_host: str | None = None
    direct_port: int = 5432

    @property
    def transaction_pooled(self) -> bool:
        """Whether a session lasts only one transaction (PgBouncer ``pool_mode = transaction``)."""
        return self.pgbouncer == "transaction"

    @property
    def sessions_reach_server(self) -> bool:
        """Whether a session-long connection is possible: LISTEN and session advisory locks work."""
        return not self.transaction_pooled or self.direct_host is not None

    def direct(self) -> PostgresConfig:
        """Where LISTEN and lock sessions connect: PostgreSQL itself at ``direct_host`` when set, else this.

        >>> cfg = parse_url("postgresql://app@bouncer:6432/jobs?pgbouncer=transaction&direct_host=db")
        >>> cfg.direct().where, cfg.direct().pgbouncer
        ('db:5432/jobs', None)
        """
        if self.direct_host is None:
            return self
        return attrs.evolve(self, host=self.direct_host, port=self.direct_port, pgbouncer=None, direct_host=None)

    @property
    def sslrootcert_shown(self) -> str:
        """How messages name the CA the server's certificate was checked against."""
        return "the system's CAs" if self.sslrootcert == "system" else f"sslrootcert={self.sslrootcert}"

    @property
    def where(self) -> str:
        """``host:port/database``: how every message names the server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}/{self.database}"

    @property
    def redacted(self) -> str:
        """The URL with the password replaced by ``***``."""
        user = "" if self.user is None else self.user + (":***" if self.password is not None else "") + "@"
        shown = [] if self.schema == DEFAULT_SCHEMA else [f"schema={self.schema}"]
        if self.pgbouncer is not None:
            shown.append(f"pgbouncer={self.pgbouncer}")
        if self.direct_host is not None:
            shown.append(f"direct_host={self.direct_host}&direct_port={self.direct_port}")
        query = "?" + "&".join(shown) if shown else ""
        return f"postgresql://{user}{self.where}{query}"

    def connect_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``asyncpg.connect``/``create_pool``.

        Behind PgBouncer in transaction mode asyncpg keeps no statement
        cache: with ``statement_cache_size=0`` it prepares each statement unnamed, in the same
        message sequence that runs it, so no statement outlives the server connection it ran on
        (asyncpg 0.29+; older ones reused the unnamed statement across a Sync PgBouncer may
        hand to another client).
        """
        kwargs: dict[str, object] = {
            "host": self.host,
            "port": self.port,
            "database": self.database,
            "timeout": self.connect_timeout,
        }
        if self.user is not None:
            kwargs["user"] = self.user
        if self.password is not None:
            kwargs["password"] = self.password
        if self.passfile is not None:
            kwargs["passfile"] = self.passfile
        if self.ssl_context is not None:
            kwargs["ssl"] = self.ssl_context
        elif self.sslmode is not None:
            kwargs["ssl"] = self.sslmode
        if self.transaction_pooled:
            kwargs["statement_cache_size"] = 0
        return kwargs


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for text shown to people): ``workhive.urls.redact_url``.

    >>> redact_url("postgresql://u:pw@h/db")
    'postgresql://u:***@h/db'
    >>> redact_url("postgresql://u:p/w?d@h/db")
    'postgresql://u:***@h/db'
    """
    return _redact(url)


def _bad(message: str) -> ConfigError:
    return ConfigError(message + "; the form is postgresql://user:password@host:port/database?schema=workhive")


def _number(name: str, text: str, low: float, integer: bool) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = low - 1
    if not value >= low:
        kind = "a whole number" if integer else "a number of seconds"
        raise _bad(f"{name}={text!r} in the PostgreSQL URL must be {kind} >= {low:g}")
    return value


def parse_url(url: str) -> PostgresConfig:
    """Parse a ``postgresql://`` URL; ``ConfigError`` says what is malformed (never showing the password).

    >>> parse_url("postgres://postgres@127.0.0.1/test").where
    '127.0.0.1:5432/test'
    """
    if not isinstance(url, str):
        raise ConfigError(f"a PostgreSQL URL must be a string, got {type(url).__name__}")
    # A raw / ? # in the password would be read as the host, port or database: refused, redacted.
    check_userinfo(url, "PostgreSQL URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _bad("the PostgreSQL URL has a malformed host or port (the port must be a number up to 65535)") from None
    if parts.scheme.lower() not in SCHEMES:
        raise _bad(f"a {parts.scheme or 'scheme-less'} URL is not a PostgreSQL URL")
    host = parts.hostname
    if not host:
        raise _bad("the PostgreSQL URL names no host (e.g. 127.0.0.1 or db.example.com)")
    database = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not database or "/" in database:
        raise _bad(f"the PostgreSQL URL for {host} names no database (or more than one path segment)")
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise _bad(
            f"the PostgreSQL URL for {host}/{database} has a malformed query: write ?key=value&key=value"
        ) from None
    query = parse_options(pairs, f"the PostgreSQL URL for {host}/{database}")
    unknown = sorted(set(query) - set(_OPTIONS))
    if unknown:
        hint = ""
        if set(unknown) & set(_BOUNCER_HINTS):
            hint = (
                "; behind PgBouncer say ?pgbouncer=transaction (or session), which turns prepared statements "
                "off where they cannot work"
            )
        raise _bad(f"unknown option(s) {', '.join(unknown)} in the PostgreSQL URL{hint}; known: {', '.join(_OPTIONS)}")
    schema = query.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema) or schema.startswith("pg_"):
        raise _bad(
            f"schema={schema!r} is not a usable schema name: 1-63 lower-case letters, digits and _, "
            "not starting with a digit or pg_"
        )
    sslmode = query.get("sslmode")
    if sslmode is not None and sslmode not in _SSL_MODES:
        raise _bad(f"sslmode={sslmode!r} is not one of {', '.join(_SSL_MODES)}")
    try:
        context, rootcert = ssl_context(sslmode, {k: query[k] for k in _TLS_OPTIONS if k in query})
    except ConfigError as exc:
        raise ConfigError(f"the PostgreSQL URL for {host}/{database}: {exc}") from None
    pgbouncer = query.get("pgbouncer")
    if pgbouncer is not None and pgbouncer not in POOL_MODES:
        raise _bad(
            f"pgbouncer={pgbouncer!r} is not a pool mode workhive runs behind: pgbouncer=transaction or "
            "pgbouncer=session (statement mode cannot run the transactions workhive needs)"
        )
    direct_host = query.get("direct_host")
    if ("direct_host" in query or "direct_port" in query) and pgbouncer is None:
        raise _bad(
            "direct_host/direct_port name PostgreSQL behind a PgBouncer: give them with ?pgbouncer=transaction "
            "(or session), or connect to the server directly without them"
        )
    if direct_host is not None and not direct_host.strip():
        raise _bad("direct_host= is empty: name the PostgreSQL server behind the PgBouncer (e.g. direct_host=db)")
    if "direct_port" in query and direct_host is None:
        raise _bad("direct_port= without direct_host=: name the PostgreSQL server too")
    direct_port = int(_number("direct_port", query.get("direct_port", "5432"), 1, True))
    if direct_port > 65535:
        raise _bad(f"direct_port={direct_port} is not a TCP port (1-65535)")
    passfile = query.get("passfile")
    if passfile is not None:
        expanded = os.path.abspath(os.path.expanduser(passfile))
        if not os.path.isfile(expanded):
            raise ConfigError(
                f"passfile={passfile!r} in the PostgreSQL URL for {host}/{database}: {expanded} does not exist; "
                "name a file of host:port:database:user:password lines (mode 0600)"
            )
        passfile = expanded
    password = unquote(parts.password) if parts.password is not None else None
    if password is None:
        register_env_passwords(passfile)
    return PostgresConfig(
        host=host,
        port=port or 5432,
        database=database,
        user=unquote(parts.username) if parts.username else None,
        password=password,
        schema=schema,
        pool_size=int(_number("pool_size", query.get("pool_size", "10"), 1, True)),
        connect_timeout=_number("connect_timeout", query.get("connect_timeout", "10"), 0.1, False),
        command_timeout=_number("command_timeout", query.get("command_timeout", "30"), 0.1, False),
        retry_for=_number("retry_for", query.get("retry_for", "60"), 0, False),
        sslmode=sslmode,
        application_name=query.get("application_name", "workhive")[:63],
        passfile=passfile,
        ssl_context=context,
        sslrootcert=rootcert,
        pgbouncer=pgbouncer,
        direct_host=direct_host,
        direct_port=direct_port,
    )
