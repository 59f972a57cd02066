"""Parsing of storage/lock URLs and strategy specs (``full-jitter?base=0.5``)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from workhive.errors import ConfigError

__all__ = ["parse_spec", "scheme_of"]

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
