"""Parsing ``sqlite://`` URLs into a file path and connection options.

Forms::

    sqlite:///relative/path.db        relative to the current directory
    sqlite:////absolute/path.db       absolute
    ...?synchronous=normal|full|off|extra&busy_timeout=5000
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import attrs

from workhive.errors import ConfigError
from workhive.urls import redact_url, url_query

__all__ = ["SYNCHRONOUS_MODES", "SqliteConfig", "parse_url"]

SYNCHRONOUS_MODES = ("off", "normal", "full", "extra")
DEFAULT_BUSY_TIMEOUT_MS = 5000
_OPTIONS = ("synchronous", "busy_timeout")


@attrs.frozen
class SqliteConfig:
    """Where the database lives and how connections are set up.

    >>> parse_url("sqlite:///.workhive/hive.db?synchronous=full").synchronous
    'full'
    """

    path: Path
    synchronous: str = "normal"
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS


def parse_url(url: str) -> SqliteConfig:
    """Parse a ``sqlite://`` URL; ``ConfigError`` says what is malformed and the expected form.

    >>> parse_url("sqlite:////var/lib/hive.db").path
    PosixPath('/var/lib/hive.db')
    >>> parse_url("sqlite:///hive.db").path
    PosixPath('hive.db')
    """
    if not isinstance(url, str):
        raise ConfigError(f"SQLite URL must be a string, got {type(url).__name__}", url=url)
    shown = redact_url(url)  # what messages show: a sqlite URL has no password, but a mistyped one might
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ConfigError(
            f"{shown!r} is not a sqlite:// URL; write sqlite:///relative.db or sqlite:////abs.db", url=shown
        )
    if parts.netloc:
        raise ConfigError(
            f"SQLite URL {shown!r} names a host; SQLite files are local: "
            "write sqlite:///relative/path.db (three slashes) or sqlite:////absolute/path.db (four)",
            url=shown,
        )
    if not url[len(parts.scheme) :].startswith(":///"):
        raise ConfigError(
            f"SQLite URL {shown!r} is malformed: write sqlite:///relative/path.db or sqlite:////absolute/path.db",
            url=shown,
        )
    # urlsplit keeps the slash after the empty host: '/rel.db' or '//abs.db'.
    raw = unquote(parts.path[1:])
    if not raw or raw.endswith("/"):
        raise ConfigError(f"SQLite URL {shown!r} has no file name: write e.g. sqlite:///.workhive/hive.db", url=shown)
    if raw == ":memory:":
        raise ConfigError(
            "an in-memory SQLite database cannot be shared between workers; use memory:// for a "
            "throwaway store or a file path such as sqlite:///.workhive/hive.db",
            url=shown,
        )
    if "\x00" in raw:
        raise ConfigError(f"SQLite URL {shown!r} contains a NUL character in its path", url=shown)
    query = url_query(url, "SQLite URL")
    unknown = sorted(set(query) - set(_OPTIONS))
    if unknown:
        raise ConfigError(
            f"SQLite URL {shown!r} has unknown option(s) {', '.join(unknown)}; known: {', '.join(_OPTIONS)}",
            url=shown,
        )
    synchronous = query.get("synchronous", "normal").lower()
    if synchronous not in SYNCHRONOUS_MODES:
        raise ConfigError(
            f"synchronous={query['synchronous']!r} in {shown!r} is not a SQLite synchronous mode; "
            f"use one of {', '.join(SYNCHRONOUS_MODES)}",
            url=shown,
        )
    busy = query.get("busy_timeout", str(DEFAULT_BUSY_TIMEOUT_MS))
    try:
        busy_ms = int(busy)
    except ValueError:
        busy_ms = -1
    if busy_ms < 0:
        raise ConfigError(f"busy_timeout={busy!r} in {shown!r} must be a whole number of milliseconds >= 0", url=shown)
    return SqliteConfig(Path(raw), synchronous, busy_ms)
