"""Parsing of storage/lock URLs and strategy specs (``full-jitter?base=0.5``)."""

from __future__ import annotations

import re
from typing import TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

from workhive.errors import ConfigError

__all__ = ["parse_spec", "redact_url", "scheme_of"]

_SCHEME = re.compile(r"[a-z][a-z0-9+.\-_]*")


def scheme_of(url: object, what: str = "storage URL") -> str:
    """The scheme of ``url`` (``sqlite:///x.db`` → ``sqlite``), or ConfigError explaining the form.

    >>> scheme_of("sqlite:///.workhive/hive.db")
    'sqlite'
    """
    if not isinstance(url, str) or ":" not in url:
        raise ConfigError(
            f"{what} {url!r} has no scheme: write it as scheme://…, e.g. sqlite:///.workhive/hive.db or memory://",
            url=url,
        )
    scheme = url.split(":", 1)[0].lower()
    if not _SCHEME.fullmatch(scheme):
        raise ConfigError(f"{what} {url!r} has an invalid scheme {scheme!r}", url=url)
    return scheme


def parse_spec(spec: object, what: str = "backoff strategy") -> tuple[str, dict[str, str]]:
    """Split ``name?key=value&…`` into the name and its parameters.

    >>> parse_spec("full-jitter?base=0.5&cap=60")
    ('full-jitter', {'base': '0.5', 'cap': '60'})
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{what} {spec!r} is empty: give a name such as full-jitter", spec=spec)
    name, _, query = spec.strip().partition("?")
    try:
        params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise ConfigError(
            f"{what} {spec!r} has malformed parameters: write name?key=value&key=value", spec=spec
        ) from None
    return name, params


def url_query(url: str) -> dict[str, str]:
    """The query parameters of a URL as a dict (last one wins)."""
    query = urlsplit(url).query
    try:
        return dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise ConfigError(f"URL {url!r} has a malformed query string: write ?key=value&key=value", url=url) from None


_T = TypeVar("_T")
_SECRET_PARAMS = frozenset({"password", "passwd", "pass", "token", "secret", "key", "api_key", "apikey"})
_USERINFO_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-_]*://[^/?#@:]*):[^/?#]*@")


def redact_url(url: _T) -> _T:
    """``url`` safe to print: a password in it (``user:pw@host``) or in a secret-looking query
    parameter (``?password=…``) is replaced by ``***``; everything else (and a value that is
    not a string) is kept as written. Every place that shows a storage or lock URL to a person
    (``workhive config``, ``status``, error messages, the dashboard) passes it through here.

    >>> redact_url("postgresql://app:s3cret@db:5432/jobs?schema=w&password=x")
    'postgresql://app:***@db:5432/jobs?schema=w&password=***'
    >>> redact_url("sqlite:///.workhive/hive.db")
    'sqlite:///.workhive/hive.db'
    """
    if not isinstance(url, str):
        return url
    text = _USERINFO_PASSWORD.sub(r"\1:***@", url, count=1)
    base, sep, rest = text.partition("?")
    if not sep:
        return cast(_T, text)
    query, hash_, fragment = rest.partition("#")
    pairs = []
    for piece in query.split("&"):
        key, eq, _ = piece.partition("=")
        pairs.append(f"{key}=***" if eq and key.lower() in _SECRET_PARAMS else piece)
    return cast(_T, f"{base}?{'&'.join(pairs)}{hash_}{fragment}")
